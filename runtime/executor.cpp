// The executor's host side (see executor.hpp).
#include "runtime/executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <tuple>

namespace hzp::runtime {

std::vector<std::pair<std::size_t, std::size_t>> issue_order(const core::Program& p, int thread) {
  std::vector<std::tuple<int, std::size_t, std::size_t>> ops;  // (id, stream, index)
  for (std::size_t k = 0; k < p.streams.size(); ++k) {
    if (p.streams[k].thread != thread) continue;
    for (std::size_t i = 0; i < p.streams[k].ops.size(); ++i) ops.emplace_back(p.streams[k].ops[i].id, k, i);
  }
  std::sort(ops.begin(), ops.end());
  std::vector<std::pair<std::size_t, std::size_t>> out;
  out.reserve(ops.size());
  for (const auto& [id, k, i] : ops) out.emplace_back(k, i);
  return out;
}

core::Duration measured_step(const core::Schedule& s,
                             const std::vector<std::vector<std::vector<core::OpTime>>>& times) {
  core::StepSpan span;
  for (std::size_t p = 0; p < s.programs.size() && p < times.size(); ++p) {
    if (times[p].empty()) continue;
    for (std::size_t k = 0; k < s.programs[p].streams.size(); ++k) {
      for (std::size_t i = 0; i < s.programs[p].streams[k].ops.size(); ++i) {
        if (core::is_timed(s.programs[p].streams[k].ops[i].kind)) span.add(times[p][k][i].start, times[p][k][i].end);
      }
    }
  }
  return span.step();
}

void execute(const core::Schedule& s, const std::vector<std::size_t>& programs, Backend& backend) {
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  auto issue = [&](std::size_t p, const core::Thread& t) {
    const core::Program& prog = s.programs.at(p);
    try {
      for (const auto& [k, i] : issue_order(prog, t.id)) {
        const core::Op& op = prog.streams[k].ops[i];
        if (op.kind == core::OpKind::Sync) {
          backend.host_wait(p, t, op.event().id);
          continue;
        }
        backend.issue_cost(p, t, op);
        backend.enqueue(p, k, i);
      }
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  try {
    for (std::size_t p : programs) {
      for (const core::Thread& t : s.programs.at(p).threads) threads.emplace_back(issue, p, std::cref(t));
    }
  } catch (const std::system_error& e) {
    // Too many threads for this machine: end the ones started, then report.
    backend.abort(fmt::format("cannot start a host thread per Schedule thread ({})", e.what()));
    for (auto& t : threads) t.join();
    throw RunError(fmt::format("cannot start a host thread per Schedule thread ({})", e.what()));
  }
  for (auto& t : threads) t.join();
  try {
    backend.drain();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hzp::runtime
