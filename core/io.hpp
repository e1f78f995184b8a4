// Output files: written whole or not at all, and stamped with provenance.
#pragma once

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

/// Reads a whole file; InputError when it cannot be opened.
[[nodiscard]] std::string read_file(const std::string& path);

/// Writes all of `data` to a file descriptor (a pipe between hzp's
/// processes), retrying on EINTR; false if the other end is gone.
bool write_all_fd(int fd, const std::string& data);
/// Reads a file descriptor to its end.
[[nodiscard]] std::string read_all_fd(int fd);

/// hzp's version and the git revision it was built from.
[[nodiscard]] std::string version();
[[nodiscard]] std::string git_revision();

}  // namespace hzp::core
