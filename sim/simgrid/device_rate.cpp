// A device's compute rate under collectives (see device_rate.hpp).
#include "sim/simgrid/device_rate.hpp"

#include <simgrid/kernel/Timer.hpp>

#include <algorithm>
#include <iterator>

namespace hzp::sim::simgrid {

void Device::change() {
  const double t = now_s();
  const double before = log.back().second;
  log.emplace_back(t, rate());
  for (Run& r : runs) {
    if (!r.parked) continue;
    r.left -= (t - r.since) * before;
    r.since = t;
    set_timer(r);
  }
}

void Device::set_timer(Run& r) {
  if (r.timer != nullptr) r.timer->remove();
  const double end = r.since + std::max(0.0, r.left) / rate();
  r.timer = ::simgrid::kernel::timer::Timer::set(end, [&r] {
    r.timer = nullptr;  // SimGrid deletes it once this returns
    sg4::ActorPtr a = std::move(r.parked);
    a->resume();
  });
}

void Device::run(std::size_t stream, double work) {
  if (work <= 0) return;
  if (slowdown <= 1) {
    sg4::this_actor::sleep_for(work);
    return;
  }
  Run& r = runs.at(stream);
  r.left = work;
  r.since = now_s();
  r.parked = sg4::Actor::self();
  set_timer(r);
  sg4::this_actor::suspend();
}

void Device::cancel() {
  for (Run& r : runs) {
    if (r.timer != nullptr) r.timer->remove();
    r.timer = nullptr;
  }
}

double Device::time_after(double t0, double work) const {
  if (slowdown <= 1) return t0 + work;
  auto it = std::upper_bound(log.begin(), log.end(), t0,
                             [](double t, const std::pair<double, double>& e) { return t < e.first; });
  double t = t0, r = std::prev(it)->second;
  for (; it != log.end(); ++it) {
    const double span = (it->first - t) * r;
    if (span >= work) break;
    work -= span;
    t = it->first;
    r = it->second;
  }
  return t + work / r;
}

}  // namespace hzp::sim::simgrid
