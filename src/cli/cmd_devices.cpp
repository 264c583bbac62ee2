// `degenbisect devices`: the CUDA devices this build can use (exit 125 when there are none).
#include <cstdio>
#include <string>
#include <vector>

#include "backends/make_backend.h"
#include "cli/command.h"
#include "util/error.h"

namespace degen::cli {
namespace {

int run_devices() {
  std::string why;
  const std::vector<std::string> lines = cuda_device_lines(&why);
  if (lines.empty()) {
    std::printf("%s\n", why.c_str());
    return static_cast<int>(ExitCode::untestable);
  }
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return 0;
}

CommandRegistrar reg("devices", "List the CUDA devices this build can use (exit 125 when none)", 95,
                     [](CLI::App*) -> std::function<int()> { return [] { return run_devices(); }; });

}  // namespace
}  // namespace degen::cli
