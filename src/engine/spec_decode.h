// MTP speculative decoding (spec model.md §5.4, §6; metrics.md §5): after each committed token the
// MTP head drafts k tokens (chained), the target model verifies them, drafts are accepted greedily
// or by coupled sampling, and the target state (KV lengths, GDN conv window and S) and the MTP KV
// cache are rolled back to the accepted length.
//
// Verify design: the k+1 verify tokens [y, d_1..d_k] go through the target ONE TOKEN PER FORWARD
// (the same one-row call plain decode makes), and after each of the first k tokens the GDN state
// of every linear layer (conv window and S) is cloned: a per-position checkpoint (§5.4 option (a),
// taken outside the kernel, so no backend hook is needed). Rolling back to m accepted drafts sets
// pos and every KV length to p+m+1 and restores checkpoint m. Why not one (k+1)-row forward: a
// multi-row call takes the chunked GDN algorithm and a GEMM instead of a GEMV, whose rounding
// differs from plain decode, so the verify logits would differ from plain decode in the last bits
// and greedy output with MTP could differ from greedy output without it. One-row steps make the
// verify logits, the hidden states and the rolled-back state bit-identical to plain decode of the
// same tokens (tests/test_mtp.cpp checks all three). The cost is k+1 weight reads per verify
// instead of one: this is the reference, not a fast path.
//
// MTP rounds (one sequence; P = tokens the target has consumed, y = the committed token at P):
//   1. draft: d_1 comes from the last MTP row of the previous round; d_j (j >= 2) from one MTP row
//      (ĥ^mtp_{j-1}, d_{j-1}) at MTP position P+j-2, where ĥ^mtp is the previous row's post-mtp.norm
//      output (spec §6 step 6, captured through the Trace step mtp_norm);
//   2. verify [y, d_1..d_k] at P..P+k (above): target logits t_0..t_k and hidden rows h_P..h_{P+k};
//   3. accept d_{j+1} against t_j in order; m = drafts accepted; emit d_1..d_m and one more token
//      (the correction at the first rejection, or the bonus from t_k);
//   4. roll the target back to P+m+1 and the MTP cache back to P (its draft rows are dropped);
//   5. catch-up: MTP rows (h_{P+j}, x_{P+j+1}) for j = 0..m in one call; the last row drafts the
//      next round's d_1. So after each round the MTP cache holds exactly the rows (ĥ_i, x_{i+1}) of
//      committed tokens, as after the prefill (spec §6, last paragraph).
//
// Acceptance (positions are indices in prompt + generated, as the sampler's):
//   temperature 0: the draft is the argmax of the MTP logits (with the sampler's penalties over the
//     sequence so far, drafts included); accept while draft == sample(target row) (exactly the
//     token plain greedy decode chooses there); the first mismatch emits the target's token.
//   temperature > 0: the draft d is drawn from q = sampling_distribution(MTP logits) with
//     u_d = philox(seed; case, pos, kPhiloxStreamMtpDraft); with p = sampling_distribution(target
//     row), d is accepted iff u_a < p(d) / q(d), u_a = philox(seed; case, pos, kPhiloxStreamMtpAccept);
//     on rejection the token is inverse_cdf(max(0, p - q), u_t) (the residual, normalised by the
//     inverse CDF; p itself when the residual is all zero), u_t = the sampler's own draw
//     (stream 0) at pos; the bonus token is sample() itself. This is the standard speculative
//     sampling rule (Leviathan et al. 2023, Chen et al. 2023): the emitted tokens follow the target
//     distribution exactly, but are not the same tokens as mtp=0 sampling.
//
// Faults (DESIGN.md §7, src/engine/faults.h):
//   mtp-no-rollback: after a rejection pos and KV lengths are rolled back but the GDN conv window
//     and S keep the rejected drafts' updates.
//   mtp-prenorm-hidden: the MTP head is fed the last decoder layer's output before model.norm
//     (captured through the Trace step l_out-(L-1)) instead of the post-norm hidden.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/spec_stats.h"
#include "engine/engine.h"
#include "engine/run_config.h"
#include "engine/sampler.h"

