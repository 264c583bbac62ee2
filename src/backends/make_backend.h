// Builds the Backend a RunConfig asks for (from backend, precision and tp: the CPU reference, the
// CUDA backend, or a tensor-parallel group of either). A configuration this build or machine cannot
// run throws UntestableError (exit 125) with the reason; it never falls back silently.
// This part sits above both backends (src/cpu, src/cuda), which know nothing of each other; the
// diagnostics take it as a BackendFactory (engine/backend_factory.h) instead of calling it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/backend_factory.h"
#include "engine/bench_args.h"
#include "engine/run_config.h"
#include "model/config.h"

namespace degen {

std::unique_ptr<Backend> make_backend(const RunConfig& rc, const ModelConfig& cfg);
// The CUDA devices of the ranks of backend=cuda,tp=N (the CLI's --devices); empty: N consecutive
// devices from --device.
void set_tp_devices(const std::vector<int>& devices);
// `bench --backend cuda` (src/cuda/bench.cpp), here so that the CLI includes no CUDA header;
// UntestableError (exit 125) in a build without the CUDA backend.
int run_cuda_bench(const BenchArgs& a);
// The global options of the CUDA path (--sync-debug: a device synchronise after every launch;
// --device: the default device); nothing in a build without CUDA.
void configure_cuda(bool sync_debug, int device);
// `degenbisect devices`: one line per CUDA device this build can use; empty when there is none, with
// `why` set to the sentence that says so ("no CUDA device: ...", or that the build has no CUDA backend).
std::vector<std::string> cuda_device_lines(std::string* why);

}  // namespace degen
