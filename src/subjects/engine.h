// Our engine under a configuration as the subject of a comparison (judge/subject.h; what it measures:
// judge/result.h): per case, teacher-forced and isolated runs of each mode, MTP draft/verify and the
// serving mechanisms against plain processing, observed against unobserved (the first case), and the
// free-running generation (all cases generated first, so that batch=all can batch them) with its
// consistency against teacher forcing.
#pragma once
#include <memory>
#include <vector>

#include "engine/run_config.h"
#include "judge/result.h"
#include "judge/subject.h"

namespace degen {

// Our engine under test: the common options (cases, allow_model_mismatch,
// fail_on_model_degeneration, rules) and the tested configuration.
struct CompareOptions : CommonCompareOptions {
  RunConfig config;                       // the tested configuration
  bool decode_mode = true;                // also run the decode-mode (one token per call) passes
};

// Runs the comparison. InputError (exit 128) for a record made for another model (unless
// allow_model_mismatch; even then the shapes must agree), unknown case ids, or a damaged record;
// UntestableError (exit 125) when the factory cannot build the configuration.
CompareResult compare_golden(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                             const BackendFactory& factory, std::FILE* progress = nullptr);

namespace engine_subject {
struct EngineRun;
}

class EngineSubject : public Subject {
 public:
  EngineSubject(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                const BackendFactory& factory);
  ~EngineSubject() override;

  void describe(CompareResult& r) const override;
  SubjectFloors floors() const override;
  bool notes_model_change() const override { return true; }
  void open(const std::vector<size_t>& selected, CompareResult& r) override;
  void begin_case(CaseWork& w) override;
  void teacher_forced(CaseWork& w) override;
  void checks(CaseWork& w) override;
  void generation(CaseWork& w) override;
  void reasons(CaseWork& w) override;
  void finish(CompareResult& r, std::FILE* progress) override;

 private:
  const GoldenRecord& rec_;
  const Model& model_;
  const Tokenizer* tok_;
  const CompareOptions& opt_;
  const BackendFactory& factory_;
  std::unique_ptr<engine_subject::EngineRun> run_;  // made in open(), after the record is checked
  std::vector<GenerationResult> gens_;               // per selected case, generated in open()
  std::vector<bool> gen_nonfinite_;
  // The case under way: its golden data and sequence, and whether its generation had non-finite logits.
  GoldenCase g_;
  std::vector<int32_t> seq_, next_;
  bool nonfinite_ = false;
};

}  // namespace degen
