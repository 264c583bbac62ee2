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
  check_faults(rc, cfg);  // InputError / UntestableError before anything runs
  if (rc.backend == BackendKind::cuda)
    throw UntestableError(cat("config ", rc.str(), ": the CUDA backend's forward pass is not built yet"));
  // TODO(tensor parallelism issue): a CPU emulation of tp > 1 (split products, partial sums).
  if (rc.tp > 1) throw UntestableError(cat("config ", rc.str(), ": the CPU backend has no tensor parallelism"));
  switch (rc.precision) {
    case Precision::ref: return std::make_unique<CpuBackend>(CpuPrecision::ref);
    case Precision::fp64: return std::make_unique<CpuBackend>(CpuPrecision::fp64);
    case Precision::bf16: return std::make_unique<CpuBackend>(CpuPrecision::bf16);
  }
  throw std::logic_error("make_backend: unhandled precision");
}

EngineOptions engine_options(const RunConfig& rc) {
  EngineOptions o;
  o.gdn = rc.gdn.base;
  o.run = rc;
  return o;
}

}  // namespace degen
