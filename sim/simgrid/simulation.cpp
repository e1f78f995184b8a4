// The SimGrid simulation's set-up and results (see simulation.hpp): the
// engine and platform, what each program's members share, the ranks in
// detail and their actors, and the times read back at the end.
#include "sim/simgrid/simulation.hpp"

#include <fmt/format.h>
#include <xbt/log.h>

#include "core/error.hpp"
#include "sim/simgrid/platform.hpp"

namespace hzp::sim::simgrid {

using core::Op;
using core::OpKind;

SimResult Simulation::run(const std::function<void(const SimResult&)>& deliver) {
  xbt_log_control_set("root.thres:critical");
  // The context factory is chosen when the engine starts: pass it as an argument.
  char name[] = "hzp";
#if defined(__SANITIZE_ADDRESS__)
  char contexts[] = "--cfg=contexts/factory:thread";  // ASan and stack switching do not mix
#else
  char contexts[] = "--cfg=contexts/factory:raw";
#endif
  char* argv[] = {name, contexts, nullptr};
  int argc = 2;
  sg4::Engine e(&argc, argv);
#if !defined(__SANITIZE_ADDRESS__)
  // Small stacks without guard pages: tens of thousands of actors stay cheap.
  e.set_config("contexts/stack-size:64");
  e.set_config("contexts/guard-size:0");
#endif
  hosts_ = build_platform(e, pm_.topology(), o_.simgrid_config);
  leaf_ = fat_tree_shape(pm_.topology()).leaf_of_device();
  scale_up_ = scale_up_shape(pm_.topology());
  own_scale_up_ = o_.simgrid_config.empty();
  prepare();
  spawn();
  e.run();
  cancel_timers();
  if (error_) std::rethrow_exception(error_);
  SimResult result = collect();
  if (deliver) deliver(result);
  return result;
}

void Simulation::prepare() {
  const auto world = static_cast<std::size_t>(pm_.topology().devices());
  info_.resize(s_.programs.size());
  program_of_rank_.assign(world, -1);
  is_rep_.assign(world, 0);
  for (std::size_t p = 0; p < s_.programs.size(); ++p) {
    const core::Program& prog = s_.programs[p];
    info_[p] = program_info(prog);
    for (int r : prog.ranks) program_of_rank_.at(static_cast<std::size_t>(r)) = static_cast<int>(p);
    is_rep_.at(static_cast<std::size_t>(prog.ranks.at(0))) = 1;
  }
  prepare_groups();
  prepare_ranks();
}

// Compute seconds and dense event indices per op, and each thread's ops in
// issue (id) order with their sync-free issue times.
ProgramInfo Simulation::program_info(const core::Program& prog) const {
  ProgramInfo pi;
  std::map<int, int> dense;
  pi.work.resize(prog.streams.size());
  pi.event.resize(prog.streams.size());
  pi.thread_ops.resize(prog.threads.size());
  std::vector<std::vector<std::tuple<int, std::size_t, std::size_t>>> order(prog.threads.size());
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    const core::Stream& st = prog.streams[k];
    pi.work[k].resize(st.ops.size());
    pi.event[k].assign(st.ops.size(), -1);
    for (std::size_t i = 0; i < st.ops.size(); ++i) {
      const Op& op = st.ops[i];
      if (op.kind == OpKind::Compute) pi.work[k][i] = pm_.compute(op).to_seconds();
      if (op.kind == OpKind::Record || op.kind == OpKind::Wait || op.kind == OpKind::Sync) {
        pi.event[k][i] = dense.emplace(op.event().id, static_cast<int>(dense.size())).first->second;
      }
      order.at(static_cast<std::size_t>(st.thread)).emplace_back(op.id, k, i);
    }
  }
  pi.events = dense.size();
  pi.syncs.assign(prog.threads.size(), 0);
  pi.position.resize(prog.streams.size());
  pi.issue0.resize(prog.streams.size());
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    pi.position[k].resize(prog.streams[k].ops.size());
    pi.issue0[k].resize(prog.streams[k].ops.size());
  }
  for (std::size_t t = 0; t < order.size(); ++t) {
    std::sort(order[t].begin(), order[t].end());
    const core::Thread& th = prog.threads[t];
    std::int64_t clock = 0;
    for (auto [id, k, i] : order[t]) {
      pi.position[k][i] = pi.thread_ops[t].size();
      pi.issue0[k][i] = clock;
      pi.thread_ops[t].emplace_back(k, i);
      const core::Op& op = prog.streams[k].ops[i];
      if (op.kind == OpKind::Sync) pi.syncs[t] = 1;
      clock += core::issue_latency(th, op).count_ns();
    }
  }
  return pi;
}

