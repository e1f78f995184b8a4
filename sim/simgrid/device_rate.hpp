// A device's compute rate in the SimGrid engine: kernels slow down while a
// collective or transfer runs on the same device (the cluster's
// comm_compute_slowdown), and computing streams wait out their work at it.
#pragma once

#include <cstddef>
#include <simgrid/s4u.hpp>
#include <utility>
#include <vector>

namespace simgrid::kernel::timer {
class Timer;
}  // namespace simgrid::kernel::timer

namespace hzp::sim::simgrid {

namespace sg4 = ::simgrid::s4u;

/// The simulated clock, in seconds since the step's start.
inline double now_s() { return sg4::Engine::get_clock(); }

// A device's compute rate: 1 when no collective runs on it, 1/slowdown while
// one does; the log of changes maps work done to time afterwards. A stream
// that computes is parked until a SimGrid timer set for the end of its work
// at the current rate; a change of rate moves its timer (the stream itself
// is not woken until its work is done).
struct Device {
  // A stream's compute run in progress: the work left at `since`, the parked
  // actor and the timer that will resume it.
  struct Run {
    double left = 0;
    double since = 0;
    sg4::ActorPtr parked;
    ::simgrid::kernel::timer::Timer* timer = nullptr;
  };
  double slowdown = 1;
  int active = 0;
  std::vector<std::pair<double, double>> log{{0.0, 1.0}};  // (time s, rate from then on)
  std::vector<Run> runs;                                   // [stream]: sized before any actor runs

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
  /// Runs `work` seconds of uncontended compute on `stream`, at the rate of the moment.
  void run(std::size_t stream, double work);
  /// Removes every timer still set (the simulation stopped on an error).
  void cancel();
  /// When `work` seconds of uncontended compute begun at `t0` were done.
  [[nodiscard]] double time_after(double t0, double work) const;

 private:
  void set_timer(Run& r);
};

}  // namespace hzp::sim::simgrid
