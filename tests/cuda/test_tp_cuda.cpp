// GPU: tensor parallelism over NCCL (backend=cuda,tp=2), one GPU per rank. Needs two CUDA devices:
// with fewer (or without NCCL in the build) each test exits 77, which ctest reports as skipped.
//   - tp=2 against tp=1 on the GPU: the logits of a prefill and decode steps agree within the bf16
//     storage noise (kBf16Logits: the all-reduce adds one bf16 rounding per reduced tensor);
//   - each rank's backend holds only its shard of the weights (device bytes);
//   - tp-skip-last-allreduce moves the logits beyond that noise at tp=2.
#include <doctest/doctest.h>

#include <cstdlib>

#include "../tolerances.h"
#include "../toggle_test_util.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/device.h"
#include "cuda/nccl_comm.h"
#include "engine/generate.h"

using namespace degen;
using namespace degen::test;

namespace {

void need_two_gpus() {
  std::string why;
  const size_t n = cuda::list_devices(&why).size();
  if (n < 2 || !cuda::have_nccl()) {
    std::printf("skipped: tensor parallelism on the GPU needs 2 CUDA devices and NCCL (found %zu device(s)%s)\n", n,
                cuda::have_nccl() ? "" : ", no NCCL in this build");
    std::exit(77);
  }
}

std::vector<double> prefill_decode(ToggledModel& m, const std::vector<int32_t>& ids, int steps) {
  RunTrace r = run_traced(m, ids, steps);
  return r.logits;
}

}  // namespace

TEST_CASE("tp cuda: backend=cuda,tp=2 equals tp=1 within bf16 noise, each rank holding its shard") {
  need_two_gpus();
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next"}) {
    const std::string name = preset;
    CAPTURE(name);
    const auto& dir = synth_model(preset);
    ToggledModel one(dir, "backend=cuda"), two(dir, "backend=cuda,tp=2");
    REQUIRE(two.eng->tp() == 2);
    const std::vector<int32_t> ids = test_ids(70, one.cfg.vocab_size, 7);
    const auto a = prefill_decode(one, ids, 3), b = prefill_decode(two, ids, 3);
    const double e = rel_l2(b, a);
    MESSAGE(name, ": logits rel-L2 tp=2 vs tp=1 on the GPU: ", e);
    CHECK(e <= (name == "tiny-qwen35" ? tol::kBf16Logits : tol::kBf16LogitsMoe));
    // rank 1's device holds fewer weight bytes than the single-GPU backend
    auto& r1 = dynamic_cast<CudaBackend&>(*two.be->tp_group()->ranks[1]);
    auto& solo = dynamic_cast<CudaBackend&>(*one.be);
    CHECK(r1.weight_bytes_on_device() < solo.weight_bytes_on_device());
    CHECK(r1.context()->device() != dynamic_cast<CudaBackend&>(*two.be).context()->device());
  }
}

TEST_CASE("tp cuda: the TP fault shows only at tp=2, beyond the bf16 noise between tp=2 and tp=1") {
  // note: greedy tokens are not compared: on these random-weight models the first token is a
  // near-tie that bf16 rounding alone flips (CPU precision=bf16 gives other tokens at tp=2 than at
  // tp=1 too; found on the CUDA emulator). compare against the golden record judges generation.
  need_two_gpus();
  const auto& dir = synth_model("tiny-qwen35");
  ToggledModel one(dir, "backend=cuda"), two(dir, "backend=cuda,tp=2"),
      bad(dir, "backend=cuda,tp=2,fault=tp-skip-last-allreduce");
  const std::vector<int32_t> ids = test_ids(20, one.cfg.vocab_size, 3);
  const auto l1 = prefill_decode(one, ids, 1), l2 = prefill_decode(two, ids, 1), lb = prefill_decode(bad, ids, 1);
  const double noise = rel_l2(l2, l1), fault = rel_l2(lb, l2);
  MESSAGE("logits rel-L2: tp=2 vs tp=1 ", noise, ", tp-skip-last-allreduce vs tp=2 ", fault);
  CHECK(noise <= tol::kBf16Logits);
  CHECK(fault > tol::kBf16Logits);
}
