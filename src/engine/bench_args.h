// The options of `degenbisect bench`, declared once for both of its paths: the CPU reference engine
// (src/cli/cmd_bench.cpp) and the GPU path (src/cuda/bench.cpp, reached through
// backends/make_backend.h). The defaults are the ones `degenbisect bench --help` documents.
#pragma once
#include <string>
#include <vector>

namespace degen {

struct BenchArgs {
  std::string backend = "cpu";  // cpu or cuda
  std::string model;            // checkpoint folder (cuda: weights uploaded from the memory map)
  std::string preset;           // cpu: a synth preset written to a temporary folder first
  std::string synthetic;        // cuda: a synth preset's config, random weights generated on the device
  std::string precision = "ref";  // cpu: ref or fp64
  int prefill = 128;            // prompt tokens per sequence
  int decode = 8;               // decode steps measured
  int layers = 0;               // cuda --synthetic: > 0 keeps only the first N decoder layers (time budget)
  std::vector<int> batches{1, 16};  // cuda: batch sizes
  int device = 0;               // cuda: the device (the CLI's global --device)
  int tp = 1;                   // > 1: tensor parallelism against tp=1 (either backend, --model)
  int mtp = 0;                  // cuda: > 0 also greedy generation at batch 1 with this many MTP drafts per step
  bool graphs = false;          // cuda: also the decode steps as CUDA graphs (graphs=on), against plain launches
  bool count = false;           // cuda: count launches, bytes, copies per decode step instead of timing (emulator)
  bool ops = false;             // cuda: per-op cases instead of the model: counted (emulator) or timed (GPU)
  bool list = false;            // cuda --ops: list the cases only
  std::string filter;           // cuda --ops: the cases whose name contains this
  double peak_gbps = 0;         // cuda: > 0 the device's nominal memory bandwidth (else a known device's datasheet)
  double peak_tflops = 0;       // cuda: > 0 its nominal dense bf16 rate
  std::string config;           // cuda: the layers' toggles and gemm (attn, gdn, ssm_dtype, conv_dtype, kv_dtype,
                                //   fault, gemm)
};

}  // namespace degen
