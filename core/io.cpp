// Atomic file output and build provenance (see io.hpp).
#include "core/io.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "hzp_git_revision.hpp"

namespace hzp::core {

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  fs::path dest(path);
  fs::path dir = dest.has_parent_path() ? dest.parent_path() : fs::path(".");
  std::error_code ec;
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw InputError(path, "", fmt::format("cannot create folder {}: {}", dir.string(), ec.message()));
  }
  fs::path tmp = dir / fmt::format(".{}.tmp.{}", dest.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", "cannot write to this folder");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      throw InputError(path, "", "write failed (disk full?)");
    }
  }
  fs::rename(tmp, dest, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError(path, "", "cannot rename the finished file into place");
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
