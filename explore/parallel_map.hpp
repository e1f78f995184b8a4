// Work spread over forked processes (SimGrid and the engines keep global
// state; a process per worker keeps them apart), results back through pipes.
#pragma once

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/io.hpp"

namespace hzp::explore {

// Runs `fn(i)` (a std::string) for every i in [0, n) over `jobs` forked
// processes, results sent back through pipes as length-prefixed records, in
// order. `fn` should catch what it expects: a worker that throws or dies makes
// parallel_map throw.
template <class Fn>
std::vector<std::string> parallel_map(std::size_t n, int jobs, Fn fn) {
  std::vector<std::string> out(n);
  if (jobs <= 1 || n < 2) {
    for (std::size_t i = 0; i < n; ++i) out[i] = fn(i);
    return out;
  }
  jobs = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(jobs), n));
  std::vector<std::pair<pid_t, int>> kids;
  for (int w = 0; w < jobs; ++w) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
    if (pid == 0) {
      ::close(fds[0]);
      std::string records;
      try {
        for (std::size_t i = static_cast<std::size_t>(w); i < n; i += static_cast<std::size_t>(jobs)) {
          const std::string r = fn(i);
          const std::uint64_t size = r.size();
          records.append(reinterpret_cast<const char*>(&size), sizeof size);
          records += r;
        }
      } catch (...) {
        ::_exit(1);  // never unwind into the parent's code: the parent reports a dead worker
      }
      ::_exit(core::write_all_fd(fds[1], records) ? 0 : 1);
    }
    ::close(fds[1]);
    kids.emplace_back(pid, fds[0]);
  }
  for (int w = 0; w < jobs; ++w) {
    const auto [pid, fd] = kids[static_cast<std::size_t>(w)];
    const std::string data = core::read_all_fd(fd);
    ::close(fd);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    std::size_t at = 0;
    for (std::size_t i = static_cast<std::size_t>(w); i < n; i += static_cast<std::size_t>(jobs)) {
      std::uint64_t size = 0;
      if (at + sizeof size > data.size()) throw std::runtime_error("a worker process died");
      std::memcpy(&size, data.data() + at, sizeof size);
      at += sizeof size;
      if (at + size > data.size()) throw std::runtime_error("a worker process died");
      out[i] = data.substr(at, size);
      at += size;
    }
  }
  return out;
}

}  // namespace hzp::explore
