// Tensor parallelism, the run-time half (the sharding is model/shard.h): the ranks of one process,
// one thread each, and what they exchange.
//   TpComm    the all-reduce of the data path (a backend's own: an in-process host sum for the CPU
//             twin, NCCL for CUDA) plus host-side collectives (barrier, gather to rank 0,
//             broadcast from rank 0) that tracing uses to show full tensors.
//   TpGroup   the ranks' backends and their communicator; make_backend attaches one to the backend
//             it returns (rank 0) when tp > 1, and the Engine runs every rank from it.
// Every rank must call the same collectives in the same order. A rank that fails calls abort():
// the others, blocked or arriving at a collective, throw TpAborted instead of waiting forever, and
// the engine rethrows the failing rank's own error.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "engine/tensor.h"

namespace degen {

class Backend;

// Thrown in the ranks that were waiting when another rank failed.
struct TpAborted : std::runtime_error {
  TpAborted() : std::runtime_error("tensor-parallel peer rank failed") {}
};

class TpComm {
 public:
  explicit TpComm(int size);
  virtual ~TpComm() = default;
  int size() const { return size_; }
  virtual const char* kind() const = 0;  // "host", "nccl"

  // The data path: returns the element-wise sum of `t` over all ranks (same shape and dtype),
  // identical on every rank. `be` is the calling rank's backend.
  virtual Tensor all_reduce(Backend& be, int rank, const Tensor& t) = 0;

  // ---- host-side collectives ----
  void barrier();
  // Rank 0 gets every rank's vector (index = rank); the others get an empty result.
  std::vector<std::vector<double>> gather(int rank, std::vector<double> mine);
  // Every rank gets rank 0's `v`.
  void broadcast(int rank, std::vector<double>& v);

  void abort();        // wake every waiter with TpAborted (and make later collectives throw)
  void reset();        // after every rank has returned: clear the abort and the slots

  // Counters over rank 0's calls (one per collective, not per rank).
  struct Stats {
    int64_t all_reduces = 0;
    int64_t all_reduce_bytes = 0;  // bytes of one rank's tensor, summed over calls
    void reset() { *this = Stats{}; }
  };
  Stats& stats() { return stats_; }

 protected:
  void count(int rank, const Tensor& t);
  std::vector<const Tensor*> slots_;  // all_reduce: each rank's input, for the host implementation

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<std::vector<double>> host_slots_;
  Stats stats_;
};

// In-process all-reduce over host tensors (the CPU twin): every rank sums the ranks' tensors in
// rank order 0, 1, ..., tp-1 in fp32 (fp64 for f64 tensors) and rounds once to the tensor's dtype,
// so every rank holds bit-identical results. (NCCL's reduction order is its own; the CPU twin
// fixes one so results do not depend on thread timing.)
class HostComm final : public TpComm {
 public:
  using TpComm::TpComm;
  const char* kind() const override { return "host"; }
  Tensor all_reduce(Backend& be, int rank, const Tensor& t) override;
};

struct TpGroup {
  std::vector<Backend*> ranks;                   // [tp]: rank 0 is the backend this group hangs on
  std::vector<std::unique_ptr<Backend>> owned;   // ranks 1..tp-1
  std::unique_ptr<TpComm> comm;
  int size() const { return static_cast<int>(ranks.size()); }
};

// Runs fn(rank) for every rank on its own thread (each after Backend::bind_thread), waits for all,
// and rethrows the first real error (rank order), aborting the others' collectives.
void run_ranks(TpGroup& g, const std::function<void(int)>& fn);

}  // namespace degen
