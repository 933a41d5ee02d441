# The README's two commands. Each installs what is missing (scripts/setup.sh), configures,
# builds (Release) and runs. Everything else is plain CMake under build/.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all configure build build-cli run test clean setup-build setup-test

all: build

setup-build:
	@scripts/setup.sh build

setup-test:
	@scripts/setup.sh test

configure: setup-build
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

# Everything: the libraries, the CLI, the Python module, the benchmarks and every test.
build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what `make run` runs: the CLI (build/qkv) and the three libraries under it; no tests,
# no sanitized copies, no fuzzers, no Python module.
build-cli: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target qkv_cli

# The main job: the embedded date translator (trained by qkv itself, models/dates) on a
# few dates written by people, with its cross-attention as terminal heatmaps, and every
# layer and head of one translation as an HTML page.
run: build-cli
	$(BUILD_DIR)/qkv translate --show "Saturday, 21 November 2026" "the 3rd of March, 1999" "2026年11月21日"
	$(BUILD_DIR)/qkv translate --html $(BUILD_DIR)/attention.html --svg $(BUILD_DIR)/attention.svg "Saturday, 21 November 2026"
	@echo "open $(abspath $(BUILD_DIR))/attention.html in a browser to explore every layer and head"

# Every test: GoogleTest (release and ASan+UBSan builds) and pytest against PyTorch, via ctest.
test: setup-test build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
