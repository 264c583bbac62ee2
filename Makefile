# degenbisect: the commands a new user needs.
#   make test    install missing Debian packages, configure, build, run every test (ctest)
#   make demo    build, then run the main job on the shipped trained model (models/tiny-trained)
#   make build   configure and build only
#   make models  synthesize the shipped tiny models into models/
#   make gguf    rebuild the trained model's f32 GGUF (llama.cpp's converter output) from its recorded layout
#   make sanitize  the CPU build under ASan + UBSan (build-sanitize/), unit tests and bad-input CLI tests on it
#   make fuzz    the parsers under libFuzzer (clang, ASan + UBSan, build-fuzz/), FUZZ_SECONDS per target (default 60)
#   make clean   remove build outputs
# Variables: BUILD (build folder, default build), JOBS (parallel jobs), TEST_JOBS (tests at once, default
# JOBS + 1), CMAKE_FLAGS (e.g. -DDEGEN_CUDA=OFF).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# One test more than cores: the tests that talk to servers wait on them (llama-server polls with
# --poll 0, the adapters are Python), and a compile niced beside ctest -j2 on 2 cores got 10-20 % of
# the CPU (2026-12-06): that much stood idle.
TEST_JOBS ?= $(shell echo $$(( $(JOBS) + 1 )))
CMAKE_FLAGS ?=
BIN := $(BUILD)/degenbisect
TINY_MODELS := tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next tiny-qwen35-tp3

GGUF_DIR := models/tiny-trained-gguf
GGUF := $(GGUF_DIR)/tiny-trained-f32.gguf

FUZZ_SECONDS ?= 60

.PHONY: all deps configure build test demo models gguf sanitize fuzz clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# ctest starts the longest tests first when it knows their costs: a fresh build folder gets them
# from tests/ctest-costs.txt (a CI run's CTestCostData.txt), so that no long test starts last and
# runs alone on one core at the end (ctest keeps the file up to date from then on).
COSTS := $(BUILD)/Testing/Temporary/CTestCostData.txt
test: build gguf
	@[ -f $(COSTS) ] || { mkdir -p $(dir $(COSTS)) && cp tests/ctest-costs.txt $(COSTS); }
	@cd $(BUILD) && ctest --output-on-failure -j$(TEST_JOBS)

# The GGUF the llama.cpp tests load: llama.cpp's converter output, rebuilt byte for byte (SHA-256
# checked) from models/tiny-trained and the layout tools/gguf_layout.py recorded. Without python3 the
# tests that need it say so and skip that part.
gguf: $(GGUF)
$(GGUF): $(GGUF_DIR)/layout.json $(GGUF_DIR)/header.bin $(GGUF_DIR)/extra.bin models/tiny-trained/model.safetensors
	@python3 tools/gguf_rebuild.py $(GGUF_DIR) || echo "make: WARNING: $(GGUF) could not be rebuilt; the llama.cpp tests skip their parts that need it"

models: build
	@for m in $(TINY_MODELS); do \
	  [ -f models/$$m/model.safetensors ] || $(BIN) synth --preset $$m --out models/$$m || exit 1; \
	done

demo: build
	@scripts/demo.sh $(BIN)

sanitize: deps
	@scripts/sanitize.sh build-sanitize

fuzz:
	@scripts/install-deps.sh --fuzz
	@scripts/fuzz.sh --seconds $(FUZZ_SECONDS) --jobs $(JOBS)

clean:
	rm -rf $(BUILD) build-sanitize build-fuzz demo-out
