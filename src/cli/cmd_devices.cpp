// `degenbisect devices`: the CUDA devices this build can use (exit 125 when there are none).
#include <cstdio>

#include "build_config.h"
#include "cli/command.h"
#include "util/error.h"
#if DEGEN_WITH_CUDA
#include "cuda/device.h"
#endif

namespace degen::cli {
namespace {

int run_devices() {
#if DEGEN_WITH_CUDA
  std::string why;
  auto devs = cuda::list_devices(&why);
  if (devs.empty()) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return static_cast<int>(ExitCode::untestable);
  }
  for (const auto& d : devs)
    std::printf("cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB (%.1f GiB free)  ~%.0f GB/s\n", d.index, d.name.c_str(),
                d.cc_major, d.cc_minor, d.sm_count, d.total_bytes / 1073741824.0, d.free_bytes / 1073741824.0,
                d.mem_bandwidth_gbs);
  return 0;
#else
  std::printf("this build has no CUDA backend (configure with -DDEGEN_CUDA=ON on a machine with nvcc)\n");
  return static_cast<int>(ExitCode::untestable);
#endif
}

CommandRegistrar reg("devices", "List the CUDA devices this build can use (exit 125 when none)", 95,
                     [](CLI::App*) -> std::function<int()> { return [] { return run_devices(); }; });

}  // namespace
}  // namespace degen::cli
