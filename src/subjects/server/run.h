// compare --server's subject, shared by its files (subjects/server/): the run (the record, the model, the
// options, the engine API's entry and context, the decode path's engines) and the functions one file
// calls in another. compare.cpp: the subject and compare_server; forced.cpp: the teacher-forced
// listings; decode_path.cpp: the generated ids, the decode path and greedy agreement; generation.cpp:
// the free-running generation; probes.cpp: the serving probes.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "subjects/server/compare.h"
#include "subjects/server/engine_api.h"

namespace degen::server_subject {

using json = nlohmann::json;
using server_answer::TopList;

struct ServerRun {
  const GoldenRecord& rec;
  const Model& model;
  const Tokenizer* tok;
  const ServerCompareOptions& o;
  int64_t V;
  int topk;
  std::string base;
  std::vector<uint8_t> mask;
  std::vector<int32_t> stops, ws_ids;
  std::optional<int32_t> think_end;
  mutable std::string vocab_note;  // set when the vocabulary could not be checked by text
  // The decode-path scoring's engines (made at its first use): the reference, and the floor class's
  // engine that sets the per-step limit.
  mutable std::unique_ptr<Backend> ref_be, floor_be;
  mutable std::unique_ptr<Engine> ref_eng, floor_eng;
  mutable std::string floor_name;
  // sglang: the server's teacher-forced distribution after the current case's prompt (its step-0
  // check), and what POST /flush_cache answered where it did not empty the cache.
  mutable std::optional<std::vector<std::pair<int64_t, double>>> prompt_end;
  mutable std::string flush_note;
  int64_t V_real = 0;  // the ids the tokenizer defines (V without a tokenizer)
  const server::EngineApi* api = nullptr;  // the --api entry
  server::ApiContext ctx;                  // what its requests need (URL, top-K, answer bounds)
};

// What a serving probe gets: the case, its sampling, and its cold run (the request and its answer).
struct ProbeCase {
  const ServerRun& run;
  const GoldenCase& g;
  const SamplingParams& sp;
  bool greedy;
  const server_answer::Generated& cold;
  const json& cold_req;
  double limit;
  int64_t prompt() const { return static_cast<int64_t>(g.prompt.size()); }
};

// The teacher-forced part (forced.cpp): answer bounds and the vocabulary checked before any request, the listings read and scored.
void check_answer_bounds(const ServerRun& run, const std::vector<size_t>& selected);
void check_vocabulary(const ServerRun& run, const std::vector<int32_t>& ids);
metrics::Listing listing_of(const TopList& top, const ServerRun& run, double lse_pad);
void note_out_of_vocabulary(const TopList& top, const ServerRun& run, const std::string& where, std::string& oov);
void teacher_forced(const ServerRun& run, const GoldenCase& g, CaseResult& cr, double& coverage, std::vector<std::string>& bad, const std::vector<TopList>* fetched);

// The free-running generation scored (decode_path.cpp): its ids taken, the decode path and greedy agreement.
void take_generated(const ServerRun& run, const server_answer::Generated& got, bool greedy, GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn);
std::optional<double> lists_kld(const ServerRun& run, const TopList& base, const TopList& test);
DecodePathResult decode_path(const ServerRun& run, const GoldenCase& g, const server_answer::Generated& got, const std::vector<int32_t>& generated, const std::string& url, int64_t need_step);
bool length_stop(const std::string& reason);
void greedy_agreement(const ServerRun& run, const GoldenCase& g, GenerationResult& gen, double limit, const std::vector<int32_t>& stops, std::vector<std::string>& bad);

// The serving probes (probes.cpp), one row each of its probe table, that the case asks for.
void run_probes(const ProbeCase& c, std::vector<ProbeResult>& out);

// The case's free-running generation (generation.cpp), with its decode path and probes.
void free_running(const ServerRun& run, const GoldenCase& g, CaseResult& cr, std::vector<std::string>& bad, std::vector<std::string>& warn);

}  // namespace degen::server_subject
