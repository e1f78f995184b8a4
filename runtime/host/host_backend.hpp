// The host backend: the executor on CPU threads. Streams are worker threads,
// events completion flags, collectives and transfers rendezvous of their
// members in this process, and every op lasts the time the hardware
// performance model (cost::PerfModel, the engines' model) gives it. Like
// a GPU stream, a worker's next op starts when its last one ended (and not
// before it was issued), not when the worker thread happens to wake. One
// representative rank per class, as the analytic engine simulates: the run
// checks that the executor's semantics equal the simulator's.
//
// Two clocks. `Virtual`: the backend advances each stream's and host thread's
// clock by the op's modelled duration instead of sleeping, so a run is
// deterministic, independent of the machine's load, and takes the analytic
// engine's times exactly (the same integer-nanosecond max-plus arithmetic);
// threads, streams, events and rendezvous are as in the wall-clock mode.
// `Wall`: every op sleeps its duration times `time_scale`; a wake-up more than
// `late` after an op's end makes real time count and the op is counted late.
// Every wait, timed or not, ends at once when the run is aborted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/names.hpp"
#include "cost/perf_model.hpp"
#include "runtime/executor.hpp"
#include "schedule/replay.hpp"
#include "traces/timeline.hpp"

namespace hzp::runtime {

enum class HostClock { Wall, Virtual };
inline constexpr core::Names<HostClock, 2> kHostClocks{{{HostClock::Wall, "wall"}, {HostClock::Virtual, "virtual"}}};
/// "wall" | "virtual"; nullopt for any other text.
[[nodiscard]] std::optional<HostClock> parse_host_clock(std::string_view s);
[[nodiscard]] std::string_view to_string(HostClock c);

/// A wall-clock run with more late ops than this fraction of its timed ops
/// (compute, collectives, sends, receives) measured the host, not the
/// Schedule: it is reported as unreliable.
inline constexpr double kMaxLateFraction = 0.05;

struct HostOptions {
  HostClock clock = HostClock::Wall;
  double time_scale = 1.0;  // wall clock: wall seconds per Schedule second (finite, > 0)
  /// No op issued or finished for this long (wall time, either clock): report
  /// every rank's waiting op and abort.
  std::chrono::milliseconds watchdog{10000};
  /// Wall clock: a worker that wakes this much after an op's end takes the
  /// late time as the end; below it, wake-up jitter is the host's, not the device's.
  std::chrono::microseconds late{1000};
};

class HostBackend final : public Backend {
 public:
  /// Runs every program of `s`; the clock starts now.
  HostBackend(const core::Schedule& s, const cost::PerfModel& pm, HostOptions o);
  ~HostBackend() override;
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  void enqueue(std::size_t program, std::size_t stream, std::size_t index) override;
  void host_wait(std::size_t program, const core::Thread& thread, int event) override;
  void issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) override;
  void drain() override;
  /// Ends the run: every wait throws RunError(why).
  void abort(const std::string& why) override;

  /// When each op ran, in Schedule seconds from the start: times[program][stream][op].
  [[nodiscard]] const std::vector<std::vector<std::vector<core::OpTime>>>& times() const { return times_; }
  /// The most bytes the Schedule's buffers held at once (allocs and frees in
  /// time order, ties by op id, as the engines count them), over the rank classes.
  [[nodiscard]] core::Bytes peak() const;
  /// Ops whose end was taken late (the host fell behind the schedule); 0 on the virtual clock.
  [[nodiscard]] std::size_t late_ops() const;
  /// The Schedule's timed ops (compute, collectives, sends, receives): what late_ops() is a part of.
  [[nodiscard]] std::size_t timed_ops() const;
  /// The Timeline of the run (ops and the memory each rank class held).
  void emit(traces::TraceHeader header, traces::TraceSink& sink) const;

 private:
  using Clock = std::chrono::steady_clock;
  using Time = core::TimePoint;  // Schedule time since the step's start
  struct Worker {
    std::deque<std::pair<std::size_t, Time>> queue;  // (op index, when it was issued)
    Time cursor{};                                   // when its last op ended on the "device"
    std::optional<std::size_t> current;              // the op it is running or blocked in
    std::string blocked_on;                          // what it waits for, when it waits
    std::thread thread;
  };
  struct Rendezvous {
    std::size_t arrived = 0;
    Time latest{};  // the last member's arrival
    core::Bytes largest{};
    std::optional<core::Bytes> sent;  // a transfer: the sender's bytes
    std::optional<Time> begin, end;
    std::size_t left = 0;  // members that have not taken their end yet
  };
  struct MemoryDelta {
    Time time;
    int op = 0;
    core::Bytes delta{};
    const std::string* buffer = nullptr;
  };

  void work(std::size_t program, std::size_t stream);
  void run_op(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k, std::size_t i, Time issued);
  Time run_transfer(std::unique_lock<std::mutex>& lock, std::size_t p, std::size_t k, const core::Op& op, Time start,
                    Time& begin);
  /// Wall clock: sleeps (interruptibly) until Schedule time `t`; the time it
  /// woke when that was more than HostOptions::late after `t`, else nullopt.
  /// Virtual clock: nullopt at once. Throws RunError when the run is aborted.
  std::optional<Time> late_wake(std::unique_lock<std::mutex>& lock, Time t);
  [[nodiscard]] Clock::time_point wall(Time t) const;
  [[nodiscard]] Time schedule_time(Clock::time_point t) const;
  void watch();
  void abort_locked(std::string report);  // m_ held
  void shut_down();
  [[nodiscard]] std::string waiting_report() const;
  void wait_or_abort(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready);
  /// Per program, its memory deltas in time order (ties by op id) with the bytes in use after each.
  [[nodiscard]] std::vector<std::vector<traces::MemoryPoint>> memory_points() const;

  const core::Schedule& s_;
  const cost::PerfModel& pm_;
  HostOptions o_;
  std::vector<cost::GroupSpan> spans_;
  std::vector<std::size_t> participants_;  // per group: programs whose representative is a member
  Clock::time_point origin_;

  mutable std::mutex m_;
  std::condition_variable cv_;        // progress: an op enqueued or finished, an event recorded, a rendezvous met
  std::condition_variable abort_cv_;  // timed sleeps: woken only to stop
  bool stop_ = false;
  bool aborted_ = false;
  std::string abort_report_;
  std::size_t progress_ = 0;     // ops issued plus ops finished
  std::size_t outstanding_ = 0;  // ops enqueued and not finished
  std::size_t late_ = 0;
  std::size_t timed_ = 0;
  std::vector<std::vector<Worker>> workers_;
  std::vector<std::map<int, Time>> recorded_;                // per program: event -> when
  std::map<std::pair<int, int>, Rendezvous> collectives_;    // (group, seq)
  std::map<std::tuple<int, int, int>, Rendezvous> p2p_;      // (sender rank, receiver rank, seq)
  std::map<std::pair<std::size_t, int>, Time> next_issue_;   // (program, thread)
  std::map<std::pair<std::size_t, int>, int> host_blocked_;  // (program, event) -> host threads syncing on it
  std::map<std::pair<std::size_t, int>, int> issuing_;       // (program, thread) -> the op it waits to issue
  std::vector<std::vector<std::vector<core::OpTime>>> times_;
  std::vector<std::vector<std::vector<Time>>> issued_;  // when the host issued each op
  std::vector<std::vector<MemoryDelta>> memory_;        // per program, in the order the workers ran them
  std::thread watchdog_;
};

}  // namespace hzp::runtime
