#!/usr/bin/env bash
# On a GPU machine, after scripts/attention-gpu.sh has built build/cuda: Nsight Compute's speed-of-light,
# warp-state and occupancy sections for the bf16 flash attention kernels at one shape, and the SASS
# instruction mix of the forward kernel, into $OUT (or ./gpu-logs).
# Usage: scripts/attention-profile.sh [B H T D]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
b=${1:-2} h=${2:-16} t=${3:-8192} d=${4:-128}
ncu -k "regex:mma_forward_kernel|key_grads_kernel|query_grads_kernel" -c 3 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis build/cuda/alpha_attention_bench --batch "$b" --heads "$h" --seq "$t" \
  --head-dim "$d" --iters 1 --warmup 0 > "$out/ncu-d$d.txt" 2>&1
grep -E "^  [a-z_:<>, 0-9A-Z]+\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|L1/TEX Hit|Shared" "$out/ncu-d$d.txt" | head -80
obj=$(find build/cuda -name "flash_attention_mma_forward.cu.o" | head -1)
cuobjdump -sass "$obj" > "$out/forward.sass" 2>&1
echo "forward SASS: $(grep -c HMMA "$out/forward.sass") HMMA, $(grep -c LDSM "$out/forward.sass") LDSM, $(grep -c MUFU "$out/forward.sass") MUFU, $(grep -cE "LDL|STL" "$out/forward.sass") local"
