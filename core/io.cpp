// Atomic file output and build provenance (see io.hpp).
#include "core/io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "hzp_git_revision.hpp"

namespace hzp::core {

namespace {

namespace fs = std::filesystem;

fs::path folder_of(const fs::path& dest) { return dest.has_parent_path() ? dest.parent_path() : fs::path("."); }

// Removes temporary files of this destination left by hzp processes that no
// longer run (killed mid-write): ".<name>.tmp.<pid>[.<n>]".
void remove_stale_temps(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  const std::string prefix = "." + name + ".tmp.";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.rfind(prefix, 0) != 0) continue;
    const std::string rest = f.substr(prefix.size());
    const std::string digits = rest.substr(0, rest.find('.'));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
  }
}

// Creates a fresh temporary file beside `dest` (O_EXCL | O_NOFOLLOW: never
// through a planted file or link) and writes `content` to it. The folders it
// had to create are appended to `created`, outermost first.
fs::path write_temp(const fs::path& dest, const std::string& content, std::vector<fs::path>& created) {
  const fs::path dir = folder_of(dest);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    std::vector<fs::path> missing;
    for (fs::path d = dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
      missing.insert(missing.begin(), d);
      if (d == d.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    for (const auto& d : missing) {
      if (fs::is_directory(d)) created.push_back(d);
    }
    if (ec) throw InputError(dest.string(), "", fmt::format("cannot create folder {}: {}", dir.string(), ec.message()));
  }
  remove_stale_temps(dir, dest.filename().string());
  for (int n = 0; n < 100; ++n) {
    const fs::path tmp =
        dir / fmt::format(".{}.tmp.{}{}", dest.filename().string(), ::getpid(), n ? fmt::format(".{}", n) : "");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0)
      throw InputError(dest.string(), "", fmt::format("cannot write to this folder ({})", std::strerror(errno)));
    const bool ok = write_all_fd(fd, content);
    const bool closed = ::close(fd) == 0;
    if (!ok || !closed) {
      fs::remove(tmp, ec);
      throw InputError(dest.string(), "", "write failed (disk full?)");
    }
    return tmp;
  }
  throw InputError(dest.string(), "", "cannot create a temporary file beside it");
}

void check_destination(const fs::path& dest) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dest, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st)) {
    throw InputError(dest.string(), "", "expected a regular file to replace (it is a folder, link or device)");
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  OutputSet out;
  out.add(path, content);
  out.commit();
}

void OutputSet::add(const std::string& path, std::string content) {
  if (path.empty()) throw InputError("command line", "", "expected an output file name, got nothing");
  for (const auto& [p, c] : files_) {
    std::error_code e1, e2;
    // Absolute first: weakly_canonical leaves "x.json" relative while it
    // resolves "./x.json", so the two would differ.
    if (path != "-" && fs::weakly_canonical(fs::absolute(p), e1) == fs::weakly_canonical(fs::absolute(path), e2) &&
        !e1 && !e2) {
      throw InputError(path, "", "expected each output once (two outputs would be written to this file)");
    }
  }
  if (path != "-") check_destination(path);
  files_.emplace_back(path, std::move(content));
}

void OutputSet::commit() {
  // Every file written beside its destination first; nothing renamed into
  // place unless all were written.
  std::vector<fs::path> temps, created;
  try {
    for (const auto& [path, content] : files_) {
      temps.push_back(path == "-" ? fs::path() : write_temp(path, content, created));
    }
  } catch (...) {
    // Nothing left behind: the temporary files, then the folders made for
    // them, innermost first (each only if empty).
    std::error_code ec;
    for (const auto& t : temps) {
      if (!t.empty()) fs::remove(t, ec);
    }
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);
    throw;
  }
  for (std::size_t i = 0; i < files_.size(); ++i) {
    if (files_[i].first == "-") {
      std::fwrite(files_[i].second.data(), 1, files_[i].second.size(), stdout);
      std::fflush(stdout);
      continue;
    }
    std::error_code ec;
    fs::rename(temps[i], files_[i].first, ec);
    if (ec) {
      for (std::size_t j = i; j < temps.size(); ++j) {
        if (!temps[j].empty()) fs::remove(temps[j], ec);
      }
      throw InputError(files_[i].first, "", "cannot rename the finished file into place");
    }
  }
  files_.clear();
}

namespace {

// What a non-regular file is, for the error line.
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads at most `limit` + 1 bytes of `fd`: more means over the limit.
std::string read_bounded(int fd, const std::string& path, std::int64_t limit) {
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path, "", fmt::format("cannot read it ({})", std::strerror(errno)));
    if (n == 0) return data;
    data.append(buf, static_cast<std::size_t>(n));
    if (static_cast<std::int64_t>(data.size()) > limit) {
      throw InputError(path, "", fmt::format("expected at most {} bytes (HZP_MAX_INPUT_BYTES), got more", limit));
    }
  }
}

}  // namespace

std::int64_t max_input_bytes() {
  const char* env = std::getenv("HZP_MAX_INPUT_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultMaxInputBytes;
  const std::string text = env;
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  std::int64_t n = 0;
  const bool ok = digits > 0 && digits <= 12 && shift >= 0 && (n = std::stoll(text.substr(0, digits))) > 0 &&
                  n <= (std::int64_t{1} << 40) >> shift;
  if (!ok) {
    throw InputError("environment", "HZP_MAX_INPUT_BYTES",
                     fmt::format("expected a whole number of bytes in [1, 2^40] (K, M, G suffixes: powers of two), "
                                 "got '{}'",
                                 text));
  }
  return n << shift;
}

void require_regular_file(const std::string& path, bool may_be_missing) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (may_be_missing && errno == ENOENT) return;
    throw InputError(path, "", "cannot open file");
  }
  if (!S_ISREG(st.st_mode)) {
    throw InputError(path, "", fmt::format("expected a regular file (it is {})", file_kind(st.st_mode)));
  }
}

void require_writable_folder(const std::string& path) {
  if (path.empty() || path == "-") return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    throw InputError(path, "", fmt::format("expected a file in an existing folder ({} is not one)", folder));
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw InputError(path, "", fmt::format("expected a file in a folder this user can write ({} is not)", folder));
  }
}

void require_own_file(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string p = path + suffix;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      throw InputError(p, "", "cannot open file");
    }
    if (S_ISLNK(st.st_mode)) {
      throw InputError(p, "", "expected a regular file hzp writes itself, not a symbolic link");
    }
    if (!S_ISREG(st.st_mode)) {
      throw InputError(p, "", fmt::format("expected a regular file (it is {})", file_kind(st.st_mode)));
    }
  }
}

std::string read_file(const std::string& path) {
  const std::int64_t limit = max_input_bytes();
  if (path == "-") return read_bounded(STDIN_FILENO, "standard input", limit);
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) throw InputError(path, "", "cannot open file");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw InputError(path, "", fmt::format("cannot read it ({})", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    throw InputError(path, "", fmt::format("expected a regular file (it is {})", file_kind(st.st_mode)));
  }
  if (st.st_size > limit) {
    throw InputError(path, "",
                     fmt::format("expected at most {} bytes (HZP_MAX_INPUT_BYTES), got {}", limit, st.st_size));
  }
  return read_bounded(fd.get(), path, limit);
}

std::string version() { return HZP_VERSION; }
std::string git_revision() { return HZP_GIT_REV; }

bool write_all_fd(int fd, const std::string& data) {
  std::size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::write(fd, data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

std::string read_all_fd(int fd) {
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

}  // namespace hzp::core
