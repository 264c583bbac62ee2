// degenbisect entry point: wires the registered subcommands into CLI11, maps errors to exit codes
// (../shared/spec/metrics.md §6: 0 good, 1 bad, 125 untestable, 128 usage or input error).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "build_config.h"
#include "cli/command.h"
#include "backends/make_backend.h"
#include "model/tokenizer.h"
#include "util/cpu_isa.h"
#include "util/error.h"
#include "util/output_file.h"

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

// `s` for a message: valid UTF-8 as it is, each byte that is not (and each control character) as \xNN.
std::string printable(std::string_view s) {
  std::string out;
  auto hex = [&out](unsigned char c) {
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02X", c);
    out += b;
  };
  size_t i = 0;
  while (i < s.size()) {
    const size_t bad = Tokenizer::find_invalid_utf8(s.substr(i));
    const size_t end = bad == std::string_view::npos ? s.size() : i + bad;
    for (; i < end; ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c == 0x7F) hex(c);
      else out += s[i];
    }
    if (i < s.size()) hex(static_cast<unsigned char>(s[i++]));
  }
  return out;
}

// Every string given to a command (its options and positional arguments) must be valid UTF-8, checked
// here once, before any work. Paths, URLs, case ids, configurations and command lines end up in JSON
// (records, --json, sweep results, replay files) and XML (--junit), which hold UTF-8 only: a byte
// that is not UTF-8 (legal in a Linux path) used to surface as a JSON error once the whole run was
// done, with its result lost. Refused (exit 128) rather than escaped: an escaped path in a record is
// no longer the path a reader can open, and one rule for every string is easier to foresee than a
// rule per option (README, "Bad input: the rules").
void check_utf8_arguments(const CLI::App& sub) {
  for (const CLI::Option* opt : sub.get_options()) {
    for (const std::string& v : opt->results()) {
      const size_t bad = Tokenizer::find_invalid_utf8(v);
      if (bad == std::string_view::npos) continue;
      const std::string name = opt->get_lnames().empty() && opt->get_snames().empty()
                                   ? cat("argument ", opt->get_name(true))
                                   : opt->get_name();
      input_error(sub.get_name(), " ", name, ": expected UTF-8 text, found \"", printable(v), "\" (byte ", bad,
                  " is not UTF-8; checked before the run): the paths, URLs and values of a command line are written "
                  "into JSON and XML outputs, which hold UTF-8 only; rename such a file or folder, or name it "
                  "through a symbolic link whose name is UTF-8");
    }
  }
  for (const CLI::App* s : sub.get_subcommands()) check_utf8_arguments(*s);
}

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
  configure_cuda(g.sync_debug, g.device);
  try {
    cpu::active_isa();  // an invalid DEGEN_CPU_ISA is an input error before any work
    for (auto& [sub, act] : actions)
      if (sub->parsed()) {
        check_utf8_arguments(*sub);  // before any work: the strings that JSON outputs carry
        return act();
      }
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
