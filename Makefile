# degenbisect: the commands a new user needs.
#   make test    install missing Debian packages, configure, build, run every test (ctest)
#   make demo    build, then run the main job on the shipped trained model (models/tiny-trained)
#   make build   configure and build only
#   make models  synthesize the shipped tiny models into models/
#   make clean   remove build outputs
# Variables: BUILD (build folder, default build), JOBS (parallel jobs), CMAKE_FLAGS (e.g. -DDEGEN_CUDA=OFF).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
BIN := $(BUILD)/degenbisect
TINY_MODELS := tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next tiny-qwen35-tp3

.PHONY: all deps configure build test demo models clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

models: build
	@for m in $(TINY_MODELS); do \
	  [ -f models/$$m/model.safetensors ] || $(BIN) synth --preset $$m --out models/$$m || exit 1; \
	done

demo: build
	@scripts/demo.sh $(BIN)

clean:
	rm -rf $(BUILD) demo-out
