# The README's two commands. Each installs what is missing (scripts/setup.sh), configures,
# builds (Release) and runs. Everything else is plain CMake under build/.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build run test clean setup-build setup-test

all: build

setup-build:
	@scripts/setup.sh build

setup-test:
	@scripts/setup.sh test

build: setup-build
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: the walkthrough of one self-attention computation, then a short benchmark.
run: build
	$(BUILD_DIR)/qkv explain
	$(BUILD_DIR)/qkv bench --batch 1 --heads 12 --seq 512 --dim 64
	$(BUILD_DIR)/qkv bench --batch 1 --heads 12 --seq 512 --dim 64 --causal

# Every test: GoogleTest (release and ASan+UBSan builds) and pytest against PyTorch, via ctest.
test: setup-test build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
