// The Engine's internals shared by its translation units (not a public header):
//   engine.cpp         the forward pass and the MTP head of one rank (spec model.md §4, §6)
//   engine_tp.cpp      tensor parallelism: the peer ranks, the fan-out of every entry point, tracing at tp > 1
//   engine_graphs.cpp  when a decode step runs as a CUDA graph, and the key that names it
#pragma once
#include <string>
#include <vector>

#include "engine/engine.h"

namespace degen {

struct Engine::Batch {
  std::vector<SeqSpan> spans;     // per sequence
  std::vector<TraceSeq> seqs;     // the same, for the trace
  std::vector<SeqState*> states;  // per sequence
  std::vector<int64_t> pos;       // [N] absolute position of every row
  int64_t N = 0;
  bool one_token = false;         // every sequence brings one token: GDN runs recurrent (as HF's cached decode)
};


// Brackets a graph step: graph_step_end() on success, graph_step_abort() when an exception leaves.
struct GraphStepScope {
  Backend& be;
  bool& flag;
  bool active = false;
  GraphStepScope(Backend& b, bool& f, const std::string& key) : be(b), flag(f) {
    if (!key.empty()) active = flag = be.graph_step_begin(key);
  }
  void end() {
    if (!active) return;
    active = flag = false;
    be.graph_step_end();
  }
  ~GraphStepScope() {
    if (!active) return;
    flag = false;
    be.graph_step_abort();
  }
};

}  // namespace degen
