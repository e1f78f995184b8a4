// The host backend (see host_backend.hpp).
#include "runtime/host/host_backend.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <iostream>

namespace hzp::runtime {
namespace {
// When the calling host thread's last op counts as issued (set by issue_cost,
// read by the enqueue that follows it on the same thread).
thread_local std::chrono::steady_clock::time_point issued_at{};
}  // namespace

HostBackend::HostBackend(const core::Schedule& s, const topologies::PerfModel& pm, HostOptions o)
    : s_(s), pm_(pm), o_(o) {
  for (const auto& g : s.groups) spans_.push_back(pm.span(g.ranks));
  std::map<int, std::size_t> program_of_rep;
  for (std::size_t p = 0; p < s.programs.size(); ++p) program_of_rep[s.programs[p].ranks.at(0)] = p;
  participants_.assign(s.groups.size(), 0);
  for (const auto& g : s.groups) {
    for (int r : g.ranks) participants_[static_cast<std::size_t>(g.id)] += program_of_rep.contains(r) ? 1U : 0U;
  }
  workers_.resize(s.programs.size());
  recorded_.resize(s.programs.size());
  times_.resize(s.programs.size());
  issued_.resize(s.programs.size());
  memory_.resize(s.programs.size());
  in_use_.assign(s.programs.size(), core::Bytes{});
  origin_ = Clock::now();
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const auto& prog = s.programs[p];
    times_[p].resize(prog.streams.size());
    issued_[p].resize(prog.streams.size());
    workers_[p] = std::vector<Worker>(prog.streams.size());
    for (auto& w : workers_[p]) w.cursor = origin_;
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      times_[p][k].assign(prog.streams[k].ops.size(), core::OpTime{});
      issued_[p][k].assign(prog.streams[k].ops.size(), core::TimePoint{});
    }
  }
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    for (std::size_t k = 0; k < workers_[p].size(); ++k)
      workers_[p][k].thread = std::thread([this, p, k] { work(p, k); });
  }
  watchdog_ = std::thread([this] { watch(); });
}

HostBackend::~HostBackend() {
  {
    const std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& prog : workers_) {
    for (auto& w : prog) w.thread.join();
  }
  watchdog_.join();
}

HostBackend::Clock::duration HostBackend::scaled(core::Duration d) const {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(d.to_seconds() * o_.time_scale));
}

core::TimePoint HostBackend::since_start(Clock::time_point t) const {
  return core::TimePoint::seconds(std::chrono::duration<double>(t - origin_).count() / o_.time_scale);
}

void HostBackend::wait_or_abort(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready) {
  cv_.wait(lock, [&] { return aborted_ || stop_ || ready(); });
  if (aborted_ || stop_) throw RunError(abort_report_.empty() ? "aborted" : abort_report_);
}

HostBackend::Clock::time_point HostBackend::sleep_until(std::unique_lock<std::mutex>& lock, Clock::time_point t) {
  lock.unlock();
  std::this_thread::sleep_until(t);
  lock.lock();
  const Clock::time_point now = Clock::now();
  if (now - t <= o_.late) return t;
  ++late_;
  return now;
}

core::Bytes HostBackend::peak() const {
  const std::lock_guard lock(m_);
  core::Bytes most{};
  for (const auto& per : memory_) {
    for (const auto& m : per) most = std::max(most, m.in_use);
  }
  return most;
}

std::size_t HostBackend::late_ops() const {
  const std::lock_guard lock(m_);
  return late_;
}

void HostBackend::enqueue(std::size_t program, std::size_t stream, std::size_t index) {
  {
    const std::lock_guard lock(m_);
    workers_[program][stream].queue.emplace_back(index, issued_at);
    issued_[program][stream][index] = since_start(issued_at);
    ++progress_;
    ++outstanding_;
  }
  cv_.notify_all();
}

