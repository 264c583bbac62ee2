// NCCL all-reduce for tensor parallelism on the CUDA path (see nccl_comm.h).
#include "cuda/nccl_comm.h"

#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "util/error.h"

#if DEGEN_HAVE_NCCL
#include <nccl.h>
#endif

namespace degen::cuda {

#if DEGEN_HAVE_NCCL
namespace {

#define NCCL_TRY(call)                                                                            \
  do {                                                                                            \
    ncclResult_t r_ = (call);                                                                     \
    if (r_ != ncclSuccess) throw UntestableError(cat("NCCL: ", #call, ": ", ncclGetErrorString(r_))); \
  } while (0)

class NcclComm final : public TpComm {
 public:
  explicit NcclComm(const std::vector<int>& devices) : TpComm(static_cast<int>(devices.size())), comms_(devices.size()) {
    NCCL_TRY(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()));
  }
  ~NcclComm() override {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
  }
  const char* kind() const override { return "nccl"; }

  Tensor all_reduce(Backend& be, int rank, const Tensor& t) override {
    auto& cb = dynamic_cast<CudaBackend&>(be);
    count(rank, t);
    ncclDataType_t type;
    switch (t.dtype) {
      case DType::bf16: type = ncclBfloat16; break;
      case DType::f16: type = ncclFloat16; break;
      case DType::f32: type = ncclFloat32; break;
      default: throw std::logic_error(cat("NCCL all_reduce: dtype ", dtype_name(t.dtype), " is not summed"));
    }
    Tensor out = cb.zeros(t.shape, t.dtype);
    NCCL_TRY(ncclAllReduce(t.raw(), out.raw(), static_cast<size_t>(t.numel()), type, ncclSum,
                           comms_[static_cast<size_t>(rank)], cb.context()->stream()));
    return out;
  }

 private:
  std::vector<ncclComm_t> comms_;
};

}  // namespace

bool have_nccl() { return true; }

std::unique_ptr<TpComm> make_nccl_comm(const std::vector<int>& devices) { return std::make_unique<NcclComm>(devices); }

#else

bool have_nccl() { return false; }

std::unique_ptr<TpComm> make_nccl_comm(const std::vector<int>&) {
  throw UntestableError("backend=cuda with tp > 1 needs NCCL, which this build did not find (install libnccl-dev and reconfigure)");
}

#endif

}  // namespace degen::cuda
