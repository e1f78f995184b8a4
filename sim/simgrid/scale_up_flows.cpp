// Flows between two devices of one scale-up domain (see simulation.hpp and
// scale_up_links.hpp): hzp shares the domain's links among them and ends each
// at a SimGrid timer, so that SimGrid only carries the flows that leave a
// domain. Every other flow is a SimGrid network action (send_and_wait).
#include <simgrid/kernel/Timer.hpp>

#include <cmath>

#include "sim/simgrid/simulation.hpp"

namespace hzp::sim::simgrid {

namespace timer = ::simgrid::kernel::timer;

void Simulation::send_and_wait(std::span<const Flow* const> flows) {
  FlowWaiter w;
  std::vector<sg4::ExecPtr> transfers;
  for (const Flow* f : flows) {
    if (on_scale_up(f->src, f->dst)) {
      put_scale_up(*f, w);
      continue;
    }
    // A two-host execution without flops that moves bytes from the first
    // host to the second is, in SimGrid's default host model, exactly the
    // network action a host-to-host comm starts (HostCLM03Model::
    // execute_parallel calls the same communicate()). Unlike a comm it is
    // not detached: SimGrid 3.32 keeps every detached comm on one list and
    // scans it each time one ends, quadratic in the flows in flight.
    const double bytes = std::ceil(f->wire_bytes);
    if (bytes <= 0) continue;  // nothing to move (and SimGrid refuses a transfer of none)
    transfers.push_back(sg4::this_actor::exec_init({host(f->src), host(f->dst)}, {0.0, 0.0}, {0.0, bytes, 0.0, 0.0}));
    transfers.back()->start();
  }
  flows_ += static_cast<long long>(flows.size());
  settle_scale_up();
  for (auto& t : transfers) t->wait();
  wait_scale_up(w);
}

void Simulation::put_scale_up(const Flow& f, FlowWaiter& w) {
  const int d = pm_.topology().domain_of(f.src);
  const auto slot = static_cast<std::size_t>(d);
  if (domains_.size() <= slot) domains_.resize(slot + 1);
  if (!domains_[slot]) domains_[slot] = std::make_unique<ScaleUpDomain>(scale_up_.capacities());
  ScaleUpDomain& dm = *domains_[slot];
  const int first = d * scale_up_.devices;
  dm.links.advance(now_s());
  dm.links.add(scale_up_.route(f.src - first, f.dst - first), std::ceil(f.wire_bytes), &w);
  ++w.pending;
  if (!dm.dirty) {
    dm.dirty = true;
    dirty_domains_.push_back(d);
  }
}

void Simulation::settle_scale_up() {
  for (int d : dirty_domains_) {
    ScaleUpDomain& dm = *domains_[static_cast<std::size_t>(d)];
    dm.dirty = false;
    dm.links.solve();
    set_timer(d);
  }
  dirty_domains_.clear();
}

void Simulation::set_timer(int domain) {
  ScaleUpDomain& dm = *domains_[static_cast<std::size_t>(domain)];
  const double at = dm.links.next_end();
  if (dm.timer != nullptr && at == dm.timer_at) return;
  if (dm.timer != nullptr) dm.timer->remove();
  dm.timer = nullptr;
  if (std::isinf(at)) return;
  dm.timer_at = at;
  dm.timer = timer::Timer::set(at, [this, domain] { scale_up_due(domain); });
}

// In SimGrid's maestro, at the timer's date: the flows due end, their
// waiters whose last flow it was are resumed.
void Simulation::scale_up_due(int domain) {
  ScaleUpDomain& dm = *domains_[static_cast<std::size_t>(domain)];
  dm.timer = nullptr;  // SimGrid deletes it once this returns
  dm.links.finish_due(dm.timer_at, [](FlowWaiter* w) {
    if (--w->pending == 0 && w->parked) {
      sg4::ActorPtr a = std::move(w->parked);
      a->resume();
    }
  });
  set_timer(domain);
}

void Simulation::wait_scale_up(FlowWaiter& w) {
  if (w.pending == 0) return;
  w.parked = sg4::Actor::self();
  sg4::this_actor::suspend();
}

void Simulation::cancel_timers() {
  for (auto& dm : domains_) {
    if (dm && dm->timer != nullptr) dm->timer->remove();
    if (dm) dm->timer = nullptr;
  }
  for (auto& r : ranks_) r->device.cancel();
}

}  // namespace hzp::sim::simgrid