void Simulation::prepare_groups() {
  const auto world = static_cast<std::size_t>(pm_.topology().devices());
  // The group of each kind that holds each rank (groups of one kind partition their ranks).
  group_of_.assign(core::kGroupKinds, std::vector<int>(world, -1));
  for (const auto& g : s_.groups) {
    for (int r : g.ranks) group_of_[static_cast<std::size_t>(g.kind)][static_cast<std::size_t>(r)] = g.id;
  }
  // Detailed participants of each group, and in classes mode the groups no
  // representative belongs to (the background images).
  participants_.assign(s_.groups.size(), 0);
  crosses_.assign(s_.groups.size(), 0);
  for (const auto& g : s_.groups) {
    int n = 0;
    for (int r : g.ranks)
      n += classes_ ? is_rep_[static_cast<std::size_t>(r)] : (program_of_rank_[static_cast<std::size_t>(r)] >= 0);
    participants_[static_cast<std::size_t>(g.id)] = n;
    crosses_[static_cast<std::size_t>(g.id)] = pm_.span(g.ranks).domains > 1;
    if (classes_ && n == 0) mirrors_[static_cast<int>(g.kind)].push_back(g.id);
  }
}

// Ranks in detail: every member (`--ranks all`) or each representative.
void Simulation::prepare_ranks() {
  for (std::size_t p = 0; p < s_.programs.size(); ++p) {
    const core::Program& prog = s_.programs[p];
    const std::size_t members = classes_ ? 1 : prog.ranks.size();
    for (std::size_t m = 0; m < members; ++m) {
      auto rank = std::make_unique<Rank>();
      rank->rank = prog.ranks[m];
      rank->program = p;
      rank->device.slowdown = o_.interference ? pm_.topology().spec().device.comm_compute_slowdown : 1.0;
      const std::size_t ns = prog.streams.size();
      rank->device.runs.resize(ns);  // the timers hold references: never resized again
      rank->times.resize(ns);
      for (std::size_t k = 0; k < ns; ++k) {
        rank->times[k].resize(prog.streams[k].ops.size());
      }
      rank->shifts.assign(prog.threads.size(), {{0, 0}});
      rank->issued_upto.assign(prog.threads.size(), 0);
      rank->issue_waiter.resize(ns);
      rank->next.assign(ns, 0);
      rank->event_time.assign(info_[p].events, -1.0);
      ranks_.push_back(std::move(rank));
    }
  }
}

void Simulation::spawn() {
  // Thread actors first, so issue times exist when the streams start.
  for (auto& rp : ranks_) {
    Rank* r = rp.get();
    const core::Program& prog = s_.programs[r->program];
    for (std::size_t t = 0; t < prog.threads.size(); ++t) {
      if (!info_[r->program].syncs[t]) {
        r->issued_upto[t] = info_[r->program].thread_ops[t].size();  // nothing holds it back
        continue;
      }
      sg4::Actor::create(fmt::format("r{}.{}", r->rank, prog.threads[t].name), host(r->rank),
                         [this, r, t] { guarded([&] { thread_body(*r, t); }); });
    }
  }
  for (auto& rp : ranks_) {
    Rank* r = rp.get();
    const core::Program& prog = s_.programs[r->program];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      sg4::Actor::create(fmt::format("r{}.{}", r->rank, prog.streams[k].name), host(r->rank),
                         [this, r, k] { guarded([&] { stream_body(*r, k); }); });
    }
  }
}

SimResult Simulation::collect() {
  for (const auto& rp : ranks_) {
    const core::Program& prog = s_.programs[rp->program];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      if (rp->next[k] < prog.streams[k].ops.size()) {
        const Op& op = prog.streams[k].ops[rp->next[k]];
        throw core::ScheduleError(fmt::format(
            "deadlock in the SimGrid engine: rank {} (program {} '{}') stream '{}' never finishes op {} '{}' ({})",
            rp->rank, prog.id, prog.name, prog.streams[k].name, op.id, op.name, core::to_string(op.kind)));
      }
    }
  }
  SimResult res;
  res.ranks_simulated = static_cast<int>(ranks_.size());
  res.flows = flows_;
  res.times.resize(s_.programs.size());
  res.emitted_rank.assign(s_.programs.size(), -1);
  std::vector<std::int64_t> latest(s_.programs.size(), -1);
  for (auto& rp : ranks_) {
    std::int64_t end = 0;
    for (const auto& st : rp->times) {
      for (const auto& t : st) end = std::max(end, t.end.count_ns());
    }
    if (end > latest[rp->program]) {
      latest[rp->program] = end;
      res.emitted_rank[rp->program] = rp->rank;
      res.times[rp->program] = rp->times;
    }
  }
  return res;
}

}  // namespace hzp::sim::simgrid
