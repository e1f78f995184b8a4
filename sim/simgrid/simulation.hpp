// One SimGrid simulation of a Schedule: the actors and what they share.
//  - issue times are the program's (one launch latency per kernel or NCCL
//    call, in op-id order per host thread) plus, per rank, the delays its
//    `sync`s add: a host-thread actor per (rank, thread that syncs) blocks in
//    each sync until its event has been recorded and shifts what follows;
//  - a stream actor per (rank, stream) runs its ops in order: compute (runs of
//    consecutive kernels that start back to back are one timed wait), events,
//    collectives and transfers;
//  - in `--ranks classes`, a proxy actor per rank without a representative
//    puts that rank's flows on the network, for the groups the
//    representatives use and, as background, for the groups of the same kind
//    that mirror them across the shared fabric.
// Actors block with suspend/resume on plain structures (SimGrid runs one actor
// at a time), so each keeps only its own few flows in flight.
// Set-up and results are in simulation.cpp, host threads, streams and
// transfers in rank_actors.cpp, collectives and proxies in collective_actors.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <simgrid/s4u.hpp>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "schedule/schedule.hpp"
#include "sim/engine.hpp"
#include "sim/simgrid/device_rate.hpp"
#include "sim/simgrid/flows.hpp"
#include "sim/simgrid/platform.hpp"
#include "sim/simgrid/result_wire.hpp"
#include "sim/simgrid/scale_up_links.hpp"

namespace simgrid::kernel::timer {
class Timer;
}  // namespace simgrid::kernel::timer

namespace hzp::sim::simgrid {

// Flows of a collective, sorted by source so each member finds its own.
struct Lowered {
  FlowSet set;
  [[nodiscard]] std::pair<std::size_t, std::size_t> from(int src) const {
    auto lo = std::lower_bound(set.flows.begin(), set.flows.end(), src, [](const Flow& f, int s) { return f.src < s; });
    auto hi = std::upper_bound(lo, set.flows.end(), src, [](int s, const Flow& f) { return s < f.src; });
    return {static_cast<std::size_t>(lo - set.flows.begin()), static_cast<std::size_t>(hi - set.flows.begin())};
  }
};
using LoweredPtr = std::shared_ptr<const Lowered>;

struct Rank;

// One collective call (a group and a sequence number) while in progress.
struct Instance {
  int group = 0;
  int expected = 0;  // detailed participants
  int arrived = 0;
  std::int64_t max_bytes = 0;
  core::CollectiveKind kind = core::CollectiveKind::AllReduce;
  LoweredPtr flows;
  int pending = 0;  // members whose flows still run
  double end = -1;
  double start = 0;
  bool launch_all = false;     // the last to arrive launches every detailed member's flows
  bool back_to_back = false;   // follows one of the same kind on the same group (sim::back_to_back)
  std::vector<Rank*> members;  // detailed participants
  std::vector<sg4::ActorPtr> arrival_waiters, finish_waiters;
};
using InstancePtr = std::shared_ptr<Instance>;

// Flow sets up to this size are launched by one actor (the last member to
// arrive); larger ones by each member for its own flows.
constexpr std::size_t kLaunchAllFlows = 64;

// Whoever waits for flows on scale-up links: how many are still in flight,
// and the actor to resume when the last ends (set while it is parked).
struct FlowWaiter {
  int pending = 0;
  sg4::ActorPtr parked;
};

// One scale-up domain's links and the flows on them, solved by hzp
// (scale_up_links.hpp), with the SimGrid timer set for the next to end.
struct ScaleUpDomain {
  explicit ScaleUpDomain(std::vector<double> capacity) : links(std::move(capacity)) {}
  ScaleUpLinks<FlowWaiter*> links;
  ::simgrid::kernel::timer::Timer* timer = nullptr;
  double timer_at = -1;
  bool dirty = false;  // flows added since the last solve
};

// A send/recv pair while in progress.
struct Transfer {
  sg4::ActorPtr waiting;
  Rank* waiting_rank = nullptr;
  double start = 0, end = -1;
};

// A rank simulated in detail.
struct Rank {
  int rank = 0;
  std::size_t program = 0;
  Device device;
  std::vector<std::vector<core::OpTime>> times;  // [stream][op]
  // Issue times: the program's sync-free times plus, per thread, the shifts
  // its syncs added: (position in the thread's order, shift from there on).
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> shifts;  // [thread]
  std::vector<std::size_t> issued_upto;                                   // [thread]: positions issued
  std::vector<sg4::ActorPtr> issue_waiter;                                // [stream]
  std::vector<double> event_time;                                         // [dense event], -1 until recorded
  std::unordered_map<int, std::vector<sg4::ActorPtr>> event_waiters;
  std::vector<std::size_t> next;  // [stream]: ops done
};

// A rank's flows in `--ranks classes` when no representative stands for it:
// a pool of worker actors on that rank's host, one per collective in flight
// (so one rank's background flows never queue behind another's).
struct Proxy {
  struct Job {
    InstancePtr instance;  // null for background flows
    LoweredPtr flows;
  };
  struct Worker {
    Job job;
    sg4::ActorPtr actor;
  };
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<Worker*> idle;
};

// What every program shares among its members.
struct ProgramInfo {
  std::vector<std::vector<double>> work;                                     // [stream][op] seconds of compute
  std::vector<std::vector<int>> event;                                       // [stream][op] dense event index or -1
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> thread_ops;  // [thread] (stream, op) by id
  std::vector<char> syncs;                                                   // [thread]: has sync ops
  std::vector<std::vector<std::size_t>> position;                            // [stream][op] in its thread's order
  std::vector<std::vector<std::int64_t>> issue0;  // [stream][op] ns, were no sync to hold its thread back
  std::size_t events = 0;
};

class Simulation {
 public:
  Simulation(const core::Schedule& s, const cost::PerfModel& pm, const EngineOptions& o)
      : s_(s), pm_(pm), o_(o), classes_(o.ranks == "classes") {}

