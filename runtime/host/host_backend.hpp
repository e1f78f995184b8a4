// The host backend: the executor on CPU threads. Streams are worker threads,
// events completion flags, collectives and transfers rendezvous of their
// members in this process, and every op sleeps the time the hardware
// performance model (topologies::PerfModel, the engines' model) gives it,
// times a scale at which sleeps dwarf thread jitter. Like a GPU stream, a
// worker's next op starts when its last one ended (and not before it was
// issued), not when the worker thread happens to wake: wake-up latency is the
// host's, not the device's. One representative rank
// per class, as the analytic engine simulates: the run checks that the
// executor's semantics equal the simulator's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/schedule_replay.hpp"
#include "runtime/executor.hpp"
#include "topologies/topology.hpp"
#include "traces/timeline.hpp"

namespace hzp::runtime {

struct HostOptions {
  double time_scale = 1.0;  // wall seconds per Schedule second
  /// No op issued or finished for this long (wall time): report every
  /// rank's waiting op and abort.
  std::chrono::milliseconds watchdog{10000};
  /// A worker that wakes this much (wall time) after an op's end takes the
  /// late time as the end; below it, wake-up jitter is the host's, not the device's.
  std::chrono::microseconds late{1000};
};

class HostBackend final : public Backend {
 public:
  /// Runs every program of `s`; the clock starts now.
  HostBackend(const core::Schedule& s, const topologies::PerfModel& pm, HostOptions o);
  ~HostBackend() override;
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  void enqueue(std::size_t program, std::size_t stream, std::size_t index) override;
  void host_wait(std::size_t program, const core::Thread& thread, int event) override;
  void issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) override;
  void drain() override;

  /// When each op ran, in Schedule seconds from the start: times[program][stream][op].
  [[nodiscard]] const std::vector<std::vector<std::vector<core::OpTime>>>& times() const { return times_; }
  /// The most bytes the Schedule's buffers held at once, over the rank classes.
  [[nodiscard]] core::Bytes peak() const;
  /// Ops whose end was taken late (the host fell behind the schedule).
  [[nodiscard]] std::size_t late_ops() const;
  /// The Timeline of the run (ops and the memory each rank class held).
  void emit(traces::TraceHeader header, traces::TraceSink& sink) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    std::deque<std::pair<std::size_t, Clock::time_point>> queue;  // (op index, when it was enqueued)
    Clock::time_point cursor;                                     // when its last op ended on the "device"
    std::optional<std::size_t> current;                           // the op it is running or blocked in
    std::string blocked_on;                                       // what it waits for, when it waits
    std::thread thread;
  };
  struct Rendezvous {
    std::size_t arrived = 0;
    Clock::time_point latest{};  // the last member's arrival
    core::Bytes largest{};
    std::optional<Clock::time_point> begin, end;
    std::size_t left = 0;  // members that have not taken their end yet
  };

  void work(std::size_t program, std::size_t stream);
  void run_op(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k, std::size_t i,
              Clock::time_point enqueued);
  /// Sleeps to `t`; returns `t`, or the time it woke when that was more than
  /// HostOptions::late later (the host could not keep up: real time counts).
  Clock::time_point sleep_until(std::unique_lock<std::mutex>& lock, Clock::time_point t);
  void watch();
  [[nodiscard]] std::string waiting_report() const;
  [[nodiscard]] Clock::duration scaled(core::Duration d) const;
  [[nodiscard]] core::TimePoint since_start(Clock::time_point t) const;
  void wait_or_abort(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready);

  const core::Schedule& s_;
  const topologies::PerfModel& pm_;
  HostOptions o_;
  std::vector<topologies::GroupSpan> spans_;
  std::vector<std::size_t> participants_;  // per group: programs whose representative is a member
  Clock::time_point origin_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool aborted_ = false;
  std::string abort_report_;
  std::size_t progress_ = 0;     // ops issued plus ops finished
  std::size_t outstanding_ = 0;  // ops enqueued and not finished
  std::size_t late_ = 0;
  std::vector<std::vector<Worker>> workers_;
  std::vector<std::map<int, Clock::time_point>> recorded_;               // per program: event -> when
  std::map<std::pair<int, int>, Rendezvous> collectives_;                // (group, seq)
  std::map<std::tuple<int, int, int>, Rendezvous> p2p_;                  // (sender rank, receiver rank, seq)
  std::map<std::pair<std::size_t, int>, Clock::time_point> next_issue_;  // (program, thread)
  std::map<std::pair<std::size_t, int>, int> host_blocked_;  // (program, event) -> host threads syncing on it
  std::vector<std::vector<std::vector<core::OpTime>>> times_;
  std::vector<std::vector<std::vector<core::TimePoint>>> issued_;  // when the host issued each op
  std::vector<std::vector<traces::MemoryPoint>> memory_;  // per program
  std::vector<core::Bytes> in_use_;
  std::thread watchdog_;
};

}  // namespace hzp::runtime
