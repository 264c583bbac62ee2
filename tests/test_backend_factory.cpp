// make_backend for backend=cuda on any machine: without a CUDA build or without a device the
// configuration is untestable (UntestableError, exit 125) with the reason, never a crash; with a
// device it is the CUDA backend, marked as running the GDN ops through the CPU fallback. Toggles the
// CUDA path does not have yet are untestable too.
#include <doctest/doctest.h>

#include "build_config.h"
#include "backends/make_backend.h"
#include "model/config.h"
#include "model/synth.h"
#include "util/error.h"
#if DEGEN_WITH_CUDA
#include "cuda/device.h"
#endif

using namespace degen;

namespace {
ModelConfig tiny_config() {
  return parse_model_config(find_synth_preset("tiny-qwen35").config, "tiny-qwen35");
}
bool have_device() {
#if DEGEN_WITH_CUDA
  std::string why;
  return !cuda::list_devices(&why).empty();
#else
  return false;
#endif
}
}  // namespace

TEST_CASE("backend=cuda: untestable with the reason where it cannot run, the CUDA backend where it can") {
  const ModelConfig cfg = tiny_config();
  const RunConfig rc = parse_run_config("backend=cuda");
  if (!have_device()) {
    try {
      make_backend(rc, cfg);
      FAIL("make_backend(backend=cuda) succeeded without a device");
    } catch (const UntestableError& e) {
      const std::string msg = e.what();
      MESSAGE(msg);
      CHECK(msg.find("backend=cuda") != std::string::npos);
      CHECK(e.code() == ExitCode::untestable);
    }
    return;
  }
  auto be = make_backend(rc, cfg);
  CHECK(be->name().find("cuda:0") == 0);
  CHECK(be->name().find("fallback") == std::string::npos);  // the GDN core runs on the device (issue 10)
  CHECK(be->act_dtype() == DType::bf16);
  CHECK(make_backend(parse_run_config("backend=cuda,gemm=simple"), cfg)->name().find("gemm-simple") != std::string::npos);
  CHECK(make_backend(parse_run_config("backend=cuda,graphs=on"), cfg)->graphs());
  CHECK_FALSE(be->graphs());
  CHECK_THROWS_WITH_AS(make_backend(parse_run_config("backend=cuda,graphs=on,tp=2"), cfg),
                       doctest::Contains("graphs=on with tp > 1 is not built"), UntestableError);
  CHECK_THROWS_AS(make_backend(parse_run_config("backend=cuda,precision=bf16"), cfg), UntestableError);
}

TEST_CASE("backend=cuda: a model larger than the device's free memory is untestable, naming needed and free") {
  if (!have_device()) return;  // covered above
  ModelConfig cfg = parse_model_config(find_synth_preset("qwen3next-80b-a3b").config, "qwen3next-80b-a3b");
  cfg.num_experts *= 4;  // ~640 GB of bf16 weights: larger than any single device
  try {
    make_backend(parse_run_config("backend=cuda"), cfg);
    FAIL("a model of hundreds of GB fit on one device");
  } catch (const UntestableError& e) {
    const std::string msg = e.what();
    MESSAGE(msg);
    CHECK(msg.find("does not fit") != std::string::npos);
    CHECK(msg.find("free") != std::string::npos);
  }
}
