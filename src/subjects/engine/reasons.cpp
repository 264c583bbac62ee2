// Our engine under test, its figures in words: the reasons of the teacher-forced, isolated, MTP and
// serving checks, and of the free-running generation.
#include "judge/format.h"
#include "subjects/engine/run.h"

namespace degen::engine_subject {

using compare_format::sci;

void first_break(CaseResult& cr) {
  for (const LayerRow& row : cr.layers) {
    for (int m = 0; m < kModes && !cr.first_break; ++m)
      if (!row.pass[m]) cr.first_break = std::make_pair(m, row.layer);
    if (cr.first_break) break;
  }
}

// The reasons of the teacher-forced and isolated steps (non-finite values, the first floor break,
// logits and MTP KLD over their limits, the consistency check) into `bad`; a serving mechanism that did
// nothing in the case into `warn`.
void forced_reasons(const CaseResult& cr, const GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    if (cr.embed[m] && !cr.embed[m]->passes_nonfinite()) bad.push_back(cat("non-finite values in the embedding (", mn, ")"));
    for (const LayerRow& row : cr.layers)
      if (row.drift[m] && !row.drift[m]->passes_nonfinite()) {
        bad.push_back(cat("non-finite values in l_out-", row.layer, " (teacher-forced ", mn, ")"));
        break;
      }
  }
  if (cr.first_break) {
    bad.push_back(isolated_break_reason(cr.layers[cr.first_break->second], cr.first_break->first));
  }
  for (int m = 0; m < kModes; ++m) {
    if (!cr.logits[m] || cr.logits[m]->pass) continue;
    const LogitsResult& lr = *cr.logits[m];
    if (lr.nonfinite) bad.push_back(cat("non-finite logits at ", lr.nonfinite, " positions (", forced_mode_name(static_cast<ForcedMode>(m)), ")"));
    else bad.push_back(cat("mean KLD ", sci(lr.mean_kld), " > ", sci(lr.limit), " (teacher-forced ",
                           forced_mode_name(static_cast<ForcedMode>(m)), lr.floor ? "" : ", no floors: fixed limit", ")"));
  }
  if (gen.logits && !gen.logits->pass && gen.logits->nonfinite)
    bad.push_back(cat("free-running logits: the teacher-forced run over the same tokens has non-finite logits at ",
                      gen.logits->nonfinite, " of ", gen.logits->kld.size(), " positions (expected finite)"));
  else if (gen.logits && !gen.logits->pass)
    bad.push_back(cat("free-running logits differ from the teacher-forced ones over the same tokens (",
                      gen.logits->kld.size(), " positions): mean KLD ", sci(gen.logits->mean_kld), " > ",
                      sci(gen.logits->limit), " (state corrupted during generation?)"));
  if (cr.mtp && !cr.mtp->pass && cr.mtp->nonfinite)
    bad.push_back(cat("MTP drafts: non-finite logits at ", cr.mtp->nonfinite, " of ", cr.mtp->kld.size(), " positions (expected finite)"));
  else if (cr.mtp && !cr.mtp->pass)
    bad.push_back(cat("MTP drafts: mean KLD ", sci(cr.mtp->mean_kld), " > ", sci(cr.mtp->limit)));
  if (cr.mtp_forced && cr.mtp_forced->state_layer)
    bad.push_back(cat("MTP draft/verify teacher-forced: after a rollback the GDN state (", cr.mtp_forced->state_part,
                      ") of layer ", *cr.mtp_forced->state_layer, " at length ", *cr.mtp_forced->state_position,
                      " differs from plain decode's: rel_l2 up to ", sci(cr.mtp_forced->state_err), " > ", sci(kMtpStateLimit),
                      " (", cr.mtp_forced->rollbacks, " rollbacks in ", cr.mtp_forced->rounds, " rounds)"));
  for (const ServingCheck& c : cr.serving) {
    if (!c.note.empty()) warn.push_back(cat("serving (", c.mechanism, "): ", c.note));
    if (c.state_layer && (c.state_decides || !c.pass))
      bad.push_back(cat("serving (", c.mechanism, "): ", c.what, ": the GDN state (", c.state_part, ") of layer ",
                        *c.state_layer, " at length ", *c.state_position, " differs from plain processing's: rel_l2 ",
                        sci(c.state_err), " > ", sci(c.state_limit)));
    if (c.logits && !c.logits->pass)
      bad.push_back(cat("serving (", c.mechanism, "): ", c.what, ": the logits after it differ from plain processing's (",
                        c.logits->kld.size(), " positions): mean KLD ", sci(c.logits->mean_kld), " > ", sci(c.logits->limit)));
  }
  if (cr.mtp_forced && cr.mtp_forced->logits && !cr.mtp_forced->logits->pass)
    bad.push_back(cat("MTP draft/verify teacher-forced: the verify logits differ from plain decode's over the same tokens: ",
                      "mean KLD ", sci(cr.mtp_forced->logits->mean_kld), " > ", sci(cr.mtp_forced->logits->limit)));
}

// The free-running figures of a case (degeneration of both texts, first divergence and the golden's
// margin there, MTP acceptance).
void free_running_figures(const EngineRun& run, const GoldenCase& g, const CaseResult& cr, bool nonfinite, GenerationResult& gen) {
  const int64_t T = cr.positions;
  gen.stop_reason = gen.stop_reason.empty() ? "no budget" : gen.stop_reason;
  metrics::ContentOptions content;
  if (g.opened_think) content.think_end = run.think_end;
  content.stop_ids = g.ignore_stop ? std::vector<int32_t>{} : run.stops;
  content.ignore_ids = run.ws_ids;
  generation_figures(gen, run.opt.rules.degen, content, nonfinite, !gen.golden_rerun && g.nonfinite_logits);
  if (gen.first_divergence && !gen.golden_rerun && g.topk.K >= 2) {
    const int64_t row = cr.prompt_tokens + *gen.first_divergence - 1;
    if (row >= 0 && row < T)
      gen.golden_margin = double(g.topk.logprobs[row * g.topk.K]) - double(g.topk.logprobs[row * g.topk.K + 1]);
  }
  if (!gen.verify_steps.empty()) gen.spec = metrics::spec_decode(gen.verify_steps, gen.degen.loop_onset);
}

// The free-running reasons: MTP equivalence (exact in the fp32 class), acceptance, model or engine.
void free_running_reasons(const EngineRun& run, GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  if (gen.mtp_equiv && !gen.mtp_equiv->mtp_equiv && run.fclass == FloorClass::fp32)
    bad.push_back(cat("mtp_equiv: greedy output with mtp=", run.opt.config.mtp, " differs from the golden (MTP off) at token ",
                      gen.mtp_equiv->first_difference.value_or(-1), " (exact on the CPU reference path)"));
  if (gen.spec && gen.spec->accept_anomaly) warn.push_back(cat("MTP acceptance: ", *gen.spec->accept_anomaly));
  degeneration_reasons(gen, bad, warn);
}

}  // namespace degen::engine_subject
