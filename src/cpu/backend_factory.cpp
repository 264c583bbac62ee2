// Backend selection from a RunConfig (see backend_factory.h).
#include "engine/backend_factory.h"

#include "build_config.h"
#include "cpu/cpu_backend.h"
#include "util/error.h"

namespace degen {

std::unique_ptr<Backend> make_backend(const RunConfig& rc, const ModelConfig& cfg) {
  validate_run_config(rc, cfg);
  std::string why = rc.untestable_reason(kHaveCuda);
  if (!why.empty()) throw UntestableError(cat("config ", rc.str(), ": ", why));
  if (rc.backend == BackendKind::cuda)
    throw UntestableError(cat("config ", rc.str(), ": the CUDA backend's forward pass is not built yet"));
  switch (rc.precision) {
    case Precision::ref: return std::make_unique<CpuBackend>(CpuPrecision::ref);
    case Precision::fp64: return std::make_unique<CpuBackend>(CpuPrecision::fp64);
    case Precision::bf16:
      throw UntestableError(cat("config ", rc.str(), ": precision=bf16 (GPU storage emulation) is not built yet"));
  }
  throw std::logic_error("make_backend: unhandled precision");
}

EngineOptions engine_options(const RunConfig& rc) {
  EngineOptions o;
  o.gdn = rc.gdn.base;
  return o;
}

}  // namespace degen
