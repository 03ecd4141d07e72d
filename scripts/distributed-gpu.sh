#!/usr/bin/env bash
# On a machine with N GPUs (2×H200 by default; 4 or 8 for the scaling run of issue 12): the checks of
# multi-GPU training (docs/DISTRIBUTED.md), in one command, logs and a summary in $OUT (or ./gpu-logs):
#   0. the NCCL communicator's GPU tests (tests/cuda/test_cuda_nccl.cpp: collectives, data parallel and
#      ZeRO-1 against the CPU, a hung rank named within the timeout);
#   1. loss match: S steps (--loss-steps, 100) of `seed` in f32 on 1 GPU (16/N sequences × N accumulated
#      micro-batches) and on N GPUs (batch 16/N each: the same global batch and tokens): with
#      --deterministic-reduce true, plain and ZeRO-1, every loss bit for bit; with NCCL's reduction, plain
#      and ZeRO-1, every step's loss within 1e-3 relative; and, as a yardstick, 1 GPU at batch 16 without
#      accumulation against 1 GPU accumulating (the rows added in another order: docs/DISTRIBUTED.md);
#   2. deterministic reduction: a second N-GPU run: losses and final weights bit for bit, and the final
#      weights bit for bit those of the 1-GPU run; and bf16 on N GPUs, ZeRO-1 (its bf16 copies gathered, the
#      f32 values only for the checkpoint) against plain: losses and final weights bit for bit;
#   3. throughput: tokens/s of `seed` and `gpt2-124m` (bf16) on 1 GPU and on N GPUs, plain and ZeRO-1, at
#      the same batch per GPU -> scaling efficiency = tokens/s on N / (N × tokens/s on 1);
#   2c. the step captured in a CUDA graph with its collectives (--cuda-graphs true): bf16 plain and ZeRO-1 and f32
#      deterministic on N GPUs against the same runs without the graph, losses and final weights bit for bit;
#   4. failure: `alpha train --gpus N`, worker rank 1 killed with SIGKILL mid-run: rank 0 must stop
#      within the collective timeout (20 s) + 30 s, with an error naming rank 1, and the launcher too; again with
#      the step replayed from a CUDA graph.
# Usage: scripts/distributed-gpu.sh [--skip-build] [--gpus N (2, 4, 8 or 16; default 2)] [--loss-steps S]
#        [--throughput-only (step 3 alone) | --loss-only (steps 0-2 alone) | --no-throughput (all but step 3)
#         | --failure-only (step 4 alone)]
# (issue 12: --gpus 8 --loss-steps 200). Exit code 0 only when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
build=1 world=2 loss_steps=100 throughput_only=0 loss_only=0 no_throughput=0 failure_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) build=0 ;;
    --gpus) world="${2:-}"; shift ;;
    --loss-steps) loss_steps="${2:-}"; shift ;;
    --throughput-only) throughput_only=1 ;;
    --loss-only) loss_only=1 ;;
    --no-throughput) no_throughput=1 ;;
    --failure-only) failure_only=1 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ $(( throughput_only + loss_only + no_throughput + failure_only )) -gt 1 ] &&
  { echo "--throughput-only, --loss-only, --no-throughput and --failure-only: choose one" >&2; exit 2; }
case "$world" in
  2 | 4 | 8 | 16) ;;  # they divide the loss match's global batch of 16
  *) echo "--gpus: expected 2, 4, 8 or 16, got $world" >&2; exit 2 ;;
esac
[[ "$loss_steps" =~ ^[1-9][0-9]*$ ]] || { echo "--loss-steps: expected a positive step count, got '$loss_steps'" >&2; exit 2; }
mkdir -p "$out"
runs="$(mktemp -d /tmp/alpha-distributed.XXXXXX)"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
rc=0
fail() { say "FAIL: $*"; rc=1; }
finish() {  # the summary line, the runs removed, the exit status
  say "total: $(( $(date +%s) - start )) s; $([ $rc = 0 ] && echo 'all checks passed' || echo 'some checks FAILED')"
  rm -rf "$runs"
  exit $rc
}

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi topo -m > "$out/topology.txt" 2>&1
gpus=$(nvidia-smi --list-gpus | wc -l)
[ "$gpus" -ge "$world" ] || { say "FAIL: needs $world GPUs, found $gpus"; exit 1; }
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines (alpha sets it too)
export NCCL_DEBUG=WARN

