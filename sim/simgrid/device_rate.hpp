// A device's compute rate in the SimGrid engine: kernels slow down while a
// collective or transfer runs on the same device (the cluster's
// comm_compute_slowdown), and computing streams wait out their work at it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <simgrid/s4u.hpp>
#include <utility>
#include <vector>

namespace hzp::sim::simgrid {

namespace sg4 = ::simgrid::s4u;

/// The simulated clock, in seconds since the step's start.
inline double now_s() { return sg4::Engine::get_clock(); }

// A device's compute rate: 1 when no collective runs on it, 1/slowdown while
// one does; the log of changes maps work done to time afterwards. A stream
// that computes waits on its own condition variable (its mutex held for its
// whole life, so a timed wait is one simcall); a change wakes them all.
struct Device {
  struct Waiter {
    sg4::MutexPtr mutex;
    sg4::ConditionVariablePtr cv;
    std::unique_lock<sg4::Mutex> lock;
  };
  double slowdown = 1;
  int active = 0;
  std::vector<std::pair<double, double>> log{{0.0, 1.0}};  // (time s, rate from then on)
  std::vector<std::unique_ptr<Waiter>> waiters;            // one per computing stream

  [[nodiscard]] double rate() const { return active > 0 ? 1 / slowdown : 1; }
  /// A collective or transfer starts on the device.
  void begin() {
    if (active++ == 0 && slowdown > 1) change();
  }
  /// One ends.
  void end() {
    if (--active == 0 && slowdown > 1) change();
  }
  void change();
  /// The calling stream's waiter, created on first use (in actor context).
  Waiter& waiter(std::size_t stream);
  /// The stream is done: release its mutex (only its owner may).
  void retire(std::size_t stream);
  /// Runs `work` seconds of uncontended compute on `stream`, at the rate of the moment.
  void run(std::size_t stream, double work);
  /// Below this much work (seconds) at clock time `t`, compute is done.
  [[nodiscard]] static double resolution(double t);
  /// Uncontended compute done in [t0, t1].
  [[nodiscard]] double work_between(double t0, double t1) const;
  /// When `work` seconds of uncontended compute begun at `t0` were done.
  [[nodiscard]] double time_after(double t0, double work) const;
};

}  // namespace hzp::sim::simgrid
