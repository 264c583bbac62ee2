// Shared by the libFuzzer targets (tests/fuzz/README.md). Each target feeds its input to one of the
// tool's parsers the way the CLI does (a file where the CLI reads a file) and holds it to the
// contract of every input: an answer, or a degen::Error (exit 128 with a message). Anything else
// (a crash, a sanitizer report, a hang, an exception that is not a degen::Error: the CLI's
// "internal error") is a finding and stops the run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <exception>
#include <new>
#include <typeinfo>
#include <utility>
#include <vector>

#include "util/error.h"

namespace fuzz {

// This process's scratch folder (under $TMPDIR, else /dev/shm when it exists, else /tmp), made on
// first use and removed at exit. libFuzzer's -fork/-jobs workers are processes, so each has its own.
const std::filesystem::path& scratch();

// The repository (seed records, fixtures): DEGEN_FUZZ_SOURCE_DIR, set by tests/fuzz/CMakeLists.txt.
std::filesystem::path source_dir();

void write_bytes(const std::filesystem::path& path, std::string_view bytes);
inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder's files packed into one input (the folder targets, make_seeds.py pack_files): each file is
// "\0FILE <relative path>\n<bytes>", in order. Returns (path, bytes) pairs; a path that is empty,
// absolute, longer than 200 bytes, or has an empty, ".", ".." or over-long component is dropped (the
// harness writes only inside its scratch folder); bytes before the first marker are ignored.
std::vector<std::pair<std::string, std::string>> unpack_files(std::string_view input);
// Writes them under `dir` (made empty first), making the folders of each path.
void write_files(const std::filesystem::path& dir, const std::vector<std::pair<std::string, std::string>>& files);

// Prints "fuzz: <what>: <detail>" and aborts (libFuzzer saves the input as a crash).
[[noreturn]] void finding(const std::string& what, const std::string& detail);

// Runs fn(); a degen::Error is the expected answer to a bad input, any other exception is a finding.
template <class F>
void expect_clean(const char* what, F&& fn) {
  try {
    fn();
  } catch (const degen::Error&) {
    // the documented answer: exit 128 (or 125) with a message
  } catch (const std::bad_alloc&) {
    finding(what, "std::bad_alloc: an allocation sized by the input, not refused as bad input");
  } catch (const std::exception& e) {
    finding(what, std::string("not a degen::Error (the CLI would say \"internal error\"): ") + typeid(e).name() + ": " + e.what());
  }
}

}  // namespace fuzz
