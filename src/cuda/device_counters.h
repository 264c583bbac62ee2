// What the device did, counted call by call: kernel launches, cuBLAS calls, copies by direction,
// allocations, host synchronisations, and the bytes each call read and wrote in device (global)
// memory. Only the CUDA emulator (tests/emu) can count these; on a GPU `counters_supported()` is
// false and the figures come from a profiler instead (Nsight Systems / Compute), not from us.
//
// How the emulator counts bytes: while counting, every device allocation's pages are inaccessible;
// the first read of a page within a call makes it readable and adds the page's bytes (its overlap
// with the allocation) to the call's reads, the first write to its writes. Before each call every
// page is closed again. So a call's figure is the distinct bytes it touched at page (4 KiB)
// granularity: a model of DRAM traffic in which re-reads within one kernel hit the cache and
// nothing survives in cache between calls (an upper bound for small activations, exact for the
// weights and states, which are what the floors count). x86-64 tells a write from a read at the
// first fault; elsewhere a written page also counts as read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace degen::cuda {

struct CallTraffic {
  std::string name;  // kernel name, "cublasGemmEx", "cudaMemcpyAsync HtoD", ...
  int64_t calls = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

struct DeviceCounters {
  int64_t launches = 0;        // kernels run (a replayed graph's kernel nodes count one each)
  int64_t blas_calls = 0;      // cuBLAS products run
  int64_t graph_launches = 0;  // cudaGraphLaunch calls
  int64_t copies_h2d = 0, copies_d2h = 0, copies_d2d = 0;
  int64_t bytes_h2d = 0, bytes_d2h = 0, bytes_d2d = 0;
  int64_t pageable_copies = 0;  // copies whose host side is pageable memory (staged or synchronous)
  int64_t memsets = 0;
  int64_t allocs = 0, frees = 0;  // cudaMalloc / cudaMallocAsync / cudaFree / cudaFreeAsync
  int64_t host_syncs = 0;         // stream / device / event synchronisations, blocking copies
  int64_t bytes_read = 0, bytes_written = 0;  // device memory, summed over every call
  std::vector<CallTraffic> by_name;           // per call name, most bytes first
  int64_t calls() const { return launches + blas_calls; }
};

// Whether this build can count (the emulator: yes; a GPU build: no).
bool counters_supported();
// Zero the counters and count from now on (the emulator closes every device page; one host thread
// and one device while counting). No effect where unsupported.
void counters_start();
// The counts since counters_start (all zero where unsupported).
DeviceCounters counters_read();
// Stop counting (pages open again).
void counters_stop();
// a - b, field by field and name by name (the counts of the calls between two reads).
DeviceCounters counters_diff(const DeviceCounters& a, const DeviceCounters& b);
// Most bytes moved (read + written) first: the order of DeviceCounters::by_name.
void sort_by_bytes(std::vector<CallTraffic>& calls);

}  // namespace degen::cuda
