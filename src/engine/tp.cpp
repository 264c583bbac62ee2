// Tensor-parallel communicator and rank threads (see tp.h).
#include "engine/tp.h"

#include <exception>
#include <thread>

#include "engine/backend.h"
#include "util/dtype.h"
#include "util/error.h"

namespace degen {

TpComm::TpComm(int size) : slots_(static_cast<size_t>(size)), size_(size), host_slots_(static_cast<size_t>(size)) {
  DEGEN_ASSERT(size >= 1, "TpComm of ", size, " ranks");
}

void TpComm::barrier() {
  std::unique_lock<std::mutex> lk(mu_);
  if (aborted_) throw TpAborted();
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) throw TpAborted();  // woken by abort
}

void TpComm::abort() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void TpComm::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = false;
  arrived_ = 0;
  for (auto& s : host_slots_) s.clear();
  for (auto& s : slots_) s = nullptr;
}

std::vector<std::vector<double>> TpComm::gather(int rank, std::vector<double> mine) {
  host_slots_[static_cast<size_t>(rank)] = std::move(mine);
  barrier();
  std::vector<std::vector<double>> all;
  if (rank == 0) all = host_slots_;
  barrier();  // nobody refills a slot before rank 0 has copied them
  return all;
}

void TpComm::broadcast(int rank, std::vector<double>& v) {
  if (rank == 0) host_slots_[0] = v;
  barrier();
  if (rank != 0) v = host_slots_[0];
  barrier();
}

void TpComm::count(int rank, const Tensor& t) {
  if (rank != 0) return;
  ++stats_.all_reduces;
  stats_.all_reduce_bytes += static_cast<int64_t>(t.nbytes());
}

namespace {

template <typename Acc, typename Load, typename Store>
void sum_ranks(const std::vector<const Tensor*>& in, Tensor& out, Load load, Store store) {
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    Acc acc = load(*in[0], i);
    for (size_t r = 1; r < in.size(); ++r) acc += load(*in[r], i);
    store(out, i, acc);
  }
}

}  // namespace

Tensor HostComm::all_reduce(Backend& be, int rank, const Tensor& t) {
  DEGEN_ASSERT(t.device == Device::cpu, "HostComm::all_reduce: tensor not on the host");
  count(rank, t);
  slots_[static_cast<size_t>(rank)] = &t;
  barrier();
  for (const Tensor* s : slots_)
    DEGEN_ASSERT(s->shape == t.shape && s->dtype == t.dtype, "all_reduce: ranks disagree on ", shape_str(t.shape));
  Tensor out = be.zeros(t.shape, t.dtype);
  switch (t.dtype) {
    case DType::f64:
      sum_ranks<double>(slots_, out, [](const Tensor& x, int64_t i) { return x.data<double>()[i]; },
                        [](Tensor& o, int64_t i, double v) { o.data<double>()[i] = v; });
      break;
    case DType::f32:
      sum_ranks<float>(slots_, out, [](const Tensor& x, int64_t i) { return x.data<float>()[i]; },
                       [](Tensor& o, int64_t i, float v) { o.data<float>()[i] = v; });
      break;
    case DType::bf16:
      sum_ranks<float>(slots_, out, [](const Tensor& x, int64_t i) { return bf16_to_f32(x.data<uint16_t>()[i]); },
                       [](Tensor& o, int64_t i, float v) { o.data<uint16_t>()[i] = f32_to_bf16(v); });
      break;
    case DType::f16:
      sum_ranks<float>(slots_, out, [](const Tensor& x, int64_t i) { return f16_to_f32(x.data<uint16_t>()[i]); },
                       [](Tensor& o, int64_t i, float v) { o.data<uint16_t>()[i] = f32_to_f16(v); });
      break;
    default: throw std::logic_error(cat("all_reduce: dtype ", dtype_name(t.dtype), " is not summed"));
  }
  barrier();  // every rank has read every input before any rank reuses its tensor
  return out;
}

void run_ranks(TpGroup& g, const std::function<void(int)>& fn) {
  const int n = g.size();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        g.ranks[static_cast<size_t>(r)]->bind_thread();
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        g.comm->abort();
      }
    });
  for (std::thread& t : threads) t.join();
  g.comm->reset();
  std::exception_ptr first_abort;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const TpAborted&) {
      if (!first_abort) first_abort = e;
    } catch (...) {
      throw;  // the failing rank's own error, in rank order
    }
  }
  if (first_abort) std::rethrow_exception(first_abort);
}

}  // namespace degen

namespace degen {
int Backend::tp_size() const { return tp_group_ ? tp_group_->size() : 1; }
}  // namespace degen
