// `degenbisect bench`: its options; the driver (the CPU probes and passes, tensor parallelism, and
// the CUDA path's) is backends/bench.h.
#include <memory>

#include "backends/bench.h"
#include "cli/command.h"
#include "engine/bench_args.h"

namespace degen::cli {
namespace {

CommandRegistrar reg("bench", "Benchmark the CPU reference engine or the GPU path (tok/s, GEMM rate, GB/s vs copy bandwidth)",
                     80, [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<BenchArgs>();
  sub->add_option("--backend", a->backend, "cpu or cuda");
  sub->add_option("--model", a->model, "Model folder");
  sub->add_option("--preset", a->preset, "Synthetic preset written to a temporary folder first (e.g. bench-1b)");
  sub->add_option("--precision", a->precision, "ref or fp64");
  sub->add_option("--prefill", a->prefill, "Prompt tokens for the prefill measurement (default 128)");
  sub->add_option("--decode", a->decode, "Decode steps (default 8)");
  sub->add_option("--synthetic", a->synthetic,
                  "cuda: a preset's config (e.g. qwen36-27b) with random weights generated on the device");
  sub->add_option("--layers", a->layers, "cuda --synthetic: keep only the first N decoder layers");
  sub->add_option("--batch", a->batches, "cuda: batch sizes to measure (default 1 16)")->delimiter(',');
  sub->add_option("--mtp", a->mtp, "cuda: also time greedy generation at batch 1 with N MTP drafts per step, "
                                   "against plain decoding, with the acceptance")
      ->check(CLI::Range(0, 4));
  sub->add_flag("--graphs", a->graphs, "cuda: also time the decode steps replayed as CUDA graphs (graphs=on), "
                                      "against plain launches");
  sub->add_flag("--count", a->count,
                "cuda, CUDA emulator only (degenbisect-emu): instead of timing, count what each decode step asks "
                "of the device: launches per layer, bytes moved against the weights + states + KV floor, copies, "
                "allocations, host synchronisations");
  sub->add_flag("--ops", a->ops,
                "cuda: per-op cases (each product, fused op, norm, the GDN recurrent step, decode attention at "
                "context --prefill) on the model's shapes: counted on the emulator (launches, bytes against the "
                "op's floor), timed on a GPU (GB/s, TFLOP/s)");
  sub->add_flag("--list", a->list, "cuda --ops: list the cases and exit");
  sub->add_option("--filter", a->filter, "cuda --ops: only the cases whose name contains this text");
  sub->add_option("--peak-gbps", a->peak_gbps,
                  "cuda: the device's nominal memory bandwidth in GB/s, for the decode fraction of the nominal floor "
                  "(default: the datasheet value of a known device: H200 4800, H100 SXM 3350)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--peak-tflops", a->peak_tflops,
                  "cuda: its nominal dense bf16 TFLOP/s, for the prefill MFU (default: H200 and H100 SXM 989)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--config", a->config,
                  "cuda: the toggles the model's layers run under, as run --config takes them: attn, gdn, ssm_dtype, "
                  "conv_dtype, kv_dtype, fault and gemm (e.g. attn=grouped,kv_dtype=fp8); bench's own options set "
                  "the rest (--graphs, --mtp, --tp, --batch)");
  sub->add_option("--tp", a->tp, "Tensor parallelism: decode at tp=1 and tp=N on --model (either backend) and the "
                                 "all-reduces per decoded token")
      ->check(CLI::Range(1, 64));
  sub->footer("Examples:\n  degenbisect bench --backend cpu --preset bench-1b\n"
              "  degenbisect bench --backend cuda --synthetic qwen36-27b --layers 8 --prefill 256\n"
              "  degenbisect bench --backend cuda --model models/tiny-qwen35 --mtp 3 --graphs\n"
              "  degenbisect bench --backend cuda --synthetic qwen36-27b --layers 8 --config attn=grouped\n"
              "  degenbisect-emu bench --backend cuda --synthetic qwen36-27b --layers 4 --count --batch 1 --decode 2\n"
              "  degenbisect-emu bench --backend cuda --synthetic qwen36-27b --layers 4 --ops --filter matmul\n"
              "  degenbisect bench --model models/tiny-qwen35 --tp 2 --decode 32");
  return [a] {
    BenchArgs c = *a;
    c.device = global_options().device;  // backend=cuda: the device of the global --device option
    return run_bench(c);
  };
});

}  // namespace
}  // namespace degen::cli
