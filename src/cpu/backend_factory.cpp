// Backend selection from a RunConfig (see backend_factory.h).
#include "engine/backend_factory.h"

#include "build_config.h"
#include "cpu/cpu_backend.h"
#include "util/error.h"
#if DEGEN_WITH_CUDA
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "model/weights.h"
#endif

namespace degen {

#if DEGEN_WITH_CUDA
namespace {

// Device memory a model needs on the CUDA path: every weight of the table in bf16 (A_log and
// dt_bias as fp32 at most) plus a working margin for activations, KV caches and states.
constexpr int64_t kCudaWorkspaceBytes = int64_t(2) << 30;

int64_t cuda_weight_bytes(const ModelConfig& cfg) {
  CheckpointLayout lay;
  lay.mtp_layers = cfg.mtp_num_layers;
  int64_t bytes = 0;
  for (const WeightSpec& w : weight_table(cfg, lay)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    bytes += n * 2;
  }
  return bytes;
}

// backend=cuda: the device of the global --device option; untestable (exit 125, never a crash)
// without a usable device, for toggles the CUDA path does not have yet, and when the model cannot
// fit in the device's free memory.
std::unique_ptr<Backend> make_cuda_backend(const RunConfig& rc, const ModelConfig& cfg) {
  const int dev = cuda::default_device();
  std::string why = cuda::device_unusable_reason(dev);
  if (!why.empty()) throw UntestableError(cat("config ", rc.str(), ": ", why));
  // TODO(CUDA graphs, tensor parallelism issues): graphs=on, tp > 1.
  if (rc.graphs && *rc.graphs) throw UntestableError(cat("config ", rc.str(), ": graphs=on is not built yet on the CUDA path"));
  if (rc.tp > 1) throw UntestableError(cat("config ", rc.str(), ": tensor parallelism (tp > 1) is not built yet"));
  GemmKind gemm = GemmKind::cublas;
  if (rc.gemm && *rc.gemm == "simple") gemm = GemmKind::simple;
  else if (rc.gemm && *rc.gemm != "cublas") input_error("config ", rc.str(), ": gemm must be cublas or simple");
  auto be = std::make_unique<CudaBackend>(dev, gemm);
  int64_t free_b = 0, total_b = 0;
  be->context()->mem_info(&free_b, &total_b);
  const int64_t weights = cuda_weight_bytes(cfg), need = weights + kCudaWorkspaceBytes;
  if (need > free_b)
    throw UntestableError(cat("config ", rc.str(), ": the model does not fit on CUDA device ", dev, " (",
                              be->context()->props().name, "): it needs about ", cuda::gib(need), " (",
                              cuda::gib(weights), " of bf16 weights + ", cuda::gib(kCudaWorkspaceBytes),
                              " working memory), the device has ", cuda::gib(free_b), " free of ", cuda::gib(total_b)));
  return be;
}

}  // namespace
#endif

std::unique_ptr<Backend> make_backend(const RunConfig& rc, const ModelConfig& cfg) {
  validate_run_config(rc, cfg);
  std::string why = rc.untestable_reason(kHaveCuda);
  if (!why.empty()) throw UntestableError(cat("config ", rc.str(), ": ", why));
  check_faults(rc, cfg);  // InputError / UntestableError before anything runs
  if (rc.backend == BackendKind::cuda) {
#if DEGEN_WITH_CUDA
    return make_cuda_backend(rc, cfg);
#else
    throw UntestableError(cat("config ", rc.str(), ": this build has no CUDA backend"));  // untestable_reason says so first
#endif
  }
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
