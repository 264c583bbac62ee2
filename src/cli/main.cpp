// degenbisect entry point: wires the registered subcommands into CLI11, maps errors to exit codes
// (../shared/spec/metrics.md §6: 0 good, 1 bad, 125 untestable, 128 usage or input error).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "build_config.h"
#include "cli/command.h"
#include "backends/make_backend.h"
#include "util/cpu_isa.h"
#include "util/error.h"
#include "util/output_file.h"
#if DEGEN_WITH_CUDA
#include "cuda/check.h"
#include "cuda/context.h"
#endif

namespace degen::cli {
std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}
GlobalOptions& global_options() {
  static GlobalOptions options;
  return options;
}
}  // namespace degen::cli

namespace {

using namespace degen;
using namespace degen::cli;

// The command itself: parse, check, run; its exit code. main() adds the check of stdout.
int run_command(int argc, char** argv) {
  CLI::App app{
      "degenbisect: find out why a hybrid Gated-DeltaNet model (Qwen3.5 / Qwen3.6 / Qwen3-Next)\n"
      "served on GPUs produces degenerate output, and name the toggle, layer and operation.\n\n"
      "Exit codes: 0 good, 1 bad, 125 untestable, 128 usage or input error.",
      "degenbisect"};
  app.set_version_flag("--version", std::string("degenbisect ") + kVersion +
                                        (kHaveCuda ? " (CUDA backend built)" : " (CPU only)") +
                                        "\nCPU products: " + cpu::isa_description());
  app.require_subcommand(1);
  app.fallthrough();
  auto& g = global_options();
  app.add_flag("-q,--quiet", g.quiet, "Print less progress information");
  app.add_flag("--sync-debug", g.sync_debug,
               "Synchronise after every GPU op so an asynchronous fault is reported where it happened");
  app.add_option("--device", g.device, "CUDA device index that backend=cuda runs on (default 0; see `devices`)")
      ->check(CLI::Range(0, 1023));
  app.add_option("--devices", g.devices,
                 "CUDA devices of the ranks of backend=cuda,tp=N, one per rank, e.g. --devices 0,1 "
                 "(default: N consecutive devices from --device)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));

  auto& registry = command_registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const CommandEntry& a, const CommandEntry& b) { return a.order < b.order; });
  std::function<int()> action;
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (auto& cmd : registry) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.description);
    actions.emplace_back(sub, cmd.setup(sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and usage
    return static_cast<int>(ExitCode::input);
  }

  set_tp_devices(g.devices);
#if DEGEN_WITH_CUDA
  cuda::set_sync_debug(g.sync_debug);
  cuda::set_default_device(g.device);
#endif
  try {
    cpu::active_isa();  // an invalid DEGEN_CPU_ISA is an input error before any work
    for (auto& [sub, act] : actions)
      if (sub->parsed()) return act();
    return static_cast<int>(ExitCode::input);
  } catch (const Error& e) {
    std::fprintf(stderr, "degenbisect: error: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave (or one under it) that cannot be used: a symlink loop, a part that is a
    // file, a read-only mount, no permission. An input error naming the path and the reason.
    std::fprintf(stderr, "degenbisect: error: %s\n", describe_filesystem_error(e).c_str());
    return static_cast<int>(ExitCode::input);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "degenbisect: error: out of memory\n");
    return static_cast<int>(ExitCode::untestable);
  } catch (const std::exception& e) {
    // A std::exception that is not a degen::Error is a bug or an unexpected system failure:
    // say so, and still exit with the input-error code so `git bisect run` stops.
    std::fprintf(stderr, "degenbisect: internal error: %s\n", e.what());
    return static_cast<int>(ExitCode::input);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Every output is checked, stdout too (util/output_file.h): whatever printf, fwrite and std::cout
  // wrote there and could not be written (a full disk, a reader gone while SIGPIPE is ignored) is
  // exit 128 with the OS error, whatever the command answered: its result never reached the reader.
  degen::install_stdout_check();
  const int rc = run_command(argc, argv);
  const std::string failed = degen::stdout_failure();
  if (failed.empty()) return rc;
  std::fprintf(stderr, "degenbisect: error: %s\n", failed.c_str());
  return static_cast<int>(degen::ExitCode::input);
}
