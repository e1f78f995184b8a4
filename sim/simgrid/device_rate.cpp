// A device's compute rate under collectives (see device_rate.hpp).
#include "sim/simgrid/device_rate.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace hzp::sim::simgrid {

void Device::change() {
  const double before = log.back().second;
  log.emplace_back(now_s(), rate());
  // A slower rate only delays the ends already planned: the waiters find
  // out when they wake. A faster one brings them forward: wake them now.
  if (log.back().second > before) {
    for (auto& w : waiters) {
      if (w) w->cv->notify_all();
    }
  }
}

Device::Waiter& Device::waiter(std::size_t stream) {
  if (waiters.size() <= stream) waiters.resize(stream + 1);
  if (!waiters[stream]) {
    auto w = std::make_unique<Waiter>();
    w->mutex = sg4::Mutex::create();
    w->cv = sg4::ConditionVariable::create();
    w->lock = std::unique_lock<sg4::Mutex>(*w->mutex);
    waiters[stream] = std::move(w);
  }
  return *waiters[stream];
}

void Device::retire(std::size_t stream) {
  if (stream < waiters.size() && waiters[stream]) waiters[stream]->lock.unlock();
}

void Device::run(std::size_t stream, double work) {
  if (work <= 0) return;
  if (slowdown <= 1) {
    sg4::this_actor::sleep_for(work);
    return;
  }
  Waiter& w = waiter(stream);
  double t = now_s();
  while (work > resolution(t)) {
    (void)w.cv->wait_until(w.lock, t + work / rate());
    const double t2 = now_s();
    work -= work_between(t, t2);
    t = t2;
  }
}

double Device::resolution(double t) {
  // The work a wait can still make progress on: a nanosecond (the trace's
  // unit), or a few steps of the clock where its doubles are coarser (past
  // 8,192 simulated seconds a step of the clock exceeds 1e-12 s, and a
  // wait shorter than one step never advances it: the stream spun forever).
  const double step = std::nextafter(t, std::numeric_limits<double>::infinity()) - t;
  return std::max(1e-9, 4 * step);
}

double Device::work_between(double t0, double t1) const {
  auto it = std::upper_bound(log.begin(), log.end(), t0,
                             [](double t, const std::pair<double, double>& e) { return t < e.first; });
  double t = t0, r = std::prev(it)->second, w = 0;
  for (; it != log.end() && it->first < t1; ++it) {
    w += (it->first - t) * r;
    t = it->first;
    r = it->second;
  }
  return w + (t1 - t) * r;
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