  /// Simulates; `deliver`, when set, gets the result while the engine still
  /// exists (the forked child writes it and exits without tearing down).
  SimResult run(const std::function<void(const SimResult&)>& deliver = {});

 private:
  // ---- set-up and results (simulation.cpp) ----------------------------------
  void prepare();
  [[nodiscard]] ProgramInfo program_info(const core::Program& prog) const;
  void prepare_groups();
  void prepare_ranks();
  void spawn();
  SimResult collect();
  [[nodiscard]] sg4::Host* host(int rank) const { return hosts_.at(static_cast<std::size_t>(rank)); }
  [[nodiscard]] int leaf(int device) const { return leaf_.at(static_cast<std::size_t>(device)); }
  /// Whether a flow from `a` to `b` climbs above its leaf switch: the only
  /// flows of a background group that share a link with anything simulated
  /// (inside a scale-up domain a flow takes the devices' own NVLink ports,
  /// inside a leaf their own NICs, and a background group's are its own).
  [[nodiscard]] bool climbs(int a, int b) const {
    return pm_.topology().domain_of(a) != pm_.topology().domain_of(b) && leaf(a) != leaf(b);
  }

  // Runs an actor's body; the first error stops the simulation and is
  // rethrown once the engine returns.
  template <class Body>
  void guarded(Body body) {
    try {
      body();
    } catch (const ::simgrid::ForcefulKillException&) {
      throw;  // how SimGrid unwinds the actors it kills
    } catch (...) {
      if (!error_) error_ = std::current_exception();
      cancel_timers();  // they would reach actors about to die, through waiters on their stacks
      sg4::Actor::kill_all();
    }
  }

