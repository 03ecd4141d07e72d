# One entry point. `make test` installs what is missing (Debian packages, a Python venv with the
# `safetensors` package over Debian's PyTorch), configures, builds and runs every test;
# `make run` does the same setup, then trains the default model on the built-in corpus and samples.
JOBS ?= $(shell nproc)
PRESET ?= release
BUILD := build/$(PRESET)
PYENV := build/pyenv
RUN_DIR ?= runs/default
# The preset decides whether the CUDA backend is built (release: where nvcc is found); ALPHA_CUDA=ON|OFF
# overrides it (CI sets ON, so a missing nvcc is an error there).
ALPHA_CUDA ?=
# Likewise for the dashboard's server (release: where cpp-httplib is found); CI sets ON.
ALPHA_DASHBOARD ?=
# The CUDA toolkit's usual home, for machines where it is installed but not on PATH.
ifeq ($(shell command -v nvcc),)
  ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
    export CUDACXX ?= /usr/local/cuda/bin/nvcc
  endif
endif

.PHONY: all deps pyenv configure build test run sanitize fuzz clean

all: build

deps:
	./scripts/install-deps.sh

# Python is only a test reference (a client that reads our checkpoints); Debian's python3-torch is the
# light CPU PyTorch, and the venv sees it through --system-site-packages. The venv also carries NVIDIA's
# cuobjdump and nvdisasm from PyPI (a few MB), for the SASS audit of the constant-time kernels.
pyenv: deps
	@test -x $(PYENV)/bin/python || /usr/bin/python3 -m venv --system-site-packages $(PYENV)
	@$(PYENV)/bin/python -c "import safetensors, ml_dtypes" 2>/dev/null || \
	  $(PYENV)/bin/pip install -q --no-deps safetensors ml_dtypes==0.4.1  # keep Debian's numpy 1.x for its torch
	@ls $(PYENV)/lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm >/dev/null 2>&1 || \
	  $(PYENV)/bin/pip install -q --no-deps nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51  # SASS audit

configure: deps pyenv
	cmake --preset $(PRESET) $(if $(ALPHA_CUDA),-DALPHA_CUDA=$(ALPHA_CUDA)) \
	  $(if $(ALPHA_DASHBOARD),-DALPHA_DASHBOARD=$(ALPHA_DASHBOARD)) -DALPHA_PYTHON=$(CURDIR)/$(PYENV)/bin/python

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

run: build
	$(BUILD)/alpha train --out $(RUN_DIR)

# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (presets `sanitize`, build/sanitize;
# the ASAN_OPTIONS/UBSAN_OPTIONS are in the test preset): a leak, a bad access or undefined behaviour fails
# the test that caused it. See docs/SECURITY.md. The preset links executables with -no-pie: a sanitized PIE
# test binary spent ~0.1 s of each of its ~1160 runs relocating 3.6 million pointers ("Time in CI"). It builds
# with clang (as make fuzz does): at -O0 with the sanitizers, clang took 400 s of CPU for what GCC took 848 s.
sanitize: deps pyenv
	cmake --preset sanitize -DALPHA_PYTHON=$(CURDIR)/$(PYENV)/bin/python
	cmake --build build/sanitize -j $(JOBS) --target alpha_tests  # and the alpha binary it runs; no benchmarks
	ctest --preset sanitize -j $(JOBS)

# Every libFuzzer target of fuzz/ for FUZZ_SECONDS seconds from its seed corpus (clang, build/fuzz).
FUZZ_SECONDS ?= 20
fuzz: deps
	JOBS=$(JOBS) ./scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf build
