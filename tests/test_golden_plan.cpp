// golden --plan and --batch all (issue 22): the passes over the weights a run makes, by batch group
// and floor class; the memory bound holds what a real run uses; --batch all gives the continuations
// of one-at-a-time generation on the tiny model and is recorded; the resource meter reads /proc.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "backends/make_backend.h"
#include "record/cases.h"
#include "diag/golden.h"
#include "diag/golden_plan.h"
#include "helpers.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "util/json_input.h"
#include "util/resource_meter.h"
#include "util/file_io.h"

using namespace degen;
namespace fs = std::filesystem;

namespace {

Suite suite3() {
  // two greedy cases with 5 tokens to generate, then one sampled: two batch groups
  return parse_suite(R"({"suite": "p", "defaults": {"max_new_tokens": 5}, "cases": [
      {"id": "a", "tokens": [1, 2, 3, 4]},
      {"id": "b", "tokens": [5, 6, 7, 8, 9, 10]},
      {"id": "c", "tokens": [1, 2], "max_new_tokens": 3, "sampling": "temp=0.7,seed=1"}]})",
                     "suite3");
}

}  // namespace

TEST_CASE("golden plan: passes by batch group and floor class") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir dir("plan");
  synth_checkpoint(p.config, p.options, dir.path());
  auto model = load_model(dir.path());
  const Suite s = suite3();
  GoldenOptions o;
  o.floors = false;
  PlanAssumptions as;
  as.probe = false;
  as.memory_gb = 100;
  GoldenPlan one = plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend);
  CHECK(one.passes_gen == 5 + 5 + 3);  // one prefill + (G - 1) decode steps per case
  CHECK(one.passes_forced == 3);
  CHECK(one.passes_floors == 0);
  CHECK(one.batch_groups == 3);
  // compare --server's decode-path scoring, per case: the reference's prefill of T tokens, the floor
  // engine's prefill of the prompt and G - 1 one-token steps (cases a, b: G 5; c: G 3)
  CHECK(one.passes_decode_path == (2 + 4) + (2 + 4) + (2 + 2));
  CHECK(one.seconds_decode_path == 0);  // no rates: no estimate
  {
    PlanAssumptions rated = as;
    rated.memory_gbps = 1;
    rated.gflops = 1e9;  // bound by the weight reads: the time is proportional to the read rate
    const GoldenPlan a = plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, rated, make_backend);
    rated.memory_gbps = 2;
    const GoldenPlan b = plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, rated, make_backend);
    CHECK(a.seconds_decode_path > 0);
    CHECK(b.seconds_decode_path == doctest::Approx(a.seconds_decode_path / 2));
    bool said = false;
    for (const std::string& l : a.lines()) said |= l.find("scoring a server's decode path takes about") != std::string::npos;
    CHECK(said);
  }
  o.batch_all = true;
  REQUIRE(golden_batch_groups(s, o) == std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 3}});
  GoldenPlan all = plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend);
  CHECK(all.passes_gen == 5 + 3);  // the two greedy cases share their steps
  CHECK(all.batch_groups == 2);
  o.floors = true;
  o.positions = "2";
  GoldenPlan fl = plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend);
  // per class and case: isolated prefill (1) + isolated decode (P = 2) + teacher-forced prefill (1) + decode (T)
  CHECK(fl.passes_floors == 2 * ((1 + 2 + 1 + 9) + (1 + 2 + 1 + 11) + (1 + 2 + 1 + 5)));
  double items = 0;
  for (const PlanItem& m : fl.memory) items += m.bytes;
  CHECK(fl.peak_anon_bytes == doctest::Approx(items));
  CHECK(fl.peak_anon_bytes < all.peak_anon_bytes);  // 2 positions stored instead of all of them
  CHECK_FALSE(fl.refused());
  as.memory_gb = 0.001;
  CHECK(plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend).refused());
}

TEST_CASE("golden plan: the options golden refuses, the plan refuses the same way") {
  // golden --plan took --positions -1, --topk 0 and --floor-classes zzz, which golden refuses: both
  // now call check_golden_options.
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir dir("plan-options");
  synth_checkpoint(p.config, p.options, dir.path());
  auto model = load_model(dir.path());
  const Suite s = suite3();
  PlanAssumptions as;
  as.probe = false;
  as.memory_gb = 100;
  struct Bad {
    std::function<void(GoldenOptions&)> set;
    const char* says;
  };
  for (const Bad& b : {Bad{[](GoldenOptions& o) { o.positions = "-1"; }, "--positions -1: expected auto, all, none or a number N"},
                       Bad{[](GoldenOptions& o) { o.topk = 0; }, "--topk must be in [1, 1000], found 0"},
                       Bad{[](GoldenOptions& o) { o.floor_classes = "zzz"; }, "--floor-classes zzz: expected both, bf16 or fp32"},
                       Bad{[](GoldenOptions& o) { o.gen_tokens = 1 << 21; }, "--gen-tokens must be in [0, 1048576], found 2097152"},
                       Bad{[](GoldenOptions& o) { o.verify_layers = "99"; }, "--verify-layers"}}) {
    CAPTURE(b.says);
    GoldenOptions o;
    b.set(o);
    CHECK_THROWS_WITH_AS(plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend),
                         doctest::Contains(b.says), InputError);
    CHECK_THROWS_WITH_AS(check_golden_options(o, model->config), doctest::Contains(b.says), InputError);
  }
  CHECK_NOTHROW(plan_golden(dir.path(), model->config, model->checkpoint.get(), nullptr, s, GoldenOptions{}, as, make_backend));
}

