// Whole-file reads and writes of the documents the tool reads and writes (config.json, cases,
// tokenizer.json, records' JSON, reports): the generic file I/O every layer uses.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace degen {

// Writes `text` to `path` by the output rule of util/output_file.h: a regular file (or a new name)
// atomically (temp file in the same folder, fsync, rename), a character device or a FIFO in place,
// anything else refused; symbolic links followed.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);
// Reads a whole regular file of at most max_bytes; throws InputError naming the path when it cannot,
// when the path is not a regular file (a folder, a FIFO, /dev/zero: refused before any read, so
// nothing blocks or grows without bound), or when the file is larger than max_bytes.
constexpr uint64_t kNoSizeLimit = ~uint64_t(0);
// note: the documents given to the tool (config.json, cases, matrices, tokenizer.json, report inputs,
// tokenize --file text) are kilobytes to tens of megabytes; a larger one is a wrong file, not an input.
// Golden-record data files and checkpoints are not capped (they are as large as the model makes them).
constexpr uint64_t kMaxInputFileBytes = uint64_t(1) << 30;  // 1 GiB
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes = kNoSizeLimit);

}  // namespace degen
