#!/usr/bin/env bash
# On a GPU machine: issue 8's constant-time checks of the bf16 flash attention kernels, in one go, with
# logs in $OUT (or ./gpu-logs): the SASS audit (constant-time kernels clean, leaky control flagged), the
# dudect timing test and its positive control (unpadded, and padded to a time budget), bitwise
# repeatability (1000 runs), the Nsight Compute counter differential and its positive control, each
# launch's clock under Nsight Compute, and the speed of constant_time next to the default call
# and PyTorch SDPA. Expects a CUDA build in $BUILD (default build/cuda: scripts/attention-gpu.sh makes one).
# Usage: scripts/constant-time-gpu.sh [launches per class, default 100000]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}" build="${BUILD:-build/cuda}" per_class="${1:-100000}"
mkdir -p "$out"
tool="$build/alpha_constant_time"
rc=0
step() {  # step NAME COMMAND...: runs, logs to $out/NAME.log, prints the log's last lines
  local name="$1"; shift
  "$@" > "$out/$name.log" 2>&1; local status=$?
  echo "== $name (exit $status)"; tail -n "${TAIL:-12}" "$out/$name.log"
  [ "$status" = 0 ] || rc=1
}
# The kernels security.SassAuditConstantTimeKernels audits (tests/CMakeLists.txt): on Hopper the timed calls
# run the wgmma ones.
step audit-constant-time python3 scripts/sass_audit.py "$tool" \
  --kernels "mma_forward_kernel.*Lb0E|tma_forward_kernel|wgmma_backward.*_grads_kernel|mma_backward_cu.*query_grads_kernel|mma_backward_cu.*key_grads_kernel.*Lb0E|attention_delta_kernel"
TAIL=3 step audit-leaky-control python3 scripts/sass_audit.py "$tool" --leaky "mma_forward_kernel.*Lb1E"
# The timing test fails on the GPU's data-dependent clock (docs/SECURITY.md); --pad is the experiment of
# padding each launch to a time budget on the GPU (it did not remove the difference).
step timing-constant-time "$tool" timing --launches-per-class "$per_class"
step timing-leaky-control "$tool" timing --leaky --launches-per-class "$per_class"
step timing-padded "$tool" timing --pad 1.1 --launches-per-class "$per_class"
step timing-padded-leaky-control "$tool" timing --pad 1.1 --leaky --launches-per-class "$per_class"
TAIL=1 step repeat "$tool" repeat --runs 1000
TAIL=20 step counters python3 bench/constant_time.py --tool "$tool" --out "$out"
TAIL=9 step clocks python3 bench/constant_time.py --tool "$tool" --mode clocks --clock-controls none --out "$out"
TAIL=8 step speed python3 bench/flash_attention.py --bench "$build/alpha_attention_bench" --constant-time --out "$out"
exit $rc
