// `degenbisect bisect`: from a bad configuration (and optionally a good one) to the toggle, the
// layer(s) and the operation that make the run bad (src/diag/bisect.h, src/diag/subop.h).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "cli/session.h"
#include "diag/bisect.h"
#include "diag/evaluate.h"
#include "engine/faults.h"
#include "record/golden_record.h"
#include "diag/localise.h"
#include "diag/subop.h"
#include "backends/make_backend.h"
#include "engine/trace.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/json_output.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct BisectArgs {
  std::string golden, model, bad, good, replay, json_out;
  std::vector<std::string> cases;
  bool no_decode = false, no_subop = false, no_localise = false, allow_mismatch = false;
};

std::string step_words(const std::string& step) {
  for (const auto& s : trace_steps())
    if (step == s.name) return s.what;
  return step;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// The op of a model-level MTP culprit, from the minimal bad configuration's compare (evaluate.cpp's
// per-case detail): the GDN state after a rollback (the teacher-forced draft/verify check), or the
// MTP head (its teacher-forced drafts break their floor while the main model's logits agree).
std::string mtp_op_sentence(const CellSummary& s, json& j) {
  const std::optional<MtpOp> op = mtp_culprit_op(s);
  if (!op) return "";
  if (op->op == "gdn_core") {
    const json& r = op->evidence;
    j["named_ops"].push_back({{"layer", op->layer}, {"op", "gdn_core"}, {"what", "state after rollback"}});
    return cat("The operation: the rolled-back state. With the golden sequence teacher-forced through draft and verify ",
               "(case ", op->case_id, "), the GDN state ", r.value("part", ""), " of layer ", op->layer, " after a rollback (length ",
               r.value("position", int64_t{0}), ") differs from plain decode's over the same tokens (rel_l2 ",
               fmt(r.value("rel_l2", 0.0)), "): the state kept is not the committed one (rejected drafts left in it, ",
               "or another verify position's state kept: `gdn_core-", op->layer, "` state). ");
  }
  j["named_ops"].push_back({{"layer", "mtp"}, {"op", op->op}});
  return cat("The operation: the MTP head (case ", op->case_id, "): its teacher-forced drafts break their floor while ",
             "the main model's logits and layers agree with the record, so the fault lies between the main model's ",
             "hidden state and the draft logits (`mtp_in`: the MTP head's input and fc, then its layer). ");
}

// The serving mechanism of a culprit whose minimal bad configuration fails compare's serving-state
// check (judge/result.h ServingCheck): the mechanism, the layer whose GDN state left plain processing's and
// where. "" when no check named a layer.
std::string serving_op_sentence(const CellSummary& s, json& j) {
  static const std::pair<const char*, const char*> kWords[] = {
      {"chunk", "the chunk boundary of a chunked prefill (prefill_chunk)"},
      {"snapshot", "the prefix cache's snapshot (prefix_cache)"},
      {"slot", "the state slot of a padded decode step (batch=N)"}};
  for (const auto& [mech, words] : kWords) {
    const std::optional<ServingOp> op = serving_culprit(s, mech);
    if (!op) continue;
    const json& r = op->evidence;
    j["named_ops"].push_back({{"layer", op->layer}, {"op", op->op}, {"mechanism", op->mechanism}});
    return cat("The mechanism: ", words, ". With ", r.value("what", std::string()), " (case ", op->case_id, "), the GDN state ",
               r.value("part", ""), " of layer ", op->layer, " at length ", r.value("position", int64_t{0}),
               " differs from plain processing's over the same tokens (rel_l2 ", fmt(r.value("rel_l2", 0.0)), "), while ",
               "the layers before it agree (`", op->op, "-", op->layer, "` state). ");
  }
  return "";
}

// Where the named op is a step of a fused op of the engine's path (engine/fused_ops.h): that op and
// its steps, and those the tested backend's kernel kept inside (the fault may be in any of them).
std::string fused_op_sentence(const std::vector<SubopReport>& reps, const std::string& op) {
  for (const auto& r : reps) {
    if (r.first_break != op || !r.fused_op) continue;
    std::string inside;
    for (const std::string& s : r.inside) inside += cat(inside.empty() ? "" : ", ", "`", s, "`");
    return cat("It is computed inside the fused op ", *r.fused_op,
               inside.empty() ? std::string(". ")
                              : cat("; the tested backend's kernel keeps ", inside,
                                    " inside, so the fault may be there, in that order. "));
  }
  return "";
}

// The verdict's sentences for a fault with no toggle to bisect (localise.h), and its JSON.
std::string shared_paragraph(const SharedLocalisation& s, json& j) {
  j["localisation"] = s.to_json();
  std::string p;
  if (s.layer < 0) {
    p += "No layer breaks its floor with the golden input injected: the error lies outside the decoder layers (the "
         "embedding, the final norm, the LM head or the MTP head) or shows only over longer runs. ";
  } else {
    p += cat("Localised against the golden record: layer ", s.layer, " is the first whose output breaks its floor with ",
             "the golden input injected (", s.mode, " mode, case ", s.case_id, ": rel_l2 ", fmt(s.err), " > ", fmt(s.limit), ")");
    if (s.broken_layers.size() > 1) {
      std::string ls;
      for (size_t i = 1; i < s.broken_layers.size(); ++i) ls += (ls.empty() ? "" : ", ") + std::to_string(s.broken_layers[i]);
      p += cat("; layer", s.broken_layers.size() > 2 ? "s " : " ", ls, " break too");
    }
    p += ". ";
    if (s.patch) {
      const PatchCheck& pc = *s.patch;
      p += cat("Its output replaced by the record's (", pc.positions, " positions): mean KLD ", fmt(pc.kld_unpatched), " -> ",
               fmt(pc.kld_patched), " (limit ", fmt(pc.kld_limit), "), error reaching the last layer ", fmt(pc.drift_unpatched),
               " -> ", fmt(pc.drift_patched), pc.confirmed ? ": confirmed by patching. " : ": NOT confirmed by patching (other layers contribute). ");
    }
  }
  p += cat("Cause: ", s.cause_words);
  if (!s.changed_tensors.empty()) {
    std::string ts;
    for (size_t i = 0; i < s.changed_tensors.size() && i < 4; ++i) ts += (ts.empty() ? "" : ", ") + s.changed_tensors[i];
    if (s.changed_tensors.size() > 4) ts += cat(", and ", s.changed_tensors.size() - 4, " more");
    p += cat(" (", ts, ")");
  }
  p += ". ";
  if (s.op) {
    const std::string name = s.layer >= 0 ? cat(*s.op, "-", s.layer) : *s.op;
    if (s.op_how == "first-reader-of-changed-tensor")
      p += cat("The first operation that reads a changed tensor is `", name, "` (", step_words(*s.op), "; ", *s.op_tensor,
               "): with the golden input injected, every operation before it computes what the record's model computed. ");
    else
      p += cat("With the golden input injected at layer ", s.layer, ", the first operation over its noise floor is `", name,
               "` (", step_words(*s.op), "). ", fused_op_sentence(s.subop, *s.op));
  } else if (!s.subop.empty()) {
    p += "No single operation of that layer breaks its floor against the reference on this checkpoint. ";
  }
  return p;
}

// With the golden input injected at each culprit layer, the first operation over its noise floor
// (subop.h); the reports go to j["subop"], the named operations to j["named_ops"].
std::string layer_op_sentences(const BisectOutcome& o, const GoldenRecord& rec, const Model& model, json& j) {
  std::string p;
  std::vector<json> reports;
  for (int l : o.culprit_layers) {
    auto reps = subop_analysis(rec, model, o.minimal_bad, l, make_backend);
    for (const auto& r : reps) reports.push_back(r.to_json());
    if (auto op = named_op(reps)) {
      const SubopRow* row = nullptr;
      for (const auto& r : reps)
        for (const auto& rr : r.rows)
          if (!row && rr.step == *op && !rr.pass) row = &rr;
      p += cat("With the golden input injected at layer ", l, ", the first operation over its noise floor is `",
               *op, "-", l, "` (", step_words(*op), ")");
      if (row) {
        p += cat(": rel_l2 ", fmt(row->err.rel_l2));
        if (row->floor) p += cat(" against a floor of ", fmt(*row->floor));
        if (row->err.nonfinite) p += cat(", ", row->err.nonfinite, " non-finite values");
      }
      p += ". ";
      p += fused_op_sentence(reps, *op);
      json named = {{"layer", l}, {"op", *op}};
      for (const auto& r : reps)
        if (r.first_break == *op && r.fused_op) {
          named["fused_op"] = *r.fused_op;
          named["inside_fused_op"] = r.inside;
          break;
        }
      j["named_ops"].push_back(named);
    } else {
      p += cat("At layer ", l, " no single operation breaks its floor with golden inputs in the first positions; ",
               "the error shows only over longer runs. ");
    }
  }
  j["subop"] = reports;
  return p;
}

// The verdict for a bad configuration whose culprit toggles (and layers) the bisection found.
std::string culprit_paragraph(const BisectOutcome& o, bool good_given, bool no_subop, const GoldenRecord& rec,
                              const Model& model, json& j) {
  std::string toggles;
  for (const auto& t : o.culprit_toggles) toggles += (toggles.empty() ? "" : ", ") + t;
  std::string para = cat("`", o.bad.str(), "` is bad against the golden record (", o.bad_summary.reason, "). ");
  if (o.differing.size() > 1 || good_given)
    para += cat("Of the ", o.differing.size(), " toggle(s) that differ from `", o.good.str(), "`, ",
                o.culprit_toggles.size() == 1 ? "this one alone makes" : "these together make", " the run bad: ",
                toggles, ". ");
  if (o.layer_specific) {
    std::string ls;
    for (int l : o.culprit_layers) ls += (ls.empty() ? "" : ", ") + std::to_string(l);
    para += cat("Applied only to layer", o.culprit_layers.size() > 1 ? "s " : " ", ls, " (`", o.minimal_bad.str(),
                "`) it still does");
    if (o.patch_fixes)
      para += *o.patch_fixes ? cat("; the bad configuration with ", o.culprit_layers.size() > 1 ? "those layers" : "that layer",
                                   " reset to the good toggles is good again (confirmed by patching). ")
                             : "; but resetting that layer in the bad configuration does not make it good: other layers contribute too. ";
    std::string serving = serving_op_sentence(o.minimal_summary, j);
    if (serving.empty())  // a rollback fault of one layer: the MTP check's rolled-back state names it
      if (const auto m = mtp_culprit_op(o.minimal_summary); m && m->op == "gdn_core") serving = mtp_op_sentence(o.minimal_summary, j);
    if (!serving.empty()) para += serving;
    else if (!no_subop) para += layer_op_sentences(o, rec, model, j);
  } else if (!o.culprit_toggles.empty()) {
    para += "It is not specific to layers (a model-level toggle such as MTP, sampling or precision). ";
    const std::string serving = serving_op_sentence(o.minimal_summary, j);
    para += serving.empty() ? mtp_op_sentence(o.minimal_summary, j) : serving;
  }
  para += o.bad_summary.verdict == "bad" ? "The golden run is not degenerate where this one fails, so this is an engine fault. " : "";
  para += cat("(", o.evaluations, " evaluations", o.fresh_evaluations < o.evaluations ? cat(", ", o.evaluations - o.fresh_evaluations, " replayed") : "", ")");
  return para;
}

int run_bisect(const BisectArgs& a) {
  if (a.golden.empty() || a.model.empty() || a.bad.empty())
    input_error("bisect: --golden DIR, --model DIR and --bad CONFIG are required");
  check_output_file(a.json_out, "bisect --json");  // before the run, not after its verdict
  RunConfig bad = parse_run_config(a.bad);
  bool good_given = !a.good.empty();
  RunConfig good = good_given ? parse_run_config(a.good) : implicit_good(bad);
  const Session session = open_session({a.golden, a.model, a.cases, a.allow_mismatch, a.no_decode});
  const GoldenRecord& rec = session.rec;
  const Model& model = *session.model;
  const ModelConfig& cfg = model.config;
  validate_run_config(bad, cfg);
  validate_run_config(good, cfg);
  CellEvaluator inner = compare_evaluator(rec, model, session.tok.get(), session.base, make_backend);
  bool quiet = global_options().quiet;
  CellEvaluator ev = [&](const RunConfig& rc) {
    CellSummary s = inner(rc);
    if (!quiet) std::fprintf(stderr, "  %-10s %s\n", s.verdict.c_str(), rc.str().c_str());
    return s;
  };
  std::optional<fs::path> replay;
  if (!a.replay.empty()) replay = a.replay;
  // Replayed evaluations must have been measured against this model, record, case set and mode.
  BisectOracle oracle(ev, replay,
                      evaluation_identity(rec, model, session.base.cases, session.base.decode_mode));
  if (!quiet) std::fprintf(stderr, "bisect: bad %s, good %s%s\n", bad.str().c_str(), good.str().c_str(),
                           good_given ? "" : " (implicit: the bad config's layer toggles and faults at their defaults)");
  BisectOutcome o = bisect(good, good_given, bad, cfg, oracle);
  auto localise = [&](const RunConfig& rc) {
    return localise_shared(rec, model, session.tok.get(), session.base, rc, make_backend, !a.no_subop,
                           quiet ? nullptr : stderr);
  };

  json j = {{"tool", "degenbisect bisect"}, {"golden", a.golden}, {"model", a.model}, {"fingerprint", model.fingerprint},
            {"bad", o.bad.str()}, {"good", o.good.str()}, {"good_given", o.good_given}, {"status", o.status},
            {"differing", o.differing}, {"culprit_toggles", o.culprit_toggles}, {"layer_specific", o.layer_specific},
            {"culprit_layers", o.culprit_layers}, {"minimal_bad", o.minimal_bad.str()},
            {"evaluations", o.evaluations}, {"fresh_evaluations", o.fresh_evaluations},
            {"bad_summary", cell_summary_to_json(o.bad_summary)}, {"log", oracle.log()}};
  if (o.patch_fixes) j["patch"] = {{"config", o.patched.str()}, {"fixes", *o.patch_fixes}};

  std::string para;
  int code = 0;
  if (o.status == "untestable") {
    para = cat("The bad configuration `", o.bad.str(), "` cannot be tested here: ", o.bad_summary.reason);
    code = static_cast<int>(ExitCode::untestable);
  } else if (o.status == "bad-is-good") {
    para = o.bad_summary.verdict == "model-intrinsic"
               ? cat("`", o.bad.str(), "` degenerates only where the golden (CPU reference) run degenerates too: the ",
                     "behaviour is model-intrinsic, not an engine fault (", o.bad_summary.reason, ").")
               : cat("`", o.bad.str(), "` is not bad against this golden record (verdict ", o.bad_summary.verdict,
                     "): nothing to bisect.");
  } else if (o.status == "good-is-bad") {
    para = cat("The good configuration `", o.good.str(), "` is itself bad against this golden record", 
               good_given ? "; choose a good one with --good, or" : ", so", " the fault lies in what both share (the model or ",
               "the engine build). ");
    if (!a.no_localise) para += shared_paragraph(localise(o.good), j);
    code = static_cast<int>(ExitCode::bad);
  } else if (o.status == "no-difference") {
    para = cat("`", o.bad.str(), "` is bad (", o.bad_summary.reason, ") but has no toggle or fault to bisect: the ",
               "fault lies in what every configuration shares (the model or the engine build). ");
    if (!a.no_localise) para += shared_paragraph(localise(o.bad), j);
    para += serving_op_sentence(o.bad_summary, j);  // a fault of a serving mechanism (compare's check names it)
    code = static_cast<int>(ExitCode::bad);
  } else {
    code = static_cast<int>(ExitCode::bad);
    para = culprit_paragraph(o, good_given, a.no_subop, rec, model, j);
  }
  j["verdict"] = para;
  j["exit_code"] = code;
  std::printf("%s\n", para.c_str());
  if (!a.json_out.empty()) {
    if (a.json_out == "-") std::printf("%s\n", json_text(j, 1).c_str());
    else write_file_atomic(a.json_out, json_text(j, 1) + "\n");
  }
  return code;
}

CommandRegistrar reg("bisect", "Name the toggle, the layer and the operation that make a configuration bad", 60,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<BisectArgs>();
  sub->add_option("--golden", a->golden, "Golden record folder");
  sub->add_option("--model", a->model, "Model folder");
  sub->add_option("--bad", a->bad, "The configuration that degenerates (key=value,...)");
  sub->add_option("--good", a->good, "A configuration that does not (default: bad with layer toggles and faults reset)");
  sub->add_option("--replay", a->replay,
                  "Log every evaluation to FILE; an existing FILE resumes without repeating them (refused when it was\n"
                  "made with another --model, --golden, --case or --no-decode; locked while a bisect uses it)");
  sub->add_option("--json", a->json_out, "Write the result as JSON to FILE ('-': stdout)");
  sub->add_option("--case", a->cases, "Only this case id of the record (repeatable; fewer cases, faster)");
  sub->add_flag("--no-decode", a->no_decode, "Skip the decode-mode passes (faster; misses decode-only faults)");
  sub->add_flag("--no-subop", a->no_subop, "Skip the per-operation report on the culprit layers");
  sub->add_flag("--no-localise", a->no_localise, "With nothing to bisect, do not localise the shared fault against the record");
  sub->add_flag("--allow-model-mismatch", a->allow_mismatch, "Accept a record made for another checkpoint");
  sub->footer("Steps: delta-debug the toggles that differ between --good and --bad, narrow them to layers (binary\n"
              "search, delta debugging for interactions), confirm by patching, name the first operation over its\n"
              "noise floor on the culprit layer, and say whether the golden run degenerates too (model-intrinsic).\n"
              "With no toggle to bisect (a changed checkpoint, a new engine build: --bad with no toggles, or a --good\n"
              "that is bad too), the golden record is the good side: the first layer over its floor with golden\n"
              "inputs, confirmed by patching its output with the record's, the model or the engine build (the\n"
              "record's reference on this checkpoint, the per-tensor digests) and the first operation.\n"
              "Exit: 0 the bad configuration is not bad, 1 culprit found (bad), 125 untestable, 128 input error.\n"
              "Example:\n  degenbisect bisect --golden golden/tiny-qwen35/smoke --model models/tiny-qwen35 \\\n"
              "      --bad fault=gdn-head-mod@5 --replay out/bisect.jsonl");
  return [a] { return run_bisect(*a); };
});

}  // namespace
}  // namespace degen::cli
