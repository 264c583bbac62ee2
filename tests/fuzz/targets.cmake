# The fuzz targets: tests/fuzz/fuzz_<name>.cpp each. Read by tests/fuzz/CMakeLists.txt (the libFuzzer
# build) and tests/CMakeLists.txt (degen_fuzz_replay in the normal build).
set(DEGEN_FUZZ_TARGETS safetensors config tokenizer encode cases golden_manifest golden_data dump
    run_config sweep_matrix sweep_results replay report http_llama http_openai golden_resume sweep_shards
    http_sglang http_body manifest_numbers)