void HostBackend::issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) {
  const core::Duration latency = core::issue_latency(thread, op.kind);
  // Like the engines: an op is issued at its thread's clock, which then moves
  // on by the op's latency (and never lags the wall clock after a sync).
  Clock::time_point issue;
  {
    const std::lock_guard lock(m_);
    auto [it, fresh] = next_issue_.try_emplace({program, thread.id}, origin_);
    issue = it->second;
    it->second += scaled(latency);
  }
  std::this_thread::sleep_until(issue);
  // The op counts as issued at the thread's clock unless the host fell
  // behind it by more than HostOptions::late (then real time counts).
  const Clock::time_point now = Clock::now();
  issued_at = now - issue <= o_.late ? issue : now;
}

void HostBackend::host_wait(std::size_t program, const core::Thread& thread, int event) {
  std::unique_lock lock(m_);
  ++host_blocked_[{program, event}];
  try {
    wait_or_abort(lock, [&] { return recorded_[program].contains(event); });
  } catch (...) {
    --host_blocked_[{program, event}];
    throw;
  }
  if (--host_blocked_[{program, event}] == 0) host_blocked_.erase({program, event});
  // Nothing after the sync is issued before the event happened.
  auto [it, fresh] = next_issue_.try_emplace({program, thread.id}, origin_);
  it->second = std::max(it->second, recorded_[program].at(event));
  ++progress_;
}

void HostBackend::drain() {
  std::unique_lock lock(m_);
  wait_or_abort(lock, [&] { return outstanding_ == 0; });
}

void HostBackend::work(std::size_t p, std::size_t k) {
  std::unique_lock lock(m_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || aborted_ || !workers_[p][k].queue.empty(); });
    if (stop_ || aborted_) return;
    const auto [i, enqueued] = workers_[p][k].queue.front();
    workers_[p][k].queue.pop_front();
    workers_[p][k].current = i;
    try {
      run_op(lock, p, k, i, enqueued);
    } catch (const RunError&) {
      return;  // aborted: the watchdog has reported
    }
    workers_[p][k].current.reset();
    workers_[p][k].blocked_on.clear();
    --outstanding_;
    ++progress_;
    cv_.notify_all();
  }
}

void HostBackend::run_op(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k, std::size_t i,
                         Clock::time_point enqueued) {
  const core::Program& prog = s_.programs[p];
  const core::Op& op = prog.streams[k].ops[i];
  Worker& w = workers_[p][k];
  // Ready when the stream's last op ended and the host has enqueued it.
  const Clock::time_point start = std::max(w.cursor, enqueued);
  Clock::time_point begin = start, end = start;
  switch (op.kind) {
    case core::OpKind::Compute: end = sleep_until(lock, start + scaled(pm_.compute(op))); break;
    case core::OpKind::Record:
      recorded_[p][op.event] = start;
      cv_.notify_all();
      break;
    case core::OpKind::Wait:
      w.blocked_on = fmt::format("event {} (not yet recorded)", op.event);
      wait_or_abort(lock, [&] { return recorded_[p].contains(op.event); });
      begin = end = std::max(start, recorded_[p].at(op.event));
      break;
    case core::OpKind::Alloc:
    case core::OpKind::Free: {
      const core::Bytes delta = op.kind == core::OpKind::Alloc ? op.bytes : core::Bytes(-op.bytes.count());
      in_use_[p] += delta;
      memory_[p].push_back(traces::MemoryPoint{prog.id, since_start(start), in_use_[p], in_use_[p], op.buffer, delta});
      break;
    }
    case core::OpKind::Sync: break;  // host-side: never enqueued
    case core::OpKind::Collective:
    case core::OpKind::Send:
    case core::OpKind::Recv: {
      // Every member starts when the last arrives and ends with it (as the
      // engines have it).
      const bool collective = op.kind == core::OpKind::Collective;
      const int me = prog.ranks.at(0);
      const auto p2p_key =
          op.kind == core::OpKind::Send ? std::tuple{me, op.peer, op.seq} : std::tuple{op.peer, me, op.seq};
      Rendezvous& r = collective ? collectives_[{op.group, op.seq}] : p2p_[p2p_key];
      const std::size_t members = collective ? participants_[static_cast<std::size_t>(op.group)] : 2;
      ++r.arrived;
      ++r.left;
      r.latest = std::max(r.latest, start);
      if (op.bytes > r.largest) r.largest = op.bytes;
      if (op.kind == core::OpKind::Send) r.largest = op.bytes;  // a transfer is the sender's size
      if (r.arrived == members) {
        const core::Duration d =
            collective ? pm_.collective(op.collective, r.largest, spans_[static_cast<std::size_t>(op.group)])
                       : pm_.p2p(r.largest, op.kind == core::OpKind::Send ? me : op.peer,
                                 op.kind == core::OpKind::Send ? op.peer : me);
        r.begin = r.latest;
        r.end = r.latest + scaled(d);
        cv_.notify_all();
      } else {
        w.blocked_on = collective ? fmt::format("{} of {} members of group {} (seq {}) have arrived", r.arrived,
                                                members, op.group, op.seq)
                                  : fmt::format("{} with rank {} (seq {}): the other side has not arrived",
                                                op.kind == core::OpKind::Send ? "send" : "recv", op.peer, op.seq);
        wait_or_abort(lock, [&] { return r.end.has_value(); });
      }
      begin = *r.begin;
      end = *r.end;
      if (--r.left == 0) {
        if (collective) {
          collectives_.erase({op.group, op.seq});
        } else {
          p2p_.erase(p2p_key);
        }
      }
      w.blocked_on.clear();
      end = sleep_until(lock, end);
      break;
    }
  }
  w.cursor = end;
  times_[p][k][i] = core::OpTime{since_start(begin), since_start(end)};
}

