// Errors and exit codes shared by every part of degenbisect.
// Exit codes follow ../shared/spec/metrics.md §6 (git-bisect compatible):
//   0 good, 1 bad, 125 untestable, 128 usage or input error.
// User-facing failures are exceptions carrying their exit code; main() catches them.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace degen {

enum class ExitCode : int {
  good = 0,         // within tolerances, not degenerate
  bad = 1,          // divergent or engine-induced degeneration
  untestable = 125, // unsupported toggle, no GPU, out of memory
  input = 128,      // bad file, bad flag: aborts `git bisect run`
};

// Concatenate anything streamable into a string: cat("expected ", n, ", found ", m).
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// An error the user can act on. `what()` says what was expected and what was found.
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ExitCode code() const { return code_; }
 private:
  ExitCode code_;
};

// Input error (exit 128): corrupt file, wrong shape, unknown value.
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(ExitCode::input, msg) {}
};

// Cannot be tested here (exit 125): no device, unsupported toggle.
class UntestableError : public Error {
 public:
  explicit UntestableError(const std::string& msg) : Error(ExitCode::untestable, msg) {}
};

template <typename... Args>
[[noreturn]] void input_error(Args&&... args) {
  throw InputError(cat(std::forward<Args>(args)...));
}

// Internal invariant; a failure is a bug in degenbisect, not in the user's input.
#define DEGEN_ASSERT(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw std::logic_error(::degen::cat(__FILE__, ":", __LINE__, ": internal error: ", \
                                          #cond, " ", ##__VA_ARGS__));                   \
  } while (0)

}  // namespace degen
