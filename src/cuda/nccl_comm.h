// NcclComm: the tensor-parallel all-reduce of backend=cuda,tp=N (engine/tp.h) over NCCL, one
// process and one thread per GPU: ncclCommInitAll over the ranks' devices, and each rank's
// ncclAllReduce (sum, in the tensor's dtype: bf16 activations) enqueued on that rank's stream.
// Host-side collectives (tracing) are TpComm's.
// Compiled only when NCCL was found at configure time (DEGEN_HAVE_NCCL); make_nccl_comm throws
// UntestableError otherwise.
#pragma once
#include <memory>
#include <vector>

#include "engine/tp.h"

namespace degen::cuda {

// A communicator over `devices` (rank r = devices[r]); UntestableError with the reason when NCCL
// is missing from this build or cannot initialise.
std::unique_ptr<TpComm> make_nccl_comm(const std::vector<int>& devices);

// Whether this build links NCCL.
bool have_nccl();

}  // namespace degen::cuda