start=$(date +%s)
if [ "$build" = 1 ]; then
  build_cuda -DALPHA_NCCL=ON alpha alpha_tests
fi
say "build: $(( $(date +%s) - start )) s"
alpha="$PWD/build/cuda/alpha"

# Quiet runs: no validation, no sample, one checkpoint at the end. `run NAME ARGS...` logs to $out/NAME.log.
common=(--eval-every 0 --sample-tokens 0 --save-every 0 --keep-last 1)
run() {
  local name="$1"; shift
  local t0=$(date +%s)
  timeout -k 10 300 "$alpha" train "${common[@]}" --out "$runs/$name" "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "$name: exit $status, $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
  [ $status = 0 ] || { tail -5 "$out/$name.log"; fail "$name exited with $status"; }
  cp "$runs/$name/metrics.jsonl" "$out/$name.metrics.jsonl" 2>/dev/null
  return $status
}

# Python reads the metrics (stdlib only).
compare_losses() {  # compare_losses A B TOLERANCE -> prints the largest relative difference, fails above
  python3 - "$runs/$1/metrics.jsonl" "$runs/$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    print(f"step counts differ: {len(a)} vs {len(b)}"); sys.exit(1)
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
identical = all(x["loss"] == y["loss"] for x, y in zip(a, b))
print(f"{len(a)} steps, max relative loss difference {worst:.3e} (tolerance {tol:g}), "
      f"bit-identical losses: {identical}, last losses {a[-1]['loss']:.6f} / {b[-1]['loss']:.6f}")
sys.exit(0 if worst <= tol else 1)
EOF
}
tokens_per_second() {  # median over steps 6.. of the run's global tokens/s; 0 when the run has none
  python3 - "$runs/$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    print(f"{statistics.median(r['tokens_per_second'] for r in rows[5:]):.0f}")
except Exception:
    print(0)
EOF
}
efficiency() { python3 -c "print(f'{$2 / ($world * $1):.3f}' if $1 > 0 else 'n/a')"; }

if [ "$throughput_only" = 0 ] && [ "$failure_only" = 0 ]; then
say "== 0. NCCL communicator tests"
timeout -k 10 180 build/cuda/tests/alpha_tests --gtest_filter='CudaNccl*' > "$out/test-nccl.log" 2>&1 ||
  fail "CudaNccl tests (see test-nccl.log)"
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/test-nccl.log" | tee -a "$summary"

