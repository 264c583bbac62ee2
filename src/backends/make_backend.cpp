// Backend selection from a RunConfig (see make_backend.h).
#include "backends/make_backend.h"

#include <algorithm>
#include <cstdio>

#include "build_config.h"
#include "cpu/cpu_backend.h"
#include "engine/tp.h"
#include "model/shard.h"
#include "util/error.h"
#if DEGEN_WITH_CUDA
#include "cuda/bench.h"
#include "cuda/context.h"
#include "cuda/device.h"
#include "kernels/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/nccl_comm.h"
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
std::unique_ptr<Backend> make_cuda_backend(const RunConfig& rc, const ModelConfig& cfg, int dev, int tp) {
  std::string why = cuda::device_unusable_reason(dev);
  if (!why.empty()) throw UntestableError(cat("config ", rc.str(), ": ", why));
  // graphs: on unless given (graphs=off), on the bf16 GPU path at tp = 1 (graphs=on with tp > 1 is
  // untestable_reason's; the fp32 reference on the GPU keeps plain launches). A replayed step equals
  // its plain launches bit for bit (tests/cuda/test_graphs_cuda.cpp).
  const bool graphs = rc.graphs ? *rc.graphs : tp <= 1 && !rc.cuda_reference();
  const GemmKind gemm = gemm_kind(rc.gemm);
  auto be = std::make_unique<CudaBackend>(dev, gemm, graphs, rc.cuda_reference());
  int64_t free_b = 0, total_b = 0;
  be->context()->mem_info(&free_b, &total_b);
  // tp > 1: this rank holds its shard and the replicated tensors (model/shard.h)
  const int64_t weights = tp > 1 ? tp_memory(cfg, tp, cfg.mtp_num_layers > 0).rank_weight_bytes : cuda_weight_bytes(cfg);
  const int64_t need = weights + kCudaWorkspaceBytes;
  if (need > free_b)
    throw UntestableError(cat("config ", rc.str(), ": the model does not fit on CUDA device ", dev, " (",
                              be->context()->props().name, "): it needs about ", cuda::gib(need), " (",
                              cuda::gib(weights), " of bf16 weights + ", cuda::gib(kCudaWorkspaceBytes),
                              " working memory), the device has ", cuda::gib(free_b), " free of ", cuda::gib(total_b)));
  return be;
}

}  // namespace
#endif

namespace {

std::vector<int>& tp_device_list() {
  static std::vector<int> d;
  return d;
}

std::unique_ptr<Backend> make_cpu_backend(const RunConfig& rc) {
  switch (rc.precision) {
    case Precision::ref: return std::make_unique<CpuBackend>(CpuPrecision::ref);
    case Precision::fp64: return std::make_unique<CpuBackend>(CpuPrecision::fp64);
    case Precision::bf16: return std::make_unique<CpuBackend>(CpuPrecision::bf16);
    case Precision::q8_0: return std::make_unique<CpuBackend>(CpuPrecision::q8_0);
  }
  throw std::logic_error("make_backend: unhandled precision");
}

#if DEGEN_WITH_CUDA
// The devices of the ranks of backend=cuda,tp=N: --devices, else N consecutive ones from --device.
std::vector<int> cuda_rank_devices(const RunConfig& rc) {
  std::vector<int> d = tp_device_list();
  if (d.empty())
    for (int r = 0; r < rc.tp; ++r) d.push_back(cuda::default_device() + r);
  if (static_cast<int>(d.size()) != rc.tp)
    input_error("config ", rc.str(), ": --devices lists ", d.size(), " device(s); tp=", rc.tp, " needs ", rc.tp);
  return d;
}
#endif

}  // namespace

void set_tp_devices(const std::vector<int>& devices) { tp_device_list() = devices; }

int run_cuda_bench(const BenchArgs& a) {
#if DEGEN_WITH_CUDA
  return cuda::run_bench(a);
#else
  (void)a;
  throw UntestableError("bench: this build has no CUDA backend (rebuild with nvcc and -DDEGEN_CUDA=ON)");
#endif
}

std::unique_ptr<Backend> make_backend(const RunConfig& rc, const ModelConfig& cfg) {
  check_run_config(rc, cfg, kHaveCuda);  // the run's one check, before anything is built
  if (rc.tp == 1) {
    if (rc.backend == BackendKind::cpu) return make_cpu_backend(rc);
#if DEGEN_WITH_CUDA
    return make_cuda_backend(rc, cfg, cuda::default_device(), 1);
#else
    throw UntestableError(cat("config ", rc.str(), ": this build has no CUDA backend"));  // untestable_reason says so first
#endif
  }
  // tp > 1: one backend per rank; the first carries the group (engine/tp.h).
  auto group = std::make_shared<TpGroup>();
  std::unique_ptr<Backend> first;
  if (rc.backend == BackendKind::cpu) {
    const int share = std::max(1, CpuBackend::num_threads() / rc.tp);
    for (int r = 0; r < rc.tp; ++r) {
      std::unique_ptr<Backend> b = make_cpu_backend(rc);
      static_cast<CpuBackend&>(*b).set_threads(share);
      if (r == 0) first = std::move(b);
      else group->owned.push_back(std::move(b));
    }
    group->comm = std::make_unique<HostComm>(rc.tp);
  } else {
#if DEGEN_WITH_CUDA
    const std::vector<int> devs = cuda_rank_devices(rc);
    for (int r = 0; r < rc.tp; ++r) {
      std::string bad = cuda::device_unusable_reason(devs[static_cast<size_t>(r)]);
      if (!bad.empty()) throw UntestableError(cat("config ", rc.str(), ": rank ", r, ": ", bad));
    }
    for (int r = 0; r < rc.tp; ++r) {
      std::unique_ptr<Backend> b = make_cuda_backend(rc, cfg, devs[static_cast<size_t>(r)], rc.tp);
      if (r == 0) first = std::move(b);
      else group->owned.push_back(std::move(b));
    }
    group->comm = cuda::make_nccl_comm(devs);
#else
    throw UntestableError(cat("config ", rc.str(), ": this build has no CUDA backend"));
#endif
  }
  group->ranks.push_back(first.get());
  for (auto& b : group->owned) group->ranks.push_back(b.get());
  first->attach_tp_group(group);
  first->bind_thread();  // the caller's thread works with rank 0 (its device current again)
  return first;
}

void configure_cuda(bool sync_debug, int device) {
#if DEGEN_WITH_CUDA
  cuda::set_sync_debug(sync_debug);
  cuda::set_default_device(device);
#else
  (void)sync_debug;
  (void)device;
#endif
}

std::vector<std::string> cuda_device_lines(std::string* why) {
  std::vector<std::string> out;
#if DEGEN_WITH_CUDA
  for (const auto& d : cuda::list_devices(why)) {
    char line[512];
    std::snprintf(line, sizeof line, "cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB (%.1f GiB free)  ~%.0f GB/s", d.index,
                  d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, d.total_bytes / 1073741824.0,
                  d.free_bytes / 1073741824.0, d.mem_bandwidth_gbs);
    out.push_back(line);
  }
  if (out.empty()) *why = "no CUDA device: " + *why;
#else
  *why = "this build has no CUDA backend (configure with -DDEGEN_CUDA=ON on a machine with nvcc)";
#endif
  return out;
}

}  // namespace degen
