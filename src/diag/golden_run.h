// Inside the golden writer (golden.cpp, golden_spot_check.cpp): what every case of one record shares,
// and the CPU spot checks of what a GPU made.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diag/golden.h"

namespace degen {

// What every case of one record shares: the reference engine, the noise-floor engines (one per
// class, where this build can make it), the padding mask, the stop ids and the top-K width.
struct GoldenRun {
  const Model& model;
  const Tokenizer* tok;
  const GoldenOptions& opt;
  const ModelConfig& cfg;
  int L;
  int64_t H, V;
  std::vector<bool> stored;
  int n_stored;
  RunConfig rc;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Engine> eng;
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::vector<int32_t> stops;
  int K = 0;
  RunConfig floor_rc[2];
  std::unique_ptr<Backend> floor_be[2];
  std::unique_ptr<Engine> floor_eng[2];
  // The CPU spot check of a reference made on the GPU (GoldenOptions::verify_layers).
  std::vector<bool> verify_layers;
  bool verify = false;
  RunConfig verify_rc;
  std::unique_ptr<Backend> verify_be;
  std::unique_ptr<Engine> verify_eng;
  // bf16 floors made on the GPU (GoldenOptions::bf16_floors backend=cuda): checked against the CPU's
  // emulation of GPU storage (precision=bf16) at the same layers and positions.
  bool verify_floors = false;
  std::unique_ptr<Backend> floor_check_be;
  std::unique_ptr<Engine> floor_check_eng;

  GoldenRun(const Model& model_, const Tokenizer* tok_, const GoldenOptions& opt_, const BackendFactory& factory,
            GoldenSummary& sum);
};

// The suite's case `c` as the record runs it (the --gen-tokens override applied).
Case golden_case(const GoldenOptions& opt, const Case& suite_case);

// The CPU spot check of one case of a reference made on the GPU (GoldenOptions::verify_layers): the
// CPU reference runs the first Nv positions with the GPU's input of every checked layer injected,
// so each checked layer's output is the CPU's from the GPU's input (isolated: errors do not carry
// from layer to layer), and the logits that follow the last layer. Each layer's rel_l2 against the
// GPU's must be within kFallbackRelL2 and each position's KLD (CPU over GPU, the real vocabulary)
// within kFallbackKld. The decode path, which made the continuation, is checked where that costs
// nothing: under plain greedy sampling each generated token must be the top-1 of the record's own
// teacher-forced logits, or within kGreedyTieNats of it. Else Error(bad) naming the worst.
CaseVerification spot_check(GoldenRun& run, const Case& c, const SamplingParams& sp, const std::vector<int32_t>& seq,
                            size_t prompt_len, const GenerateResult& gen, const ForcedRun& g, int64_t Nv);

// The CPU spot check of bf16 floors made on the GPU (GoldenOptions::bf16_floors backend=cuda): the
// GPU's bf16 path and the CPU's emulation of its storage (precision=bf16) each recompute the checked
// layers from the record's own inputs at the first Nv positions; the GPU's output must be no farther
// from the emulation's than kFloorCheckK times the emulation's own distance from the record (both
// round to bf16 at the same points; they differ where fp32 sums in other orders round to another
// bf16 neighbour). Else Error(bad).
CaseFloorCheck spot_check_floors(GoldenRun& run, const std::string& case_id, const std::vector<int32_t>& seq,
                                 const ForcedRun& g, int64_t Nv);

}  // namespace degen
