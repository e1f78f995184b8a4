// Work spread over forked processes (SimGrid and the engines keep global
// state; a process per worker keeps them apart), results back through pipes.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/io.hpp"
#include "core/subprocess.hpp"

namespace hzp::explore {

// Runs `fn(i)` (a std::string) for every i in [0, n) over `jobs` forked
// processes, results sent back through pipes as length-prefixed records, in
// order. `fn` should catch what it expects: a worker that throws or dies makes
// parallel_map throw (every child is reaped: core::Child).
template <class Fn>
std::vector<std::string> parallel_map(std::size_t n, int jobs, Fn fn) {
  std::vector<std::string> out(n);
  if (jobs <= 1 || n < 2) {
    for (std::size_t i = 0; i < n; ++i) out[i] = fn(i);
    return out;
  }
  jobs = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(jobs), n));
  std::vector<core::Child> kids;
  kids.reserve(static_cast<std::size_t>(jobs));
  for (int w = 0; w < jobs; ++w) {
    core::ChildOptions options;
    for (const auto& k : kids) options.close_in_child.push_back(k.from_child());
    kids.emplace_back(
        [&fn, w, n, jobs](int, int fd) {
          std::string records;
          for (std::size_t i = static_cast<std::size_t>(w); i < n; i += static_cast<std::size_t>(jobs)) {
            const std::string r = fn(i);
            const std::uint64_t size = r.size();
            records.append(reinterpret_cast<const char*>(&size), sizeof size);
            records += r;
          }
          return core::write_all_fd(fd, records) ? 0 : 1;
        },
        options);
  }
  for (int w = 0; w < jobs; ++w) {
    core::Child& kid = kids[static_cast<std::size_t>(w)];
    const std::string data = kid.read_all();
    (void)kid.wait();
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

// Runs `fn(i)` for every i in [0, n) over `jobs` threads of this process
// (the caller's among them), results in order: for work that touches no
// global state (lowering and the analytic engine's estimate), where a fork
// per batch would cost more than the work. The first exception a call
// throws stops the others and is rethrown here.
template <class T, class Fn>
std::vector<T> thread_map(std::size_t n, int jobs, Fn fn) {
  std::vector<T> out(n);
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        out[i] = fn(i);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  {
    const std::size_t helpers = std::min<std::size_t>(static_cast<std::size_t>(std::max(jobs, 1)), n) - (n > 0);
    std::vector<std::jthread> threads;
    for (std::size_t w = 0; w < helpers; ++w) threads.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace hzp::explore