namespace degen {

// Philox streams (util/philox.h, counter word 2) of the coupled MTP steps.
inline constexpr uint32_t kPhiloxStreamMtpDraft = 1;   // drawing a draft from the MTP distribution
inline constexpr uint32_t kPhiloxStreamMtpAccept = 2;  // the accept/reject draw of a draft

struct MtpOptions {
  int draft_tokens = 0;         // k: drafts per verify step, 0 = off (RunConfig mtp)
  bool no_rollback = false;     // fault mtp-no-rollback
  bool prenorm_hidden = false;  // fault mtp-prenorm-hidden
  // Fault spec-stale-slot: [L] 1 at the GDN layers that keep verify position 0's state after m > 0
  // accepted drafts (vLLM #39273: the next step reads slot 0, not slot m); empty: off.
  std::vector<uint8_t> stale_slot;
};
MtpOptions mtp_options(const RunConfig& rc, const ModelConfig& cfg);

// Throws UntestableError (exit 125) when drafts are asked for and the checkpoint has no MTP weights.
void check_mtp_supported(const Engine& engine, const MtpOptions& opt);

// A Trace that passes every event to `user` (when given) and keeps a clone of one step's output
// (after the user's observer has seen it). Not copyable: the observer points at this object.
class TraceCapture {
 public:
  TraceCapture(Trace* user, Step step, int layer, bool mtp);
  TraceCapture(const TraceCapture&) = delete;
  TraceCapture& operator=(const TraceCapture&) = delete;
  Trace trace;  // pass &trace to forward() / mtp()
  Tensor got;   // the last captured output (rows of the call)
 private:
  Trace* user_;
  Step step_;
  int layer_;
  bool mtp_;
};

// (GdnCheckpoint, the GDN state after one verify position, is in engine/state.h.)

// One verify pass over [y, d_1..d_k].
struct VerifyPass {
  int64_t pos0 = 0;                        // state pos before the pass = position of tokens[0]
  std::vector<int32_t> tokens;             // [k+1]
  std::vector<std::vector<float>> logits;  // [k+1][V]: row j predicts the token after tokens[j]
  std::vector<Tensor> hidden;              // [k+1] of [1, H]: the MTP input at position pos0 + j
  std::vector<GdnCheckpoint> checkpoints;  // [k]: GDN state after tokens[0..j], j < k
};

// Runs `tokens` through the target one token per forward call, as plain decode does, keeping the
// logits, the MTP input hidden rows (post-norm, or pre-norm under prenorm_hidden) and per-position
// GDN checkpoints. The state ends after all tokens.
VerifyPass verify_tokens(Engine& engine, SeqState& state, std::span<const int32_t> tokens,
                         const std::vector<uint8_t>* vocab_mask, bool prenorm_hidden, Trace* trace = nullptr);

// Leaves `state` as after tokens[0..m] of the pass (0 <= m < tokens.size()): pos and every KV cache
// length = pos0 + m + 1, GDN conv windows and S from checkpoint m (kept as they are when
// restore_gdn is false: the mtp-no-rollback fault). Moves checkpoint m into the state.
void rollback_target(SeqState& state, VerifyPass& pass, int m, bool restore_gdn = true);

// Fault spec-stale-slot (opt.stale_slot): after m > 0 accepted drafts the flagged GDN layers take the
// state of verify position 0 (a copy of checkpoint 0) instead of position m's.
void apply_stale_slot(Engine& engine, SeqState& state, const VerifyPass& pass, int m, const MtpOptions& opt);

// Drops the MTP rows at positions >= len (its KV cache and mtp_pos).
void rollback_mtp(SeqState& state, int64_t len);

// One draft: the token and, for temperature > 0, the distribution it was drawn from.
struct Draft {
  int32_t token = -1;
  std::vector<double> q;  // [V] (empty under greedy)
};
Draft draw_draft(const SamplingParams& params, std::span<const float> mtp_logits, std::span<const uint8_t> banned,
                 std::span<const int32_t> prompt, std::span<const int32_t> generated, uint32_t case_index,
                 uint32_t position);

// Judges one verify position: the target row `logits` at `position` (the token after
// prompt + generated). With a draft: returns the draft if accepted, else the correction token;
// without (draft == nullptr): the bonus token. `accepted` tells which.
int32_t judge(const SamplingParams& params, std::span<const float> logits, const Draft* draft,
              std::span<const uint8_t> banned, std::span<const int32_t> prompt, std::span<const int32_t> generated,
              uint32_t case_index, uint32_t position, bool& accepted);

// Teacher forcing of mtp_decode (compare's MTP rollback check, independent of sampling): the drafts
// and the acceptance follow a known sequence. Round r (from 0) accepts m = min(r mod (k + 1), kk)
// drafts: drafts 1..m are the sequence's own next tokens, the others the MTP head's most likely
// token that is not the sequence's (so a draft is rejected there), and the tokens emitted are the
// sequence's. Every rollback depth 0..k occurs, whatever the model or the sampling would draw.
struct MtpForcing {
  std::span<const int32_t> sequence;  // prompt + continuation; generated.back() is sequence[state.pos]
  // After each round's rollback: the state, the verify pass (logits rows 0..m lie on the sequence:
  // row j predicts sequence[P + j + 1]), m, and P (the tokens consumed before the round).
  std::function<void(const SeqState&, const VerifyPass&, int m, int64_t P)> on_round;
};

struct MtpDecodeArgs {
  const MtpForcing* forcing = nullptr;  // set: teacher-forced rounds (sampling unused)
  SamplingParams sampling;
  const std::vector<uint8_t>* vocab_mask = nullptr;  // [V] 1 = never chosen
  uint32_t case_index = 0;
  int max_new_tokens = 0;  // no drafts past it
  MtpOptions mtp;          // draft_tokens >= 1
  Trace* trace = nullptr;  // the caller's trace: sees every target and MTP call
  // After each round's rollback (sampled or forced): the state, the pass, m, P, and with
  // keep_before_rollback a copy of the state before the rollback (else null). The prefix cache's
  // snapshots of the blocks a round committed (engine/serving.h).
  std::function<void(const SeqState&, const VerifyPass&, int m, int64_t P, const SeqState* before)> after_round;
  bool keep_before_rollback = false;
};

// Continues one sequence after its prefill with MTP rounds (header comment) until `emit` returns
// false. On entry the target state has consumed the prompt (state.pos == prompt.size()), the MTP
// cache is empty, prompt_hidden [T, H] holds the prompt's MTP input rows (post-norm hidden, or
// pre-norm under the fault) and generated = {the token chosen from the prefill logits}.
// emit(token, pos) appends the token to `generated` and says whether the sequence goes on; pos is
// the number of tokens the target had consumed when the token's logits were computed (as in plain
// decode). Returns one VerifyStep per verify pass (proposed = drafts verified, fewer than k near
// max_new_tokens or the context end; accepted = drafts the verifier accepted, even when a stop id
// among them ended the sequence before all were emitted); adds the wall time to *seconds.
std::vector<VerifyStep> mtp_decode(Engine& engine, SeqState& state, std::span<const int32_t> prompt,
                                            const Tensor& prompt_hidden, std::vector<int32_t>& generated,
                                            const MtpDecodeArgs& args,
                                            const std::function<bool(int32_t token, int64_t pos)>& emit,
                                            double* seconds = nullptr);

}  // namespace degen
