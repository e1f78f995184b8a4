// The host backend (see host_backend.hpp). Every time it keeps is Schedule
// time (core::TimePoint, integer nanoseconds since the step's start); the
// wall clock only decides when a worker wakes (origin + time x scale).
#include "runtime/host/host_backend.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <system_error>
#include <utility>

namespace hzp::runtime {
namespace {
// When the calling host thread's last op counts as issued (set by issue_cost,
// read by the enqueue that follows it on the same thread).
thread_local core::TimePoint issued_at{};
// The longest wall-clock sleep one wake-up asks for: keeps the clock
// arithmetic finite (the watchdog ends such a run long before).
constexpr double kMaxSleepSeconds = 1e9;
}  // namespace

std::optional<HostClock> parse_host_clock(std::string_view s) { return core::parse_name(kHostClocks, s); }
std::string_view to_string(HostClock c) { return core::name_of(kHostClocks, c); }

HostBackend::HostBackend(const core::Schedule& s, const cost::PerfModel& pm, HostOptions o) : s_(s), pm_(pm), o_(o) {
  if (!(o_.time_scale > 0) || !std::isfinite(o_.time_scale)) {
    throw RunError(fmt::format("host backend: expected a finite, positive time scale, got {}", o_.time_scale));
  }
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
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const auto& prog = s.programs[p];
    times_[p].resize(prog.streams.size());
    issued_[p].resize(prog.streams.size());
    workers_[p] = std::vector<Worker>(prog.streams.size());
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      times_[p][k].assign(prog.streams[k].ops.size(), core::OpTime{});
      issued_[p][k].assign(prog.streams[k].ops.size(), Time{});
      for (const auto& op : prog.streams[k].ops) timed_ += core::is_timed(op.kind) ? 1U : 0U;
    }
  }
  origin_ = Clock::now();
  try {
    for (std::size_t p = 0; p < s.programs.size(); ++p) {
      for (std::size_t k = 0; k < workers_[p].size(); ++k)
        workers_[p][k].thread = std::thread([this, p, k] { work(p, k); });
    }
    watchdog_ = std::thread([this] { watch(); });
  } catch (const std::system_error& e) {
    shut_down();
    throw RunError(fmt::format("host backend: cannot start a thread per stream ({})", e.what()));
  }
}

HostBackend::~HostBackend() { shut_down(); }

