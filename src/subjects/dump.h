// Another engine's dump as the subject of a comparison (judge/subject.h; what a dump holds and how it
// is judged: subjects/dump_reader.h): per case, its logits against the record's top-K, its layer outputs'
// drift against a known-good run of its class measured now, and within the first layer over it the
// first step over the known-good run's error there. No isolated errors, no generation.
#pragma once
#include <filesystem>
#include <memory>
#include <vector>

#include "subjects/dump_reader.h"
#include "judge/subject.h"

namespace degen {

namespace dump_subject {
struct DumpRun;
}

class DumpSubject : public Subject {
 public:
  DumpSubject(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const DumpCompareOptions& opt,
              const BackendFactory& factory);
  ~DumpSubject() override;

  void describe(CompareResult& r) const override;
  SubjectFloors floors() const override;
  std::string limits_note(const CompareResult& r) const override;
  bool generates() const override { return false; }
  void prepare(CompareResult& r) override;
  void open(const std::vector<size_t>& selected, CompareResult& r) override;
  void begin_case(CaseWork& w) override;
  void teacher_forced(CaseWork& w) override;
  void layers(CaseWork& w) override;
  void reasons(CaseWork& w) override;
  std::string progress(const CaseResult& cr) const override;
  void finish(CompareResult& r, std::FILE* progress) override;

 private:
  const GoldenRecord& rec_;
  const Model& model_;
  const Tokenizer* tok_;
  const DumpCompareOptions& opt_;
  const BackendFactory& factory_;
  std::unique_ptr<dump_subject::DumpRun> run_;  // the reference and known-good engines (open())
  // The case under way: its golden data, sequence, dump and per-position logit figures.
  GoldenCase g_;
  std::vector<int32_t> seq_;
  std::filesystem::path file_;
  std::unique_ptr<DumpReader> reader_;
  std::vector<metrics::LogitPosition> pos_;
};

}  // namespace degen