void HostBackend::watch() {
  std::unique_lock lock(m_);
  std::size_t seen = progress_;
  Clock::time_point last = Clock::now();
  while (!stop_ && !aborted_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (progress_ != seen) {
      seen = progress_;
      last = Clock::now();
      continue;
    }
    const bool busy = outstanding_ > 0 || !host_blocked_.empty();
    if (busy && Clock::now() - last > o_.watchdog) {
      abort_report_ = waiting_report();
      aborted_ = true;
      std::cerr << abort_report_;
      cv_.notify_all();
    }
    if (!busy) last = Clock::now();
  }
}

std::string HostBackend::waiting_report() const {
  std::string out =
      fmt::format("hzp-run: watchdog: no op finished for {} ms; aborting. Waiting ops:\n", o_.watchdog.count());
  for (std::size_t p = 0; p < workers_.size(); ++p) {
    const core::Program& prog = s_.programs[p];
    for (std::size_t k = 0; k < workers_[p].size(); ++k) {
      const Worker& w = workers_[p][k];
      if (!w.current) continue;
      const core::Op& op = prog.streams[k].ops[*w.current];
      out += fmt::format("  rank {} (class {} '{}') stream '{}': op {} '{}' ({}) waits for {}\n", prog.ranks.at(0),
                         prog.id, prog.name, prog.streams[k].name, op.id, op.name, core::to_string(op.kind),
                         w.blocked_on.empty() ? "its own end" : w.blocked_on);
    }
  }
  for (const auto& [key, n] : host_blocked_) {
    const core::Program& prog = s_.programs[key.first];
    out += fmt::format("  rank {} (class {} '{}') host thread: sync on event {} (not yet recorded)\n", prog.ranks.at(0),
                       prog.id, prog.name, key.second);
  }
  return out;
}

void HostBackend::emit(traces::TraceHeader header, traces::TraceSink& sink) const {
  sink.on_header(header);
  traces::emit_streams(s_, sink);
  for (std::size_t p = 0; p < s_.programs.size(); ++p) {
    const core::Program& prog = s_.programs[p];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        if (op.kind == core::OpKind::Compute || op.kind == core::OpKind::Collective || op.kind == core::OpKind::Send ||
            op.kind == core::OpKind::Recv) {
          traces::OpRecord rec = traces::op_record(s_, prog, st, op, times_[p][k][i].start, times_[p][k][i].end);
          rec.issued = issued_[p][k][i];
          sink.on_op(rec);
        }
      }
    }
    for (const auto& m : memory_[p]) sink.on_memory(m);
  }
}

}  // namespace hzp::runtime
