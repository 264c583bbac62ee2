// Subcommand registration: each src/cli/cmd_<name>.cpp registers itself with a static
// CommandRegistrar, so main.cpp only wires CLI11 and never needs editing for a new subcommand.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace degen::cli {

// Adds options to `sub` and returns the action to run once parsing succeeded.
// The action returns the process exit code (util/error.h ExitCode values).
using CommandSetup = std::function<std::function<int()>(CLI::App* sub)>;

struct CommandEntry {
  std::string name;
  std::string description;
  int order;  // position in --help
  CommandSetup setup;
};

std::vector<CommandEntry>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string description, int order, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), order, std::move(setup)});
  }
};

// Global options every subcommand can read (set in main.cpp).
struct GlobalOptions {
  bool quiet = false;
  bool sync_debug = false;  // synchronise after each CUDA op (STYLE.md principle 4)
  int device = 0;           // CUDA device of backend=cuda (--device N)
  std::vector<int> devices; // CUDA devices of the ranks of backend=cuda,tp=N (--devices 0,1)
};
GlobalOptions& global_options();

}  // namespace degen::cli
