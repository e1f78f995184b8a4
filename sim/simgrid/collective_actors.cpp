// Collectives in the SimGrid simulation (see simulation.hpp): members meet
// at (group, seq), the flows are lowered once per shape and put on the
// network by the members or the last to arrive, and in `--ranks classes`
// proxy actors carry the flows of ranks without a representative.
#include <fmt/format.h>

#include "core/error.hpp"
#include "sim/simgrid/simulation.hpp"

namespace hzp::sim::simgrid {

using core::Op;

LoweredPtr Simulation::lower(int group, core::CollectiveKind kind, std::int64_t bytes) {
  auto key = std::tuple{group, static_cast<int>(kind), bytes};
  auto it = lowered_.find(key);
  if (it != lowered_.end()) return it->second;
  auto l = std::make_shared<Lowered>();
  l->set = lower_collective(pm_, kind, core::Bytes(bytes), s_.group(group).ranks, o_.nccl_channels);
  lowered_.emplace(key, l);
  return l;
}

// A mirror group's flows that climb above their leaf switch (`climbs`): the
// only ones that share a link with anything simulated.
LoweredPtr Simulation::background(int group, core::CollectiveKind kind, std::int64_t bytes) {
  auto key = std::tuple{-1 - group, static_cast<int>(kind), bytes};
  auto it = lowered_.find(key);
  if (it != lowered_.end()) return it->second;
  auto l = std::make_shared<Lowered>(*lower(group, kind, bytes));
  std::erase_if(l->set.flows, [this](const Flow& f) { return !climbs(f.src, f.dst); });
  lowered_.emplace(key, l);
  return l;
}

// Puts the flows of `l` from `me` (all sources when -1) that `take`
// accepts on the network and waits for them.
template <class Take>
void Simulation::run_flows(int me, const Lowered& l, Take take) {
  std::size_t lo = 0, hi = l.set.flows.size();
  if (me >= 0) std::tie(lo, hi) = l.from(me);
  std::vector<const Flow*> flows;
  for (std::size_t f = lo; f < hi; ++f) {
    if (take(l.set.flows[f].src)) flows.push_back(&l.set.flows[f]);
  }
  send_and_wait(flows);
}

void Simulation::flows_done(Instance& inst) {
  if (--inst.pending > 0) return;
  const FlowSet& fs = inst.flows->set;
  inst.end = now_s() + (inst.back_to_back ? fs.back_to_back_latency_s : fs.latency_s);
  for (auto& a : inst.finish_waiters) a->resume();
  inst.finish_waiters.clear();
}

void Simulation::give(int rank, Proxy::Job job) {
  Proxy& px = proxies_[rank];
  if (!px.idle.empty()) {
    Proxy::Worker* w = px.idle.back();
    px.idle.pop_back();
    w->job = std::move(job);
    w->actor->resume();
    return;
  }
  px.workers.push_back(std::make_unique<Proxy::Worker>());
  Proxy::Worker* w = px.workers.back().get();
  w->job = std::move(job);
  Proxy* pxp = &px;  // unordered_map values do not move
  w->actor = sg4::Actor::create(fmt::format("proxy{}.{}", rank, px.workers.size()), host(rank), [this, w, pxp, rank] {
    guarded([&] {
      while (true) {
        run_flows(rank, *w->job.flows, [](int) { return true; });
        if (w->job.instance) flows_done(*w->job.instance);
        w->job = Proxy::Job{};
        pxp->idle.push_back(w);
        sg4::this_actor::suspend();
      }
    });
  });
  w->actor->daemonize();
}

void Simulation::collective(Rank& r, std::size_t k, std::size_t i, const Op& op) {
  const core::Op::Collective& coll = op.collective();
  const core::Group& rep_group = s_.group(coll.group);
  const int gid =
      classes_ ? coll.group : group_of_[static_cast<std::size_t>(rep_group.kind)][static_cast<std::size_t>(r.rank)];
  if (gid < 0) {
    throw core::ScheduleError(
        fmt::format("rank {} is in no group of kind {}", r.rank, core::to_string(rep_group.kind)));
  }
  const std::uint64_t key = (static_cast<std::uint64_t>(gid) << 32) | static_cast<std::uint32_t>(coll.seq);
  InstancePtr& slot = instances_[key];
  if (!slot) {
    slot = std::make_shared<Instance>();
    slot->group = gid;
    slot->kind = coll.kind;
    slot->expected = participants_[static_cast<std::size_t>(gid)];
    slot->back_to_back = back_to_back(s_.programs[r.program].streams[k], i);
  }
  InstancePtr inst = slot;
  inst->max_bytes = std::max(inst->max_bytes, coll.bytes.count());
  inst->members.push_back(&r);
  if (++inst->arrived < inst->expected) {
    // The last to arrive resumes us: at the end when it launches every
    // flow itself, else at the start to launch our own.
    inst->arrival_waiters.push_back(sg4::Actor::self());
    sg4::this_actor::suspend();
    if (!inst->launch_all) own_flows(r, *inst);
  } else {
    instances_.erase(key);
    start_collective(inst);
    if (inst->launch_all) {
      launch_all(*inst);
    } else {
      own_flows(r, *inst);
    }
  }
  done(r, k, i, inst->start, inst->end);
}

// Each member puts its own flows on the network (large groups: an actor
// owning many in-flight activities pays for each completion).
void Simulation::own_flows(Rank& r, Instance& inst) {
  r.device.begin();
  run_flows(r.rank, *inst.flows, [](int) { return true; });
  flows_done(inst);
  if (inst.end < 0) {
    inst.finish_waiters.push_back(sg4::Actor::self());
    sg4::this_actor::suspend();
  }
  if (inst.end > now_s()) sg4::this_actor::sleep_until(inst.end);
  r.device.end();
}

// The last member to arrive puts every detailed member's flows on the
// network (a few flows: small groups) and resumes the others at the end.
void Simulation::launch_all(Instance& inst) {
  for (Rank* m : inst.members) m->device.begin();
  run_flows(-1, *inst.flows, [this](int src) { return !classes_ || is_rep_[static_cast<std::size_t>(src)]; });
  flows_done(inst);
  if (inst.end < 0) {
    inst.finish_waiters.push_back(sg4::Actor::self());
    sg4::this_actor::suspend();
  }
  if (inst.end > now_s()) sg4::this_actor::sleep_until(inst.end);
  for (Rank* m : inst.members) m->device.end();
  for (auto& a : inst.arrival_waiters) a->resume();
  inst.arrival_waiters.clear();
}

// The last detailed participant has arrived: lower, hand the other members'
// flows to their proxies, put the mirror groups' flows on the fabric.
void Simulation::start_collective(const InstancePtr& shared) {
  Instance& inst = *shared;
  const core::Group& g = s_.group(inst.group);
  inst.start = now_s();
  inst.flows = lower(inst.group, inst.kind, inst.max_bytes);
  inst.launch_all = inst.flows->set.flows.size() <= kLaunchAllFlows;
  inst.pending = inst.launch_all ? 1 : inst.expected;
  if (classes_) {
    std::vector<int> others;
    for (int m : g.ranks) {
      if (!is_rep_[static_cast<std::size_t>(m)] && inst.flows->from(m).first != inst.flows->from(m).second) {
        others.push_back(m);
      }
    }
    inst.pending += static_cast<int>(others.size());
    for (int m : others) give(m, Proxy::Job{shared, inst.flows});
    if (crosses_[static_cast<std::size_t>(inst.group)]) start_background(g, inst);
  }
  if (!inst.launch_all) {
    for (auto& a : inst.arrival_waiters) a->resume();
    inst.arrival_waiters.clear();
  }
}

// The same collective on every mirror group of the kind that crosses
// domains, as background flows from each of their sources.
void Simulation::start_background(const core::Group& g, const Instance& inst) {
  auto it = mirrors_.find(static_cast<int>(g.kind));
  if (it == mirrors_.end()) return;
  for (int mg : it->second) {
    if (!crosses_[static_cast<std::size_t>(mg)]) continue;
    LoweredPtr l = background(mg, inst.kind, inst.max_bytes);
    int last = -1;
    for (const Flow& f : l->set.flows) {
      if (f.src != last) give(f.src, Proxy::Job{nullptr, l});
      last = f.src;
    }
  }
}

}  // namespace hzp::sim::simgrid
