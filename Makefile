# The two commands of the README. Both install missing Debian packages and
# build as needed. BUILD_DIR and CMAKE_ARGS may be overridden (CI does).
BUILD_DIR ?= build
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)

.PHONY: run test build deps clean format

deps:
	@scripts/install-deps

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The built-in default scenario: Llama-3 70B on 1,024 H100 GPUs, every
# strategy side by side; traces and summary.json under out/.
run: build
	$(BUILD_DIR)/bin/hzp simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 \
	  --strategy all --global-batch-tokens 16M --recompute full --out-dir out --force

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD_DIR) out
