#!/usr/bin/env bash
# On a GPU machine (PyTorch with CUDA preinstalled, no network): builds alpha_attn (python/) against the CUDA
# build of the library and runs its whole pytest suite, the CUDA tests included; with --bench, also
# python/bench.py (alpha_attn against SDPA's flash, cuDNN and efficient backends, and against Alpha's own
# C++ benchmark for the binding's overhead). Logs go to $OUT (or ./gpu-logs).
# Usage: scripts/python-gpu.sh [--bench] [pytest arguments]
# The library: build/cuda (the `cuda` preset, as scripts/gpu-check.sh builds it) when torch uses the C++11
# ABI, as its wheels do; otherwise python/setup.py configures build/python-cuda with torch's ABI.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build-cuda.sh  # build_cuda
out="${OUT:-gpu-logs}"
python="${PYTHON:-python3}"
bench=0
[ "${1:-}" = --bench ] && { bench=1; shift; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
"$python" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
  'gpus', torch.cuda.device_count(), 'cxx11 abi', torch._C._GLIBCXX_USE_CXX11_ABI)" | tee "$out/torch.txt"
start=$(date +%s)
build=auto
if [ "$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')" = 1 ]; then
  build=build/cuda
  build_cuda alpha_lib alpha_attention_bench
fi
rc=0
PYTHONUNBUFFERED=1 MAX_JOBS="$(nproc)" python/run_tests.sh "$python" "$build" build/python-gpu "$@" 2>&1 |
  tee "$out/pytest.log" || rc=1
cp build/python-gpu/pip.log "$out/pip.log" 2>/dev/null
echo "python-gpu: $(( $(date +%s) - start )) s"
if [ "$bench" = 1 ]; then
  native=$([ -x build/cuda/alpha_attention_bench ] && echo "--native build/cuda/alpha_attention_bench")
  PYTHONPATH=build/python-gpu/site PYTHONUNBUFFERED=1 "$python" python/bench.py $native --out "$out" 2>&1 |
    tee "$out/bench.log" || rc=1
fi
exit $rc
