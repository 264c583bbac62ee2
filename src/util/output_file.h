// Every file degenbisect writes goes through here (one rule for all outputs: --json, --junit,
// report -o, --server-log, the files of a record, a sweep or a synthesized model):
//   - a regular file, or a name that does not exist yet, is replaced atomically: a temporary file in
//     the same folder, fsync, rename (a reader sees the old content or the new one, never half);
//   - a character device (/dev/null, /dev/stdout, a terminal) or a named pipe (FIFO) is written in
//     place: opened for writing, never replaced, never removed (running as root, a rename over
//     /dev/null would replace the system's /dev/null with a regular file). A write error there
//     (ENOSPC on /dev/full, EPIPE from a FIFO whose reader left) is an InputError (exit 128);
//     note: opening a FIFO waits for a reader, as a shell redirection does;
//   - a block device (a disk), a socket or a folder is refused (exit 128) before anything is written;
//   - a symbolic link is followed: its target is what is written (replaced atomically when it is a
//     regular file), the link stays a link; a symlink loop is an InputError naming the path.
// Path problems met on the way (a loop, a part of the path that is a file, a read-only file system,
// no permission) are InputErrors that name the path and the reason, never "internal error".
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>

namespace degen {

// The content producer writes through the sink it is given, in as many pieces as it likes.
using OutputSink = std::function<void(const void*, size_t)>;

// Writes `path` by the rule above. An exception from `produce` leaves a regular target untouched.
void write_output_file(const std::filesystem::path& path, const std::function<void(const OutputSink&)>& produce);
void write_output_file(const std::filesystem::path& path, const std::string& text);

// stdout is an output as well (--json -, report -o -, inspect --json, the tables and verdicts,
// --help): one writer carries all of it and keeps the OS error of the first write that fails.
//   - install_stdout_check() (main(), before anything is printed) points C's `stdout` at that writer
//     (a glibc cookie stream over fd 1, line-buffered on a terminal, fully buffered otherwise) and
//     std::cout at `stdout`, so printf, fwrite(stdout) and std::cout all pass through it;
//   - stdout_failure() (main(), when the command is done) flushes it and answers the message for a
//     failed write or flush, "cannot write stdout (WHERE): write: REASON", WHERE being what fd 1 is
//     (/dev/full, pipe:[1234]) when /proc says so; "" when all of it was written. main() then exits 128
//     with that message, whatever the command's verdict: its output never reached the reader;
//   - a reader that went away (`degenbisect faults | head -1`): SIGPIPE keeps its default action, so
//     the process ends at once, quietly, killed by the signal (a shell reports 141, never 0), as
//     coreutils do; where SIGPIPE is ignored (inherited from the parent) the write fails with EPIPE and
//     the rule above applies: exit 128, "cannot write stdout (pipe:[...]): write: Broken pipe".
void install_stdout_check();
std::string stdout_failure();

// Opens `path` for a stream written while degenbisect runs (a server's log, by a child process):
// a regular file or a new name is truncated or created (mode 0644), a character device or a FIFO is
// opened in place; the rest as above. Returns a close-on-exec descriptor opened O_WRONLY|O_APPEND.
int open_output_stream(const std::filesystem::path& path);

// Before a long run: refuses (exit 128, naming `flag`) an output FILE that could not be written at
// its end: a folder, a socket or a block device, a symlink loop, a folder to write into that is
// missing, read-only or not writable. Writes nothing into a device or a FIFO (a probe would end a
// reader's input); "-" and "" (stdout, not asked) pass.
void check_output_file(const std::string& path, const std::string& flag);

// Before a run that creates the output FOLDER `path` (--out of golden, sweep, synth): refuses
// (exit 128, naming `flag`) a path that exists and is not a folder, a symlink loop, or a missing
// folder whose nearest existing parent is not a folder or not writable. Creates nothing.
void check_output_folder(const std::string& path, const std::string& flag);

// "a folder", "a named pipe (FIFO)", ...: what a path is (st_mode), for messages about it.
const char* kind_of(mode_t m);

// "Too many levels of symbolic links: a symbolic link loop, ...", "Read-only file system", ...: the
// reason of a path error from its errno, with a hint where strerror alone is cryptic.
std::string path_error_reason(int err);

// The message for a std::filesystem::filesystem_error that escaped to main(): the path(s) and the
// reason, e.g. "cannot use loop: Too many levels of symbolic links: ... (operation: status)".
std::string describe_filesystem_error(const std::filesystem::filesystem_error& e);

}  // namespace degen
