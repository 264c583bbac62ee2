// `degenbisect bench`: the engine's throughput on either backend (the CPU reference with its
// multiply-add and bandwidth probes; the CUDA path, cuda/bench.h; tensor parallelism at tp=1 against
// tp=N). Here, above both backends, so that the CLI includes neither.
#pragma once
#include "engine/bench_args.h"

namespace degen {

// Runs the benchmark `a` asks for and prints its lines; InputError for options that do not fit the
// backend, UntestableError (125) for a backend this build or machine cannot run.
int run_bench(const BenchArgs& a);

}  // namespace degen