void HostBackend::shut_down() {
  {
    const std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  abort_cv_.notify_all();
  for (auto& prog : workers_) {
    for (auto& w : prog) {
      if (w.thread.joinable()) w.thread.join();
    }
  }
  if (watchdog_.joinable()) watchdog_.join();
}

HostBackend::Clock::time_point HostBackend::wall(Time t) const {
  const double s = std::min(t.since_start().to_seconds() * o_.time_scale, kMaxSleepSeconds);
  return origin_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

HostBackend::Time HostBackend::schedule_time(Clock::time_point t) const {
  return Time::seconds(std::max(0.0, std::chrono::duration<double>(t - origin_).count() / o_.time_scale));
}

void HostBackend::wait_or_abort(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready) {
  cv_.wait(lock, [&] { return aborted_ || stop_ || ready(); });
  if (aborted_ || stop_) throw RunError(abort_report_.empty() ? "aborted" : abort_report_);
}

std::optional<HostBackend::Time> HostBackend::late_wake(std::unique_lock<std::mutex>& lock, Time t) {
  auto stopped = [&] { return aborted_ || stop_; };
  if (stopped()) throw RunError(abort_report_.empty() ? "aborted" : abort_report_);
  if (o_.clock == HostClock::Virtual) return std::nullopt;
  const Clock::time_point deadline = wall(t);
  abort_cv_.wait_until(lock, deadline, stopped);
  if (stopped()) throw RunError(abort_report_.empty() ? "aborted" : abort_report_);
  const Clock::time_point now = Clock::now();
  if (now - deadline <= o_.late) return std::nullopt;
  return std::max(t, schedule_time(now));
}

void HostBackend::abort_locked(std::string report) {
  if (aborted_) return;
  abort_report_ = std::move(report);
  aborted_ = true;
  cv_.notify_all();
  abort_cv_.notify_all();
}

void HostBackend::abort(const std::string& why) {
  const std::lock_guard lock(m_);
  abort_locked(why);
}

std::vector<std::vector<traces::MemoryPoint>> HostBackend::memory_points() const {
  std::vector<std::vector<traces::MemoryPoint>> out(memory_.size());
  for (std::size_t p = 0; p < memory_.size(); ++p) {
    std::vector<MemoryDelta> deltas = memory_[p];
    std::sort(deltas.begin(), deltas.end(), [](const MemoryDelta& a, const MemoryDelta& b) {
      return std::tie(a.time, a.op) < std::tie(b.time, b.op);
    });
    core::Bytes in_use{};
    for (const MemoryDelta& d : deltas) {
      in_use += d.delta;
      out[p].push_back(traces::MemoryPoint{s_.programs[p].id, d.time, in_use, in_use, *d.buffer, d.delta});
    }
  }
  return out;
}

core::Bytes HostBackend::peak() const {
  const std::lock_guard lock(m_);
  core::Bytes most{};
  for (const auto& per : memory_points()) {
    for (const auto& m : per) most = std::max(most, m.in_use);
  }
  return most;
}

std::size_t HostBackend::late_ops() const {
  const std::lock_guard lock(m_);
  return late_;
}

std::size_t HostBackend::timed_ops() const { return timed_; }

void HostBackend::enqueue(std::size_t program, std::size_t stream, std::size_t index) {
  {
    const std::lock_guard lock(m_);
    workers_[program][stream].queue.emplace_back(index, issued_at);
    issued_[program][stream][index] = issued_at;
    ++progress_;
    ++outstanding_;
  }
  cv_.notify_all();
}

void HostBackend::issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) {
  // Like the engines: an op is issued at its thread's clock, which then moves
  // on by the op's latency. On the wall clock the op counts as issued at the
  // thread's clock unless the host fell behind it by more than
  // HostOptions::late (then real time counts).
  std::unique_lock lock(m_);
  const std::pair<std::size_t, int> key{program, thread.id};
  auto [it, fresh] = next_issue_.try_emplace(key, Time{});
  const Time issue = it->second;
  it->second += core::issue_latency(thread, op);
  issuing_[key] = op.id;
  std::optional<Time> woke;
  try {
    woke = late_wake(lock, issue);
  } catch (...) {
    issuing_.erase(key);
    throw;
  }
  issuing_.erase(key);
  issued_at = woke.value_or(issue);
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
  // Nothing after the sync is issued before the event happened and the
  // thread has returned from its wait.
  auto [it, fresh] = next_issue_.try_emplace({program, thread.id}, Time{});
  it->second = std::max(it->second, recorded_[program].at(event)) + thread.sync_latency;
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
    const std::size_t i = workers_[p][k].queue.front().first;
    const Time issued = workers_[p][k].queue.front().second;
    workers_[p][k].queue.pop_front();
    workers_[p][k].current = i;
    try {
      run_op(lock, p, k, i, issued);
    } catch (const RunError&) {
      return;  // aborted: the watchdog has reported
    } catch (const std::exception& e) {
      // The model has no time for the op (a unit error): the run cannot go on.
      const core::Op& op = s_.programs[p].streams[k].ops[i];
      abort_locked(fmt::format("rank {} op {} '{}': {}", s_.programs[p].ranks.at(0), op.id, op.name, e.what()));
      return;
    }
    workers_[p][k].current.reset();
    workers_[p][k].blocked_on.clear();
    --outstanding_;
    ++progress_;
    cv_.notify_all();
  }
}

void HostBackend::run_op(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k, std::size_t i, Time issued) {
  const core::Program& prog = s_.programs[p];
  const core::Op& op = prog.streams[k].ops[i];
  Worker& w = workers_[p][k];
  // Ready when the stream's last op ended and the host has issued it.
  const Time start = std::max(w.cursor, issued);
  Time begin = start, end = start;
  switch (op.kind) {
    case core::OpKind::Compute:
      end = start + pm_.compute(op);
      if (const auto woke = late_wake(lock, end)) {
        ++late_;
        end = *woke;
      }
      break;
    case core::OpKind::Record:
      recorded_[p][op.event().id] = start;
      cv_.notify_all();
      break;
    case core::OpKind::Wait:
      w.blocked_on = fmt::format("event {} (not yet recorded)", op.event().id);
      wait_or_abort(lock, [&] { return recorded_[p].contains(op.event().id); });
      begin = end = std::max(start, recorded_[p].at(op.event().id));
      break;
    case core::OpKind::Alloc:
    case core::OpKind::Free:
      memory_[p].push_back(MemoryDelta{
          start, op.id, op.kind == core::OpKind::Alloc ? op.buffer().bytes : -op.buffer().bytes, &op.buffer().name});
      break;
    case core::OpKind::Sync: break;  // host-side: never enqueued
    case core::OpKind::Collective:
    case core::OpKind::Send:
    case core::OpKind::Recv: end = run_transfer(lock, p, k, op, start, begin); break;
  }
  w.cursor = end;
  times_[p][k][i] = core::OpTime{begin, end};
}

