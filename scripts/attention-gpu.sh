#!/usr/bin/env bash
# On a GPU machine: builds the CUDA backend (sm_90a, build/cuda), then runs the attention harness checks,
# the GPU attention tests and, with --bench, the attention benchmark against PyTorch SDPA (flash, cuDNN);
# logs go to $OUT (or ./gpu-logs). With --jvp, the attention JVP's instead: its harness check, its GPU and
# CPU tests (and the naive JVP's) and, with --bench, bench/attention_jvp.py (against torch.func.jvp). With --configs,
# also the Hopper forward's configurations side by side (bench/tma_forward_configs.cu: $OUT/tma_forward_configs.jsonl).
# Usage: scripts/attention-gpu.sh [--jvp] [--bench] [--full-bench] [--configs] [--no-check]
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
bench="" check=1 configs=0
filter=attention labels="-L cuda" tests="Flash|Attention|Training" bench_script=bench/flash_attention.py
for arg in "$@"; do
  case "$arg" in
    --jvp) filter=attention_jvp labels="" tests="AttentionJvp|NaiveLowPrecisionAttention"
      bench_script=bench/attention_jvp.py ;;
    --bench) bench="--quick" ;;
    --full-bench) bench="full" ;;
    --no-check) check=0 ;;
    --configs) configs=1 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
start=$(date +%s)
targets=(alpha alpha_attention_bench alpha_tests)
[ "$configs" = 1 ] && targets+=(alpha_tma_forward_configs)
build_cuda "${targets[@]}"
echo "build: $(( $(date +%s) - start )) s"
rc=0
if [ "$check" = 1 ]; then
  build/cuda/alpha check kernels --filter "$filter" --seed "$(date +%s)" > "$out/check-$filter.log" 2>&1 || rc=1
  grep -E "FAIL" "$out/check-$filter.log" | head -40
  tail -1 "$out/check-$filter.log"
  (cd build/cuda && ctest $labels -R "$tests" --output-on-failure > "$out/ctest-$filter.log" 2>&1) || rc=1
  grep -E "Failed|\*\*\*" "$out/ctest-$filter.log" | head -20
  tail -3 "$out/ctest-$filter.log"
fi
if [ -n "$bench" ]; then
  flags=$([ "$bench" = "--quick" ] && echo --quick)
  PYTHONUNBUFFERED=1 python3 "$bench_script" --bench build/cuda/alpha_attention_bench $flags --out "$out" \
    2>&1 | tee "$out/bench-$filter.log" || rc=1
fi
if [ "$configs" = 1 ]; then
  build/cuda/alpha_tma_forward_configs > "$out/tma_forward_configs.jsonl" || rc=1
  python3 - "$out/tma_forward_configs.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    mask = "causal" if r["causal"] else "no mask"
    print(f"D {r['head_dim']:3d}  B {r['batch']:3d}  T {r['seq']:5d}  {mask:7s}  {r['tflops']:6.1f} TFLOP/s  "
          f"max diff {r['max_diff']:.3g}  {r['config']}")
PY
fi
exit $rc
