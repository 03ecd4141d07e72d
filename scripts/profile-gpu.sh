#!/usr/bin/env bash
# On a GPU machine: the profiler's GPU test and the mixed-precision training tests, then `alpha train --profile`
# of one bf16 step of `seed` (batch 16 x 512) and of `gpt2-124m` (batch 16 x 1024), each step's per-kernel table
# and profile.json into $OUT (or ./gpu-logs); with --bench, bench/train_seed.py --profile after them (Alpha
# against PyTorch eager and torch.compile, same run, and one step of Alpha and of torch.compile kernel by
# kernel). BUILD is a CUDA build folder holding alpha and tests/alpha_tests.
# Usage: scripts/profile-gpu.sh [BUILD (default build/cuda)] [--bench]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=build/cuda bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    -*) echo "profile-gpu: unknown flag $arg" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done
out="${OUT:-gpu-logs}" runs=$(mktemp -d)
mkdir -p "$out"
export ALPHA_CONFIGS_DIR=$PWD/configs
rc=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$build/tests/alpha_tests" --gtest_filter='CudaProfiler.*:CudaTraining.Bf16*:CudaTraining.F16*' \
  > "$out/tests.log" 2>&1 || rc=1
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|Expected|Which is" "$out/tests.log" | head -40
common=(--device cuda --precision bf16 --steps 4 --profile --eval-every 0 --sample-tokens 0 --save-every 0
        --keep-last 1 --batch-size 16)
for config in seed gpt2-124m; do
  data=()
  [ "$config" != seed ] && data=(--data "$runs/seed/data")  # the same tokens; its vocabulary fits both
  if "$build/alpha" train --config "$config" "${common[@]}" "${data[@]}" --out "$runs/$config" \
       > "$out/$config.log" 2>&1; then
    cp "$runs/$config/profile.json" "$out/$config-profile.json"
    sed -n '/^profile of step/,/^(all of it/p' "$out/$config.log" | cut -c1-160
  else
    rc=1
    tail -5 "$out/$config.log"
  fi
done
if [ "$bench" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT_S:-600}" python3 bench/train_seed.py --alpha "$build/alpha" \
    --out "$out" --profile > "$out/bench.log" 2>&1 || rc=1
  tail -36 "$out/bench.log"
fi
rm -rf "$runs"
exit $rc
