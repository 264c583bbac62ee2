// What a comparison judges (judge/compare.h compare()): our engine under a configuration
// (subjects/engine.h), another engine's dump (subjects/dump.h) or a running server
// (subjects/server/compare.cpp). The orchestrator fills the result's header, checks the record and
// selects the cases once, then asks the subject for each part of each case in this order:
//  begin_case      the case loaded, its identity (id, tokens, positions) in the CaseResult;
//  teacher_forced  rows over the golden sequence: full logits (our engine, a dump) or listings (a
//                  server), against the record's top-K; our engine its layer data too (drift and
//                  isolated errors of each mode, which it computes in one pass per mode);
//  layers          layer data computed apart from the rows (a dump: drift against a known-good run);
//  checks          the subject's own consistency checks (our engine: MTP draft/verify, serving
//                  mechanisms, observed against unobserved);
//  generation      free-running generation with its per-step distributions and serving probes;
//  reasons         the figures in words, into the case's bad / unjudged / warn lists (a part may also
//                  add to them as it runs);
// and the one verdict rule (judge_case) turns those lists into the case's verdict.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "judge/result.h"

namespace degen {

// The floors a subject is judged with: a class of the record (fp32, bf16), or one measured at compare
// time (EngineClass::measured, e.g. q8_0: its floors are then present whatever the record holds).
struct SubjectFloors {
  std::string name;                      // printed: "fp32", "bf16", "q8_0"
  FloorClass record_class = FloorClass::fp32;
  bool measured = false;
};

// One case under way: where it is, its result as the parts fill it, and the reasons so far.
struct CaseWork {
  size_t slot = 0;   // index into the selected cases
  size_t index = 0;  // the record's case index
  CaseResult cr;
  std::vector<std::string> bad;       // each makes the case bad
  std::vector<std::string> unjudged;  // each makes it untestable (when nothing is bad)
  std::vector<std::string> warn;      // said, judged good
  double seconds_before = 0;          // time spent on the case before begin_case (a batched generation)
};

class Subject {
 public:
  virtual ~Subject() = default;

  // ---- the result's header ----
  // config, backend, source and decode_skipped of the result (before the record is checked).
  virtual void describe(CompareResult& r) const = 0;
  virtual SubjectFloors floors() const = 0;
  // Replaces the table's limits line (judge/compare.h); "": the record's floors as they are.
  virtual std::string limits_note(const CompareResult&) const { return ""; }
  // Generates free-running (fail_on_model_degeneration applies to it).
  virtual bool generates() const { return true; }
  // A bad case of a checkpoint whose weights differ from the record's model says so last.
  virtual bool notes_model_change() const { return false; }

  // ---- the run ----
  // After the record is checked, before the cases are selected (checks of the subject's own input).
  virtual void prepare(CompareResult&) {}
  // The selected cases (the record's indices), before the first begin_case.
  virtual void open(const std::vector<size_t>& selected, CompareResult& r) = 0;
  virtual void begin_case(CaseWork& w) = 0;
  virtual void teacher_forced(CaseWork& w) = 0;
  virtual void layers(CaseWork&) {}
  virtual void checks(CaseWork&) {}
  virtual void generation(CaseWork&) {}
  virtual void reasons(CaseWork&) {}
  // The progress line of a finished case (stderr), without its newline.
  virtual std::string progress(const CaseResult& cr) const;
  // After the last case: notes over every case into the header; progress (may be null).
  virtual void finish(CompareResult&, std::FILE*) {}
};

}  // namespace degen