say "== 1. loss match: seed, f32, $loss_steps steps, global batch 16 x 256 tokens, 1 GPU vs $world"
f32=(--config seed --precision f32 --steps "$loss_steps" --seq-len 256)
per_gpu=$((16 / world))
n_gpus=(--gpus "$world" --batch-size "$per_gpu" --data "$runs/one-gpu/data")
run one-gpu "${f32[@]}" --device cuda --batch-size "$per_gpu" --grad-accum "$world"
# The deterministic reduction adds the ranks' gradients in rank order, as the accumulation adds the
# micro-batches': bit for bit, plain and ZeRO-1.
run det-a "${f32[@]}" "${n_gpus[@]}" --deterministic-reduce true
line=$(compare_losses one-gpu det-a 0) || fail "1 GPU vs $world GPUs deterministic: $line"
say "1 GPU ($per_gpu x $world accumulated) vs $world GPUs, deterministic reduction: $line"
run det-zero1 "${f32[@]}" "${n_gpus[@]}" --deterministic-reduce true --zero1 true
line=$(compare_losses one-gpu det-zero1 0) || fail "1 GPU vs $world GPUs deterministic ZeRO-1: $line"
say "1 GPU ($per_gpu x $world accumulated) vs $world GPUs, deterministic reduction, ZeRO-1: $line"
# NCCL's own reduction adds in its ring's order: within 1e-3 where rounding stays small; the 1-GPU pair
# below (the same batch, the rows added in another order) shows how far the order alone moves the loss.
run n-gpu "${f32[@]}" "${n_gpus[@]}"
line=$(compare_losses one-gpu n-gpu 1e-3) || fail "1 GPU vs $world GPUs (NCCL's reduction): $line"
say "1 GPU ($per_gpu x $world accumulated) vs $world GPUs, NCCL's reduction: $line"
run n-gpu-zero1 "${f32[@]}" "${n_gpus[@]}" --zero1 true
line=$(compare_losses one-gpu n-gpu-zero1 1e-3) || fail "1 GPU vs $world GPUs ZeRO-1 (NCCL's reduction): $line"
say "1 GPU ($per_gpu x $world accumulated) vs $world GPUs ZeRO-1, NCCL's reduction: $line"
run one-gpu-16 "${f32[@]}" --device cuda --batch-size 16 --data "$runs/one-gpu/data"
line=$(compare_losses one-gpu one-gpu-16 1e-3)
say "(yardstick) 1 GPU, batch 16 vs $per_gpu x $world accumulated: $line"

say "== 2. deterministic reduction: two $world-GPU runs, bit for bit"
run det-b "${f32[@]}" "${n_gpus[@]}" --deterministic-reduce true
line=$(compare_losses det-a det-b 0) || fail "deterministic runs differ: $line"
say "deterministic a vs b: $line"
last=$(printf "step_%08d" "$loss_steps")
for other in det-b one-gpu; do
  if cmp -s "$runs/det-a/checkpoints/$last/model.safetensors" "$runs/$other/checkpoints/$last/model.safetensors"; then
    say "deterministic $world GPUs vs $other: final weights bit-identical"
  else
    fail "deterministic $world GPUs vs $other: final weights differ"
  fi
done

say "== 2b. bf16: ZeRO-1 (the weights' bf16 copies gathered, the f32 values gathered for the checkpoint) vs plain"
bf16=(--config seed --precision bf16 --steps "$loss_steps" --seq-len 256 "${n_gpus[@]}")
run bf16-plain "${bf16[@]}"
run bf16-zero1 "${bf16[@]}" --zero1 true
line=$(compare_losses bf16-plain bf16-zero1 0) || fail "bf16 $world GPUs, ZeRO-1 vs plain: $line"
say "bf16 $world GPUs, ZeRO-1 vs plain: $line"
if cmp -s "$runs/bf16-plain/checkpoints/$last/model.safetensors" "$runs/bf16-zero1/checkpoints/$last/model.safetensors"; then
  say "bf16 $world GPUs, ZeRO-1 vs plain: final weights bit-identical"
else
  fail "bf16 $world GPUs, ZeRO-1 vs plain: final weights differ"
fi

say "== 2c. the step captured in a CUDA graph with its collectives (--cuda-graphs true) vs the same steps without"
# Every step after a run's first is a replay: the same kernels and collectives, so the same bits.
graphed_pair() {  # graphed_pair EAGER_RUN GRAPHED_RUN: losses and final weights bit for bit
  line=$(compare_losses "$1" "$2" 0) || fail "$2 vs $1: $line"
  say "$2 vs $1: $line"
  cmp -s "$runs/$1/checkpoints/$last/model.safetensors" "$runs/$2/checkpoints/$last/model.safetensors" &&
    say "$2 vs $1: final weights bit-identical" || fail "$2 vs $1: final weights differ"
}
run bf16-plain-graphs "${bf16[@]}" --cuda-graphs true && graphed_pair bf16-plain bf16-plain-graphs
run bf16-zero1-graphs "${bf16[@]}" --zero1 true --cuda-graphs true && graphed_pair bf16-zero1 bf16-zero1-graphs
run det-graphs "${f32[@]}" "${n_gpus[@]}" --deterministic-reduce true --cuda-graphs true && graphed_pair det-a det-graphs
fi

