// `degenbisect bench --backend cuda`: the GPU path's throughput (src/cuda/bench.cpp; the CLI's bench
// subcommand reaches it through backends/make_backend.h, run_cuda_bench). Its options are bench's
// one BenchArgs (engine/bench_args.h).
#pragma once
#include "engine/bench_args.h"

namespace degen::cuda {

int run_bench(const BenchArgs& a);

}  // namespace degen::cuda
