// CUDA graphs from the engine's side (graphs=on; the capture and replay are src/cuda/graphs.h).
#include <cstdio>
#include <string>

#include "engine/engine_impl.h"

namespace degen {

// ---- CUDA graphs (graphs=on, src/cuda/graphs.h) ----
// A decode step runs as a graph when the backend has graphs on, every sequence brings one token,
// nothing but the logits is traced (they are offered after the graph ran), no hidden rows are
// kept, there is no tensor parallelism (tp = 1), and every KV cache has room for the step's row
// and one spare (the kv-off-by-one fault writes one row further), so that no cache grows inside
// the graph; otherwise the step runs as plain launches (and grows the caches, so that the next
// step qualifies). The key names what the graph's
// launches depend on besides the inputs the ops upload: the toggles and faults, the logits
// options, the batch size, the weights, and the device buffers of every cache and state (the
// backend also drops its graphs when its device weights change).
std::string Engine::graph_key(const Batch& b, const ForwardOptions& fo, Trace* tr) const {
  if (!be_.graphs() || (tr && tr->on() && !tr->logits_only) || !b.one_token || fo.keep_hidden || comm_ ||
      !peers_.empty())
    return "";
  std::string key = cat(opt_.run.str(), "|logits ", static_cast<int>(fo.logits), fo.vocab_mask ? " masked" : "", "|",
                        b.states.size(), "|", static_cast<const void*>(&w_));
  char buf[40];
  for (const SeqState* st : b.states)
    for (int l = 0; l < cfg_.num_layers; ++l) {
      const void *p0, *p1;
      if (cfg_.layer_types[static_cast<size_t>(l)] == LayerKind::full) {
        const KvCache& c = st->kv[static_cast<size_t>(l)];
        if (c.capacity() < c.len + 2) return "";
        p0 = c.k.raw();
        p1 = c.v.raw();
      } else {
        p0 = st->gdn[static_cast<size_t>(l)].conv.raw();
        p1 = st->gdn[static_cast<size_t>(l)].S.raw();
      }
      std::snprintf(buf, sizeof buf, "|%p,%p", p0, p1);
      key += buf;
    }
  return key;
}

}  // namespace degen