// A collective, send or receive: every member starts when the last arrives
// and ends with it (as the engines have it); returns the end, sets `begin`.
HostBackend::Time HostBackend::run_transfer(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k,
                                            const core::Op& op, Time start, Time& begin) {
  const core::Program& prog = s_.programs[p];
  Worker& w = workers_[p][k];
  const bool collective = op.kind == core::OpKind::Collective;
  const bool send = op.kind == core::OpKind::Send;
  const int me = prog.ranks.at(0);
  // A collective meets on (group, seq), a transfer on (sender, receiver, seq).
  int group = -1, seq = 0, sender = me, receiver = me;
  if (collective) {
    group = op.collective().group;
    seq = op.collective().seq;
  } else {
    (send ? receiver : sender) = op.transfer().peer;
    seq = op.transfer().seq;
  }
  const auto p2p_key = std::tuple{sender, receiver, seq};
  Rendezvous& r = collective ? collectives_[{group, seq}] : p2p_[p2p_key];
  const std::size_t members = collective ? participants_[static_cast<std::size_t>(group)] : 2;
  ++r.arrived;
  ++r.left;
  r.latest = std::max(r.latest, start);
  r.largest = std::max(r.largest, core::op_bytes(op));
  if (send) r.sent = core::op_bytes(op);  // a transfer is the sender's size
  if (r.arrived == members) {
    const core::Duration d =
        collective ? pm_.collective(op.collective().kind, r.largest, spans_[static_cast<std::size_t>(group)])
                   : pm_.p2p(r.sent.value_or(r.largest), sender, receiver);
    r.begin = r.latest;
    r.end = r.latest + d;
    cv_.notify_all();
  } else {
    w.blocked_on =
        collective ? fmt::format("{} of {} members of group {} (seq {}) have arrived", r.arrived, members, group, seq)
                   : fmt::format("{} with rank {} (seq {}): the other side has not arrived", send ? "send" : "recv",
                                 send ? receiver : sender, seq);
    wait_or_abort(lock, [&] { return r.end.has_value(); });
  }
  begin = *r.begin;
  Time end = *r.end;
  if (--r.left == 0) {
    if (collective) {
      collectives_.erase({group, seq});
    } else {
      p2p_.erase(p2p_key);
    }
  }
  w.blocked_on.clear();
  if (const auto woke = late_wake(lock, end)) {
    ++late_;
    end = *woke;
  }
  return end;
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
    const bool busy = outstanding_ > 0 || !host_blocked_.empty() || !issuing_.empty();
    if (busy && Clock::now() - last > o_.watchdog) abort_locked(waiting_report());
    if (!busy) last = Clock::now();
  }
}

std::string HostBackend::waiting_report() const {
  std::string out = fmt::format("watchdog: no op issued or finished for {} ms; waiting ops:\n", o_.watchdog.count());
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
  for (const auto& [key, op] : issuing_) {
    const core::Program& prog = s_.programs[key.first];
    out += fmt::format("  rank {} (class {} '{}') host thread {}: issues op {} at its thread's clock\n",
                       prog.ranks.at(0), prog.id, prog.name, key.second, op);
  }
  return out;
}

void HostBackend::emit(traces::TraceHeader header, traces::TraceSink& sink) const {
  sink.on_header(header);
  traces::emit_streams(s_, sink);
  const std::vector<std::vector<traces::MemoryPoint>> memory = [&] {
    const std::lock_guard lock(m_);
    return memory_points();
  }();
  for (std::size_t p = 0; p < s_.programs.size(); ++p) {
    const core::Program& prog = s_.programs[p];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        if (core::is_timed(op.kind)) {
          traces::OpRecord rec = traces::op_record(s_, prog, st, op, times_[p][k][i].start, times_[p][k][i].end);
          rec.issued = issued_[p][k][i];
          sink.on_op(std::move(rec));
        }
      }
    }
    for (const auto& m : memory[p]) sink.on_memory(m);
  }
}

}  // namespace hzp::runtime