[ "$loss_only" = 1 ] && finish
if [ "$no_throughput" = 0 ] && [ "$failure_only" = 0 ]; then
  say "== 3. throughput (bf16, same batch per GPU; median tokens/s over steps 6-30)"
  echo "| config | batch per GPU x seq | 1 GPU tok/s | $world GPUs tok/s | efficiency | $world GPUs ZeRO-1 tok/s | efficiency |" > "$out/scaling.md"
  echo "|---|---|---|---|---|---|---|" >> "$out/scaling.md"
  for spec in "seed 32 512" "gpt2-124m 16 1024"; do
    read -r config batch seq <<< "$spec"
    perf=(--config "$config" --precision bf16 --steps 30 --batch-size "$batch" --seq-len "$seq")
    run "$config-1" "${perf[@]}" --device cuda || continue
    run "$config-n" "${perf[@]}" --gpus "$world" --data "$runs/$config-1/data"
    run "$config-n-zero1" "${perf[@]}" --gpus "$world" --data "$runs/$config-1/data" --zero1 true
    t1=$(tokens_per_second "$config-1"); tn=$(tokens_per_second "$config-n"); tz=$(tokens_per_second "$config-n-zero1")
    en=$(efficiency "$t1" "$tn"); ez=$(efficiency "$t1" "$tz")
    echo "| $config | $batch x $seq | $t1 | $tn | $en | $tz | $ez |" >> "$out/scaling.md"
    say "$config: 1 GPU $t1 tok/s, $world GPUs $tn tok/s (efficiency $en), ZeRO-1 $tz tok/s (efficiency $ez)"
  done
  cat "$out/scaling.md"
fi

[ "$throughput_only" = 1 ] && finish
say "== 4. failure: worker rank 1 killed mid-run, dist timeout 20 s (without, then with --cuda-graphs true)"
[ -d "$runs/one-gpu/data" ] || "$alpha" prepare --builtin --out "$runs/one-gpu/data" > "$out/prepare.log" 2>&1 ||
  fail "alpha prepare (see prepare.log)"
kill_test() {  # kill_test NAME [TRAIN ARGS...]
  local name="$1"; shift
  "$alpha" train "${common[@]}" --config seed --gpus "$world" --batch-size 8 --seq-len 256 --steps 100000 \
    --data "$runs/one-gpu/data" --dist-timeout-s 20 --out "$runs/$name" "$@" > "$out/$name.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 120); do  # until training runs (metrics written), at most 60 s
    [ -s "$runs/$name/metrics.jsonl" ] && [ "$(wc -l < "$runs/$name/metrics.jsonl")" -ge 5 ] && break
    sleep 0.5
  done
  local victim=""
  for pid in $(pgrep -P "$launcher"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$pid
  done
  if [ -z "$victim" ]; then
    fail "$name: no worker with RANK=1 found under launcher $launcher"
    kill "$launcher" 2>/dev/null
    return
  fi
  kill -9 "$victim"
  local killed_at=$(date +%s)
  for _ in $(seq 1 120); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$launcher" 2>/dev/null; then
    fail "$name: the launcher still runs 60 s after rank 1 was killed"
    pkill -P "$launcher"; kill "$launcher"
  fi
  wait "$launcher"; local status=$?
  local took=$(( $(date +%s) - killed_at ))
  say "$name: launcher exited with $status, $took s after rank 1 was killed"
  grep -E "rank 1" "$out/$name.log" | head -5 | tee -a "$summary"
  [ "$status" != 0 ] || fail "$name: the launcher exited 0"
  grep -q "worker rank 1 exited" "$out/$name.log" || fail "$name: the launcher did not name rank 1"
  grep -q "^alpha: \[nccl\] .* rank 1 failed" "$out/$name.log" || fail "$name: rank 0's error did not name rank 1"
  [ "$took" -le 50 ] || fail "$name: took $took s (timeout 20 s + 30 s grace)"
}
kill_test kill
kill_test kill-graphs --cuda-graphs true

finish
