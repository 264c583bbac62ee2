// The launch gate of CUDA graph replay (src/cuda/graphs.h). While a captured decode step is
// replayed, the backend's ops still run on the host (their allocations and staged inputs must
// match the capture) but launch nothing: the graph does that work. Every launcher the forward pass
// reaches starts with DEGEN_LAUNCH_GATE(); src/cuda code that enqueues copies or memsets directly
// checks launches_suppressed() the same way.
#pragma once

namespace degen::cuda {
bool launches_suppressed();  // this thread is replaying a graph step (src/cuda/graphs.cpp)
}  // namespace degen::cuda

#define DEGEN_LAUNCH_GATE()                               \
  do {                                                    \
    if (::degen::cuda::launches_suppressed()) return;     \
  } while (0)
