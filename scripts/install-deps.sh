#!/usr/bin/env bash
# Installs the Debian packages Alpha needs that are missing (nothing when all are present).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev libsentencepiece-dev
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev python3 python3-numpy
          libcpp-httplib-dev chromium   # the dashboard's HTTP server; the browser its test loads the page in
          clang libclang-rt-dev libomp-dev llvm)  # make fuzz: libFuzzer and the sanitizer runtimes, OpenMP
                                                  # for clang, llvm-symbolizer for readable reports
if [ "${ALPHA_PYTHON_TESTS:-1}" = 1 ]; then
  packages+=(python3-torch python3-pip python3-venv
             libtorch-dev pybind11-dev python3-pytest)  # python/ (alpha_attn): torch's C++ headers, pytest
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