TEST_CASE("golden plan: every duration is printed without overflow, an absurd one sanely") {
  CHECK(format_duration(12.5) == "12.5 s");
  CHECK(format_duration(200) == "3 min 20 s");
  CHECK(format_duration(3720) == "1 h 02 min");
  CHECK(format_duration(3600.0 * 999999 + 3599) == "999999 h 59 min");
  // int(s / 3600) overflowed past 2^31 hours: 1e300 s printed "-2147483648 h"
  CHECK(format_duration(3600.0 * 1e6) == "1e+06 h");
  CHECK(format_duration(1e300) == "2.78e+296 h");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "unbounded");
  CHECK(format_duration(std::nan("")) == "unknown");
  CHECK(format_duration(-1) == "unknown");
}

// What `f` writes to stderr (the writer's progress lines go there).
std::string captured_stderr(const std::function<void()>& f, const fs::path& file) {
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 2);
  ::close(fd);
  try {
    f();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  return read_file(file);
}

TEST_CASE("golden plan: the writer's progress counts the plan's passes (batch groups, both floor classes)") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir dir("plan-progress");
  synth_checkpoint(p.config, p.options, dir / "m");
  auto model = load_model(dir / "m");
  const Suite s = suite3();
  GoldenOptions o;
  o.batch_all = true;  // two batch groups: {a, b} and {c}
  o.positions = "2";
  REQUIRE(golden_batch_groups(s, o).size() == 2);
  PlanAssumptions as;
  as.probe = false;
  as.memory_gb = 100;
  const GoldenPlan plan = plan_golden(dir / "m", model->config, model->checkpoint.get(), nullptr, s, o, as, make_backend);
  const GoldenPasses gp = golden_passes(model->config, nullptr, s, o);
  CHECK(gp.classes == 2);
  CHECK(plan.passes_floors > 0);
  CHECK(gp.total() == plan.passes());
  CHECK(gp.of_cases() == plan.passes() - plan.passes_digest);
  // the generation of a group is counted at its first case
  CHECK(gp.cases[0].gen == 5);
  CHECK(gp.cases[1].gen == 0);
  CHECK(gp.cases[2].gen == 3);
  // Each progress line's share of the work is the plan's passes of the cases done so far.
  const std::string err = captured_stderr([&] { write_golden(*model, nullptr, s, dir / "rec", o, make_backend, stderr); },
                                          dir / "stderr.txt");
  std::vector<std::string> lines;
  for (size_t at = 0; (at = err.find(" of the work)", at)) != std::string::npos; ++at) {
    const size_t open = err.rfind('(', at);
    lines.push_back(err.substr(open + 1, at - open - 1));
  }
  REQUIRE(lines.size() == s.cases.size());
  int64_t done = 0;
  for (size_t i = 0; i < s.cases.size(); ++i) {
    done += gp.cases[i].total();
    char want[32];
    std::snprintf(want, sizeof want, "%.0f %%", 100.0 * double(done) / double(plan.passes() - plan.passes_digest));
    CHECK(lines[i] == want);
  }
  CHECK(lines.back() == "100 %");
}

TEST_CASE("golden --batch all: the tiny model's record equals one-at-a-time generation's, and says how it was made") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir dir("batch");
  synth_checkpoint(p.config, p.options, dir / "m");
  auto model = load_model(dir / "m");
  auto tok = Tokenizer::load(dir / "m" / "tokenizer.json");
  const Suite s = suite3();
  GoldenOptions o;
  o.floors = false;
  write_golden(*model, tok.get(), s, dir / "one", o, make_backend);
  o.batch_all = true;
  write_golden(*model, tok.get(), s, dir / "all", o, make_backend);
  GoldenRecord a = GoldenRecord::open(dir / "one"), b = GoldenRecord::open(dir / "all");
  CHECK_FALSE(a.manifest().settings.batch.has_value());
  CHECK(b.manifest().settings.batch == "all");
  for (size_t i = 0; i < s.cases.size(); ++i) {
    // the data files: same continuations, and the teacher-forced data made one case at a time in both
    const Manifest::File& fa = a.manifest().files.at(a.cases()[i].file);
    const Manifest::File& fb = b.manifest().files.at(b.cases()[i].file);
    CHECK((fa.bytes == fb.bytes && fa.sha256 == fb.sha256));
  }
  CHECK_FALSE(fs::exists(dir / ".all.resume"));
  CHECK_FALSE(fs::exists(dir / ".all.partial"));
}

TEST_CASE("resource meter: anonymous memory, CPU time and wall time of this process") {
  ResourceMeter m(5);
  std::vector<char> big(64 << 20, 1);  // touched: 64 MiB of anonymous memory
  volatile char sink = big[12345];
  (void)sink;
  double x = 0;
  for (int i = 0; i < 20000000; ++i) x += i * 1e-9;
  CHECK(x > 0);
  const ResourceUsage u = m.now();
  CHECK(u.peak_anon_bytes >= uint64_t(64) << 20);
  CHECK(u.wall_s > 0);
  CHECK(u.user_s + u.sys_s > 0);
  CHECK(memory_available_bytes() > 0);
}
