#!/usr/bin/env bash
# Builds alpha_attn against an existing CMake build of the project (pip install --no-build-isolation into a
# folder of its own, so no environment is touched) and runs its pytest suite from there. CTest's
# python.AlphaAttn runs it (make test); scripts/python-gpu.sh runs it on a GPU machine.
# Usage: python/run_tests.sh PYTHON BUILD_DIR WORK_DIR [pytest arguments]
# BUILD_DIR "auto" lets python/setup.py configure and build its own (build/python-cpu or build/python-cuda).
# Reports skipped (exit 77) when PYTHON lacks torch, its C++ headers or pytest, except under CI=true.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON BUILD_DIR WORK_DIR [pytest arguments]" >&2; exit 2; }
absolute() { case "$1" in /*) echo "$1" ;; */*) echo "$PWD/$1" ;; *) command -v "$1" ;; esac; }
python=$(absolute "$1") work=$(absolute "$3")
build=$([ "$2" = auto ] && echo "" || absolute "$2")
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
if ! "$python" - <<'PY'
import os, sys, pytest, torch
from torch.utils.cpp_extension import include_paths
sys.exit(0 if any(os.path.exists(os.path.join(p, "torch", "extension.h")) for p in include_paths()) else 1)
PY
then
  echo "alpha_attn: $python lacks torch, torch's C++ headers (Debian: libtorch-dev, pybind11-dev) or pytest"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/site"
start=$(date +%s)
if ! env ${build:+ALPHA_BUILD_DIR="$build"} MAX_JOBS="${MAX_JOBS:-1}" "$python" -m pip install --no-build-isolation --no-deps \
    --no-index --disable-pip-version-check -v --target "$work/site" "$root/python" > "$work/pip.log" 2>&1; then
  grep -E "error|Error" "$work/pip.log" | head -40
  tail -20 "$work/pip.log"
  exit 1
fi
echo "alpha_attn: built in $(( $(date +%s) - start )) s (log: $work/pip.log)"
cd "$work"  # away from python/, so that alpha_attn is the installed copy
PYTHONPATH="$work/site" PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -p no:cacheprovider -rs "$root/python/tests" "$@"
