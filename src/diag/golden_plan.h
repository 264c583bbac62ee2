// `golden --plan`: what a golden run will cost before it starts (issue: a 27B golden in bounded
// memory and known time). The CPU reference streams the weights from their memory mapping (a tile at
// a time, src/cpu/matmul.cpp), so the run's anonymous memory is what it computes with, not the
// checkpoint; its time is a number of passes over the weights, each bound by reading them (from
// storage when they do not fit in the page cache) and by the arithmetic.
//
// Peak anonymous memory (an upper bound, the sum of what can be alive at once; e = bytes of the
// reference's compute type, 4 at fp32, 8 at fp64; T = the longest case's prompt + generated tokens;
// P = its stored positions; S = its stored layers; B = the sequences generated together, 1 or the
// largest --batch all group; R = the most rows of one forward, max(T, a group's prompt tokens)):
//   state       B (n_linear (n_v d_k d_v + (K-1) d_conv) e + (n_full + n_mtp) T n_kv D 2 e)  GDN state, conv windows, KV cache
//   activations R (3 H + 2 max(2 n_q D, d_conv + d_val + 2 n_v) + 3 I) e + R T n_q e            one forward over R rows
// (measured: a --batch all run of 6 sequences on the 27B peaked at 1.13 GB while the bound without B
// said 1.00 GB; with B and R it says 1.96 GB)
//   logits      2 T V (4 + 4 + e)                                       record and floor runs, host and backend copies, MTP
//   layers      3 (S + 1) P H 4 + L T 4                                 captured, injected and compared layer outputs
//   record      2 (data file bytes)                                     the writer's copy and the checksum read
//   tiles       threads x 512 KiB (x2 at fp64)                           converted weight tiles
//   base        160 MiB                                                  the program: libraries, CUDA runtime, tokenizer
// Time: each pass p over n_p tokens reads W(n_p) bytes of weights (all but the embedding table; of
// MoE experts only those n_p tokens are expected to reach, E (1 - (1 - k/E)^n_p), under uniform
// routing) and does F(n_p) = 2 n_p (active parameters) + attention flops; it takes
//   t_p = max(R_p / storage_rate, W / memory_rate, F / flops_rate)
// (the next layer's weights are read by a background thread while this one computes, so reading and
// arithmetic overlap; measured on the 27B one-case golden, 270 s against 285 s of reads alone)
// where R_p = W when the checkpoint does not fit in the memory left beside the run (every pass
// reads it from storage), else only the first pass reads it. The rates come from a probe of this
// machine (a read of the checkpoint's largest file with O_DIRECT; the reference's own matmul on bf16
// weights of the model's MLP shapes at 1 row, the decode rate in bytes/s, and at 16 rows, the
// prefill rate in flop/s), or
// from --storage-gbps, --memory-gbps, --gflops to plan for another machine.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "record/cases.h"
#include "diag/golden.h"
#include "engine/backend_factory.h"
#include "model/config.h"

namespace degen {

class Tokenizer;
class Checkpoint;

struct PlanAssumptions {
  std::optional<double> storage_gbps;  // GB/s (1e9 bytes) reading the checkpoint from storage
  std::optional<double> memory_gbps;   // GB/s of bf16 weights through the decode matmul (weights in RAM)
  std::optional<double> gflops;        // prefill matmul rate
  std::optional<double> memory_gb;     // memory available to the run (GB); default: this machine's
  bool probe = true;                   // measure what is not assumed
};

struct PlanItem {
  std::string name;
  double bytes = 0;
  std::string formula;
};

struct GoldenPlan {
  // the model
  std::string model_name;
  int64_t params = 0;
  double weight_bytes = 0, embed_bytes = 0, mtp_bytes = 0, expert_bytes = 0;
  int files = 0;
  bool weights_present = false;
  // the work
  int cases = 0, batch_groups = 0;
  int64_t max_T = 0;
  int64_t passes_gen = 0, passes_forced = 0, passes_floors = 0, passes_digest = 0;
  double bytes_weights_total = 0;  // weights through the matmuls, all passes
  double flops_total = 0;
  // memory
  std::vector<PlanItem> memory;
  double peak_anon_bytes = 0;
  double available_bytes = 0;
  std::string available_source;
  bool fits_page_cache = false;
  // rates and where they come from
  double storage_gbps = 0, memory_gbps = 0, gflops = 0;
  std::string storage_source, memory_source, flops_source;
  // time
  double seconds_read = 0, seconds_compute = 0;
  double seconds_floors = 0;  // of the two above, the noise floors' passes
  // compare --server's decode-path scoring of this suite, later (not part of the golden run): per case
  // the reference's prefill over the server's sequence and the floor engine's decode of it
  int64_t passes_decode_path = 0;
  double seconds_decode_path = 0;
  double seconds() const { return seconds_read + seconds_compute; }
  int64_t passes() const { return passes_gen + passes_forced + passes_floors + passes_digest; }
  bool refused() const { return peak_anon_bytes > available_bytes; }
  std::vector<std::string> lines() const;  // the report `golden --plan` prints
};

// The passes over the weights of a golden run, by case: the one model of them that `golden --plan`
// and the writer's progress ("N % of the work") both count. Per case of T = Tp + G tokens (prompt,
// generation budget) and P stored positions: gen = G, the generation of its batch group counted at
// the group's first case (one prefill of the prompts, then a decode step per further token for all of
// them); forced = 1 (the teacher-forced prefill); floors = per noise-floor class run on the CPU, the
// isolated prefill (when P > 0) and decode (P) of the stored positions and the teacher-forced prefill
// (1) and decode (T). The run also reads every byte once for the tensor digests (digest).
struct GoldenPasses {
  struct Case {
    int64_t Tp = 0, G = 0, T = 0, P = 0;
    int64_t gen = 0, forced = 1, floors = 0;
    int64_t total() const;
  };
  std::vector<Case> cases;  // by suite index
  int classes = 0;          // noise-floor classes run on the CPU
  int n_stored = 0;         // stored layers
  int64_t digest = 1;
  int64_t gen() const;
  int64_t forced() const;
  int64_t floors() const;
  int64_t of_cases() const;  // gen + forced + floors: the writer's progress total
  int64_t total() const { return of_cases() + digest; }  // GoldenPlan::passes()
};
GoldenPasses golden_passes(const ModelConfig& cfg, const Tokenizer* tok, const Suite& suite, const GoldenOptions& opt);

// The plan of `golden` for the model folder `dir` (weights optional: a config-only folder is planned
// from the config, bf16), the suite and options. `factory` makes the reference backend for the probe.
GoldenPlan plan_golden(const std::filesystem::path& dir, const ModelConfig& cfg, const Checkpoint* ckpt,
                       const Tokenizer* tok, const Suite& suite, const GoldenOptions& opt, const PlanAssumptions& as,
                       const BackendFactory& factory);

// "1.04 GB" (1e9 bytes), "614 MB"
std::string format_bytes(double bytes);
// "1 h 02 min", "3 min 20 s", "12.5 s"
std::string format_duration(double seconds);

}  // namespace degen
