// Output files: written whole or not at all, and stamped with provenance.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hzp::core {

/// Writes `content` to a temporary file in the destination's folder and renames
/// it into place, so an interrupted run never leaves a half-written file.
/// Throws InputError(path, "", ...) when the folder is not writable.
void write_file_atomic(const std::string& path, const std::string& content);

/// The outputs of one run, committed together: each written to a fresh
/// temporary file beside its destination (O_EXCL | O_NOFOLLOW, never through a
/// planted file or link; stale temporaries of dead hzp processes removed),
/// then all renamed into place — or, when any cannot be written, none. "-" is
/// standard output. InputError for an empty name, the same file twice, or a
/// destination that is not a regular file.
class OutputSet {
 public:
  void add(const std::string& path, std::string content);
  void commit();

 private:
  std::vector<std::pair<std::string, std::string>> files_;
};

/// The most bytes one input file may hold: 256 MiB, or the environment's
/// HZP_MAX_INPUT_BYTES (a whole number, K/M/G suffixes as powers of two).
/// InputError("environment", "HZP_MAX_INPUT_BYTES", ...) for a bad value.
inline constexpr std::int64_t kDefaultMaxInputBytes = 256LL << 20;
[[nodiscard]] std::int64_t max_input_bytes();

/// Reads a whole input file: the one way hzp reads models, clusters, plans,
/// calibrations, sweep specs, Schedules, traces and measurements. A regular
/// file (symbolic links followed) of at most max_input_bytes(), or "-" for
/// standard input (the same limit). InputError naming the file when it
/// cannot be opened, is a folder, a device or a FIFO (never blocks on one),
/// or is larger than the limit.
[[nodiscard]] std::string read_file(const std::string& path);
/// InputError naming `path` unless it is a regular file (symbolic links
/// followed) or, with `may_be_missing`, does not exist: what a database
/// (SQLite opens it itself) is checked with before it is opened.
void require_regular_file(const std::string& path, bool may_be_missing);
/// InputError naming the file unless `path` and the side files SQLite keeps
/// beside it (`-wal`, `-shm`, `-journal`) are each a regular file or absent —
/// never a symbolic link, dangling or not: an output hzp writes in place (a
/// sweep database) must not write through a planted link.
void require_own_file(const std::string& path);
/// InputError naming `path` unless its folder exists and this process may
/// write there ("-" and "" pass): checked before a run whose outputs are
/// written at its end, so a long measurement is not lost to a bad path.
void require_writable_folder(const std::string& path);

/// Writes all of `data` to a file descriptor (a pipe between hzp's
/// processes), retrying on EINTR; false if the other end is gone.
bool write_all_fd(int fd, const std::string& data);
/// Reads a file descriptor to its end.
[[nodiscard]] std::string read_all_fd(int fd);

/// hzp's version and the git revision it was built from.
[[nodiscard]] std::string version();
[[nodiscard]] std::string git_revision();

}  // namespace hzp::core
