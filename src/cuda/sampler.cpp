// Host side of the device sampler (kernels/sample.cu): validation, the distinct in-range id sets of
// the two penalties (sampler.h steps 2-3: each distinct id once), uploads, and the two launches with
// one read-back of the argmax in between (greedy and degenerate logits end there, as in sample()).
#include "cuda/sampler.h"

#include <algorithm>
#include <vector>

#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/sample.h"
#include "util/error.h"

namespace degen::cuda {

namespace {
// The distinct ids of `parts` inside [0, V), ascending.
std::vector<int32_t> distinct_in_vocab(std::initializer_list<std::span<const int32_t>> parts, int64_t V) {
  std::vector<int32_t> ids;
  for (std::span<const int32_t> p : parts)
    for (int32_t t : p)
      if (t >= 0 && t < V) ids.push_back(t);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}
}  // namespace

int32_t sample_on_device(CudaBackend& be, const SamplingParams& params, const Tensor& logits, int64_t row,
                         std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                         std::span<const int32_t> generated_ids, uint32_t case_index, uint32_t position) {
  validate(params);
  DEGEN_ASSERT(logits.device == Device::cuda && !logits.empty(), "sample_on_device: logits must be on the device");
  const int64_t V = logits.cols();
  DEGEN_ASSERT(row >= 0 && row < logits.rows(), "sample_on_device: row ", row, " of ", logits.rows());
  DEGEN_ASSERT(banned.empty() || static_cast<int64_t>(banned.size()) == V, "sampler: banned mask has ", banned.size(),
               " entries, logits ", V);
  DeviceSampling p;
  p.temperature = params.temperature;
  p.top_k = params.top_k;
  p.top_p = params.top_p;
  p.min_p = params.min_p;
  p.repetition_penalty = params.repetition_penalty;
  p.presence_penalty = params.presence_penalty;
  p.seed = params.seed;
  p.case_index = case_index;
  p.position = position;
  const std::vector<int32_t> rep = params.repetition_penalty != 1.0
                                       ? distinct_in_vocab({prompt_ids, generated_ids}, V)
                                       : std::vector<int32_t>{};
  const std::vector<int32_t> pres =
      params.presence_penalty != 0.0 ? distinct_in_vocab({generated_ids}, V) : std::vector<int32_t>{};
  const Tensor rep_d = rep.empty() ? Tensor{} : be.upload(rep, DType::i32, "sampler repetition ids");
  const Tensor pres_d = pres.empty() ? Tensor{} : be.upload(pres, DType::i32, "sampler presence ids");
  const Tensor banned_d = banned.empty() ? Tensor{}
                                         : be.upload(std::vector<uint8_t>(banned.begin(), banned.end()), DType::u8,
                                                     "sampler banned mask");
  const int64_t scratch_bytes = static_cast<int64_t>(sample_scratch_bytes(V));
  Tensor scratch = be.device_tensor({scratch_bytes}, DType::u8, "sampler scratch");
  Tensor result = be.device_tensor({4}, DType::i32, "sampler result");
  const size_t es = dtype_size(logits.dtype);
  const void* row_ptr = static_cast<const uint8_t*>(logits.raw()) + static_cast<size_t>(row * V) * es;
  cudaStream_t st = be.context()->stream();
  int32_t* res = result.data<int32_t>();
  sample_penalise_argmax_cuda(row_ptr, logits.dtype, V, banned.empty() ? nullptr : banned_d.data<uint8_t>(),
                              rep.empty() ? nullptr : rep_d.data<int32_t>(), static_cast<int>(rep.size()),
                              pres.empty() ? nullptr : pres_d.data<int32_t>(), static_cast<int>(pres.size()), p,
                              scratch.raw(), res, res + 1, st);
  int32_t host[4] = {0, 0, 0, 0};
  CUDA_CHECK(cudaMemcpyAsync(host, res, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  be.sync();
  const int32_t best = host[0], live = host[1];
  if (best < 0) {  // degenerate logits: the lowest id that is not banned (sampler.h)
    for (int64_t i = 0; i < V; ++i)
      if (banned.empty() || !banned[static_cast<size_t>(i)]) return static_cast<int32_t>(i);
    input_error("sampler: every one of the ", V, " token ids is banned");
  }
  if (params.temperature == 0) return best;  // 4. greedy
  sample_draw_cuda(V, best, live, p, scratch.raw(), res + 2, st);
  CUDA_CHECK(cudaMemcpyAsync(host + 2, res + 2, sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  be.sync();
  DEGEN_ASSERT(host[2] >= 0 && host[2] < V, "device sampler: empty distribution after filtering");
  return host[2];
}

}  // namespace degen::cuda

namespace degen {

int32_t CudaBackend::sample_row(const SamplingParams& params, const Tensor& logits, int64_t row,
                                std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                                std::span<const int32_t> generated_ids, uint32_t case_index, uint32_t position) {
  ++stats_.device_samples;
  return cuda::sample_on_device(*this, params, logits, row, banned, prompt_ids, generated_ids, case_index, position);
}

}  // namespace degen
