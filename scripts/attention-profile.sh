#!/usr/bin/env bash
# On a GPU machine, after scripts/attention-gpu.sh has built build/cuda: Nsight Compute's speed-of-light,
# warp-state, occupancy and memory sections for the bf16 flash attention kernels at one shape, and the SASS
# instruction mix of the forward kernel, into $OUT (or ./gpu-logs). With --backward: the backward kernels
# only (deterministic dK/dV and dQ, then the atomic-dQ dK/dV), with every section (--set full), beside
# PyTorch's FlashAttention-2 backward kernel at the same shape (the peer whose speed issue 5 asks for).
# Usage: scripts/attention-profile.sh [--backward] [B H T D]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
backward=0
[ "${1:-}" = --backward ] && { backward=1; shift; }
b=${1:-2} h=${2:-16} t=${3:-8192} d=${4:-128}
shape=(--batch "$b" --heads "$h" --seq "$t" --head-dim "$d" --iters 1 --warmup 0)
summary="Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Shared|Bank|Local|Executed Ipc|Pipe"
if [ "$backward" = 1 ]; then
  ncu -k "regex:key_grads_kernel|query_grads_kernel" -c 3 --set full build/cuda/alpha_attention_bench "${shape[@]}" \
    > "$out/ncu-backward-d$d.txt" 2>&1
  ncu -k "regex:flash_bwd" -c 3 --set full python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn($b, $h, $t, $d, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v).backward(torch.randn_like(q))
torch.cuda.synchronize()" > "$out/ncu-fa2-backward-d$d.txt" 2>&1
  for f in "$out/ncu-backward-d$d.txt" "$out/ncu-fa2-backward-d$d.txt"; do
    echo "== $f"; grep -E "^  [a-zA-Z_].*\(|$summary" "$f" | head -120
  done
  exit 0
fi
ncu -k "regex:mma_forward_kernel|key_grads_kernel|query_grads_kernel" -c 3 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis build/cuda/alpha_attention_bench "${shape[@]}" > "$out/ncu-d$d.txt" 2>&1
grep -E "^  [a-z_:<>, 0-9A-Z]+\(|$summary" "$out/ncu-d$d.txt" | head -80
obj=$(find build/cuda -name "flash_attention_mma_forward.cu.o" | head -1)
cuobjdump -sass "$obj" > "$out/forward.sass" 2>&1
echo "forward SASS: $(grep -c HMMA "$out/forward.sass") HMMA, $(grep -c LDSM "$out/forward.sass") LDSM, $(grep -c MUFU "$out/forward.sass") MUFU, $(grep -cE "LDL|STL" "$out/forward.sass") local"
