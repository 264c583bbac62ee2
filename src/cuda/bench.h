// `degenbisect bench --backend cuda`: the GPU path's throughput (src/cuda/bench.cpp; the CLI's bench
// subcommand calls it in a CUDA build).
#pragma once
#include <string>
#include <vector>

namespace degen::cuda {

struct BenchArgs {
  std::string model;      // checkpoint folder (weights uploaded from the memory map), or
  std::string synthetic;  // a synth preset: config only, random weights generated on the device
  int layers = 0;         // > 0: keep only the first N decoder layers of the config (time budget)
  int prefill = 256;      // prompt tokens per sequence
  int decode = 8;         // decode steps measured
  std::vector<int> batches{1, 16};
  int device = 0;
  int mtp = 0;            // > 0: also greedy generation at batch 1 with this many MTP drafts per step
  bool graphs = false;    // also the decode steps as CUDA graphs (graphs=on), against plain launches
  bool count = false;     // count launches, bytes, copies per decode step instead of timing (emulator)
  bool ops = false;       // per-op cases instead of the model: counted (emulator) or timed (GPU)
  bool list = false;      // --ops: list the cases only
  std::string filter;     // --ops: the cases whose name contains this
  double peak_gbps = 0;   // > 0: the device's nominal memory bandwidth (else known devices' datasheet value)
  double peak_tflops = 0; // > 0: its nominal dense bf16 rate
  std::string config;     // the layers' toggles and gemm (attn, gdn, ssm_dtype, conv_dtype, kv_dtype, fault, gemm)
};

int run_bench(const BenchArgs& a);

}  // namespace degen::cuda
