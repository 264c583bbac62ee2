// StepGraphs: CUDA graphs for decode steps (DESIGN.md §5 toggle graphs=on), owned by CudaBackend.
//
// The forward pass stays the engine's: Engine::forward brackets a decode step (one token per
// sequence, no trace) with Backend::graph_step_begin(key) ... graph_step_end(), where the key names
// everything the step's launches depend on besides its staged inputs (the run's toggles, the batch,
// the caches' and states' device buffers). Per key:
//   1st step  record   plain launches; the step's signature is noted: the size of every buffer its
//                      ops allocate and of every host input they upload, in order;
//   2nd step  capture  the buffers come from one device arena sized from the signature, the host
//                      inputs are written into one pinned staging block, which one captured copy
//                      per segment (the first node of its graph) brings to a device staging block
//                      the ops read them from: one host-to-device copy per step; the launches are
//                      captured into a graph, which is then launched;
//   later     replay   the ops run on the host only: the same allocations give the same arena
//                      addresses (checked against the signature), the inputs of this step (token
//                      ids, positions, cache rows) are written into the staging block, every
//                      launcher returns at once (kernels/launch_gate.h), and the graph is launched.
// A step that differs from its signature (a bug in the key) is an error, never a silent replay.
// Host synchronisations inside a step (MoE routing, which drives the experts from the host) split
// it into segments: graph_step_pause() launches the segment so far, the ops until
// graph_step_resume() run as plain launches on ordinary memory, and a new segment begins.
// Buffers from the arena are reused by every replay of the key: a tensor a step returns (its
// logits) holds that step's values until the next step of the same key runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace degen::cuda {

class CudaContext;

// While true on this thread, launchers return without launching (kernels/launch_gate.h).
bool launches_suppressed();

struct GraphStats {
  int64_t recorded = 0;   // steps run plainly to learn a key's signature
  int64_t captured = 0;   // steps captured (and launched)
  int64_t replayed = 0;   // steps replayed from a graph
  int64_t segments = 0;   // graph launches (a step has one per segment)
};

class StepGraphs {
 public:
  explicit StepGraphs(std::shared_ptr<CudaContext> ctx);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  enum class Mode : uint8_t { off, record, capture, replay };
  Mode mode() const { return mode_; }
  // A graph step is running and not paused: the ops' buffers and inputs go through alloc/upload.
  bool in_segment() const { return mode_ != Mode::off && !paused_; }
  // Between pause() and resume(): the ops run as plain launches on ordinary memory.
  bool paused() const { return paused_; }

  void begin(const std::string& key);
  void pause();
  void resume();
  void end();
  void abort() noexcept;  // after an exception inside a step: ends any capture, forgets the key

  // A buffer for an op inside a segment; null in record mode (the caller allocates normally).
  std::shared_ptr<uint8_t> alloc(size_t bytes, const char* what);
  // A host input of `n` bytes inside a segment: written to the staging block, and the device slot
  // the segment's copy fills, which the ops read; null in record mode (the caller allocates and
  // copies normally).
  std::shared_ptr<uint8_t> upload(const void* src, size_t n, const char* what);

  // The weights on the device changed (one uploaded or replaced): graphs hold their addresses, so
  // every key starts over at its next step.
  void invalidate() { stale_ = true; }

  const GraphStats& stats() const { return stats_; }
  void reset_stats() { stats_ = GraphStats{}; }

 private:
  struct Item {
    char kind;  // 'a' alloc, 'u' upload, 'p' pause
    size_t bytes;
    std::string what;
  };
  struct Entry {
    std::vector<Item> sig;
    bool captured() const { return !segs.empty(); }  // (an entry whose capture failed is dropped)
    size_t arena_bytes = 0, staging_bytes = 0;
    std::shared_ptr<uint8_t> arena;
    uint8_t* staging = nullptr;  // pinned
    std::shared_ptr<uint8_t> dev_staging;                   // its device copy
    std::vector<std::pair<size_t, size_t>> seg_staging;     // each segment's [begin, end) of it
    std::vector<cudaGraphExec_t> segs;
    cudaEvent_t done = nullptr;  // after the last launch: the staging block may be rewritten
    ~Entry();
  };
  void start();  // begin()'s device part: the capture's arena, staging and stream capture
  template <typename F>
  void guarded(F&& f);  // f(); on an exception: abort(), then an error that names graphs=off
  void check_item(char kind, size_t bytes, const char* what);
  void close_segment();  // capture: end it and instantiate; both: launch it
  void capture_inputs();  // capture: the segment's staged inputs to the device, in one copy
  void free_entries();

  std::shared_ptr<CudaContext> ctx_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  Entry* cur_ = nullptr;
  std::string key_;
  Mode mode_ = Mode::off;
  bool paused_ = false;
  bool stale_ = false;
  size_t item_ = 0, arena_off_ = 0, staging_off_ = 0, seg_ = 0;
  GraphStats stats_;
};

}  // namespace degen::cuda