  // ---- host threads, streams, transfers (rank_actors.cpp) -------------------
  void thread_body(Rank& r, std::size_t t);
  void set_issued(Rank& r, std::size_t t, std::size_t upto);
  [[nodiscard]] bool issued(const Rank& r, std::size_t k, std::size_t i) const {
    const auto t = static_cast<std::size_t>(s_.programs[r.program].streams[k].thread);
    return info_[r.program].position[k][i] < r.issued_upto[t];
  }
  [[nodiscard]] double issue_time(const Rank& r, std::size_t k, std::size_t i) const {
    const ProgramInfo& pi = info_[r.program];
    const auto t = static_cast<std::size_t>(s_.programs[r.program].streams[k].thread);
    const auto& sh = r.shifts[t];
    const std::size_t pos = pi.position[k][i];
    auto it =
        std::upper_bound(sh.begin(), sh.end(), pos,
                         [](std::size_t p, const std::pair<std::size_t, std::int64_t>& e) { return p < e.first; });
    return core::Duration::ns(pi.issue0[k][i] + std::prev(it)->second).to_seconds();
  }
  void await_issue(Rank& r, std::size_t k, std::size_t i);
  void record_event(Rank& r, int ev);
  static void done(Rank& r, std::size_t k, std::size_t i, double start, double end) {
    r.times[k][i] = core::OpTime{core::TimePoint::seconds(start), core::TimePoint::seconds(end)};
    r.next[k] = i + 1;
  }
  void stream_body(Rank& r, std::size_t k);
  std::size_t compute_run(Rank& r, std::size_t k, std::size_t first);
  void transfer(Rank& r, std::size_t k, std::size_t i, const core::Op& op);
  void mirror_transfer(const core::Op& op, int src, int dst);

  // ---- flows inside a scale-up domain (scale_up_flows.cpp) ------------------
  /// Whether a flow from `a` to `b` is solved by hzp on its domain's links.
  [[nodiscard]] bool on_scale_up(int a, int b) const {
    return own_scale_up_ && pm_.topology().domain_of(a) == pm_.topology().domain_of(b);
  }
  /// Puts `f` on its domain's links for `w` (rates settle in settle_scale_up()).
  void put_scale_up(const Flow& f, FlowWaiter& w);
  /// Shares the links of every domain that gained flows, and sets its timer.
  void settle_scale_up();
  void set_timer(int domain);
  void scale_up_due(int domain);
  /// Parks the calling actor until `w`'s flows have all ended.
  static void wait_scale_up(FlowWaiter& w);
  /// Removes every timer this simulation set (scale-up domains, devices).
  void cancel_timers();
  /// Puts `flows` on the network from the calling actor and waits for them.
  void send_and_wait(std::span<const Flow* const> flows);

  // ---- collectives and proxies (collective_actors.cpp) ----------------------
  LoweredPtr lower(int group, core::CollectiveKind kind, std::int64_t bytes);
  LoweredPtr background(int group, core::CollectiveKind kind, std::int64_t bytes);
  template <class Take>
  void run_flows(int me, const Lowered& l, Take take);
  void flows_done(Instance& inst);
  void give(int rank, Proxy::Job job);
  void collective(Rank& r, std::size_t k, std::size_t i, const core::Op& op);
  void own_flows(Rank& r, Instance& inst);
  void launch_all(Instance& inst);
  void start_collective(const InstancePtr& shared);
  void start_background(const core::Group& g, const Instance& inst);

  const core::Schedule& s_;
  const cost::PerfModel& pm_;
  const EngineOptions& o_;
  const bool classes_;
  std::vector<sg4::Host*> hosts_;
  std::vector<int> leaf_;  // leaf switch of each device
  std::vector<ProgramInfo> info_;
  std::vector<int> program_of_rank_;
  std::vector<char> is_rep_;
  std::vector<std::vector<int>> group_of_;  // [kind][rank]
  std::vector<int> participants_;
  std::vector<char> crosses_;
  std::map<int, std::vector<int>> mirrors_;  // kind -> groups without a representative
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unordered_map<std::uint64_t, InstancePtr> instances_;  // (group << 32 | seq)
  std::map<std::tuple<int, int, int>, std::shared_ptr<Transfer>> transfers_;
  std::map<std::tuple<int, int, std::int64_t>, LoweredPtr> lowered_;
  std::unordered_map<int, Proxy> proxies_;
  std::exception_ptr error_;
  long long flows_ = 0;
  // Inside a scale-up domain flows are hzp's (unless --simgrid-cfg may have
  // changed SimGrid's network model); one entry per domain, made on first use.
  bool own_scale_up_ = false;
  ScaleUpShape scale_up_;
  std::vector<std::unique_ptr<ScaleUpDomain>> domains_;
  std::vector<int> dirty_domains_;
};

}  // namespace hzp::sim::simgrid
