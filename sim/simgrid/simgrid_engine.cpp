// The SimGrid engine (see simgrid_engine.hpp).
//
// Actors and what they share:
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
#include "sim/simgrid/simgrid_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xbt/log.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <simgrid/s4u.hpp>
#include <unordered_map>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/subprocess.hpp"
#include "core/schedule_replay.hpp"
#include "sim/emit.hpp"
#include "sim/simgrid/flows.hpp"
#include "sim/simgrid/platform.hpp"

namespace hzp::sim::simgrid {
namespace {

namespace sg4 = ::simgrid::s4u;
using core::Op;

/// What one simulation produced.
struct SimResult {
  /// times[program][stream][op] of the member emitted for each program: its
  /// slowest member (`--ranks all`) or its representative (`--ranks classes`).
  std::vector<std::vector<std::vector<core::OpTime>>> times;
  std::vector<int> emitted_rank;  // per program
  int ranks_simulated = 0;        // ranks with actors of their own
  long long flows = 0;            // flows put on the network, background included
};

using core::OpKind;

double now_s() { return sg4::Engine::get_clock(); }

// ---------------------------------------------------------------------------
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
  void begin() {
    if (active++ == 0 && slowdown > 1) change();
  }
  void end() {
    if (--active == 0 && slowdown > 1) change();
  }
  void change() {
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
  /// The calling stream's waiter, created on first use (in actor context).
  Waiter& waiter(std::size_t stream) {
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
  /// The stream is done: release its mutex (only its owner may).
  void retire(std::size_t stream) {
    if (stream < waiters.size() && waiters[stream]) waiters[stream]->lock.unlock();
  }
  /// Runs `work` seconds of uncontended compute on `stream`, at the rate of the moment.
  void run(std::size_t stream, double work) {
    if (work <= 0) return;
    if (slowdown <= 1) {
      sg4::this_actor::sleep_for(work);
      return;
    }
    Waiter& w = waiter(stream);
    double t = now_s();
    while (true) {
      (void)w.cv->wait_until(w.lock, t + work / rate());
      const double t2 = now_s();
      work -= work_between(t, t2);
      t = t2;
      if (work <= 1e-12) return;
    }
  }
  /// Uncontended compute done in [t0, t1].
  [[nodiscard]] double work_between(double t0, double t1) const {
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
  /// When `work` seconds of uncontended compute begun at `t0` were done.
  [[nodiscard]] double time_after(double t0, double work) const {
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
};

// ---------------------------------------------------------------------------
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
  std::vector<Rank*> members;  // detailed participants
  std::vector<sg4::ActorPtr> arrival_waiters, finish_waiters;
};
using InstancePtr = std::shared_ptr<Instance>;

// Flow sets up to this size are launched by one actor (the last member to
// arrive); larger ones by each member for its own flows.
constexpr std::size_t kLaunchAllFlows = 64;

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
  Simulation(const core::Schedule& s, const topologies::PerfModel& pm, const EngineOptions& o)
      : s_(s), pm_(pm), o_(o), classes_(o.ranks == "classes") {}

  /// Simulates; `deliver`, when set, gets the result while the engine still
  /// exists (the forked child writes it and exits without tearing down).
  SimResult run(const std::function<void(const SimResult&)>& deliver = {}) {
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
    prepare();
    spawn();
    e.run();
    if (error_) std::rethrow_exception(error_);
    SimResult result = collect();
    if (deliver) deliver(result);
    return result;
  }

 private:
  // ---- set-up -------------------------------------------------------------
  void prepare() {
    const std::size_t np = s_.programs.size();
    const auto world = static_cast<std::size_t>(pm_.topology().devices());
    info_.resize(np);
    program_of_rank_.assign(world, -1);
    is_rep_.assign(world, 0);
    for (std::size_t p = 0; p < np; ++p) {
      const core::Program& prog = s_.programs[p];
      ProgramInfo& pi = info_[p];
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
          if (op.event >= 0 && (op.kind == OpKind::Record || op.kind == OpKind::Wait || op.kind == OpKind::Sync)) {
            pi.event[k][i] = dense.emplace(op.event, static_cast<int>(dense.size())).first->second;
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
          const OpKind kind = prog.streams[k].ops[i].kind;
          if (kind == OpKind::Sync) pi.syncs[t] = 1;
          clock += core::issue_latency(th, kind).count_ns();
        }
      }
      for (int r : prog.ranks) program_of_rank_.at(static_cast<std::size_t>(r)) = static_cast<int>(p);
      is_rep_.at(static_cast<std::size_t>(prog.ranks.at(0))) = 1;
    }
    // The group of each kind that holds each rank (groups of one kind partition their ranks).
    group_of_.assign(16, std::vector<int>(world, -1));
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
    // Ranks in detail.
    for (std::size_t p = 0; p < np; ++p) {
      const core::Program& prog = s_.programs[p];
      const std::size_t members = classes_ ? 1 : prog.ranks.size();
      for (std::size_t m = 0; m < members; ++m) {
        auto rank = std::make_unique<Rank>();
        rank->rank = prog.ranks[m];
        rank->program = p;
        rank->device.slowdown = o_.interference ? pm_.topology().spec().device.comm_compute_slowdown : 1.0;
        const std::size_t ns = prog.streams.size();
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

  void spawn() {
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

  sg4::Host* host(int rank) const { return hosts_.at(static_cast<std::size_t>(rank)); }

  // ---- host threads -------------------------------------------------------
  // A thread issues its ops at the program's sync-free times until a sync;
  // when the sync's event happens later than the sync would have been issued,
  // everything after it shifts by the difference.
  void thread_body(Rank& r, std::size_t t) {
    const core::Program& prog = s_.programs[r.program];
    const ProgramInfo& pi = info_[r.program];
    const auto& ops = pi.thread_ops[t];
    for (std::size_t q = 0; q <= ops.size(); ++q) {
      if (q < ops.size() && prog.streams[ops[q].first].ops[ops[q].second].kind != OpKind::Sync) continue;
      set_issued(r, t, q);  // everything before this sync (or the end) is issued
      if (q == ops.size()) break;
      auto [k, i] = ops[q];
      const auto ev = static_cast<std::size_t>(pi.event[k][i]);
      if (r.event_time[ev] < 0) {
        r.event_waiters[static_cast<int>(ev)].push_back(sg4::Actor::self());
        sg4::this_actor::suspend();
      }
      const std::int64_t at = pi.issue0[k][i] + r.shifts[t].back().second;
      const std::int64_t happened = core::TimePoint::seconds(r.event_time[ev]).count_ns();
      if (happened > at) r.shifts[t].emplace_back(q, r.shifts[t].back().second + happened - at);
    }
  }

  void set_issued(Rank& r, std::size_t t, std::size_t upto) {
    r.issued_upto[t] = upto;
    const core::Program& prog = s_.programs[r.program];
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      if (r.issue_waiter[k] && static_cast<std::size_t>(prog.streams[k].thread) == t) {
        sg4::ActorPtr a = std::move(r.issue_waiter[k]);
        r.issue_waiter[k] = nullptr;
        a->resume();  // it checks again and waits anew if still not issued
      }
    }
  }

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

  // Blocks until op i of stream k is issued, then until its issue time.
  void await_issue(Rank& r, std::size_t k, std::size_t i) {
    while (!issued(r, k, i)) {
      r.issue_waiter[k] = sg4::Actor::self();
      sg4::this_actor::suspend();
    }
    const double at = issue_time(r, k, i);
    if (at > now_s()) sg4::this_actor::sleep_until(at);
  }

  void record_event(Rank& r, int ev) {
    r.event_time[static_cast<std::size_t>(ev)] = now_s();
    auto it = r.event_waiters.find(ev);
    if (it == r.event_waiters.end()) return;
    std::vector<sg4::ActorPtr> waiters = std::move(it->second);
    r.event_waiters.erase(it);
    for (auto& a : waiters) a->resume();
  }

  void done(Rank& r, std::size_t k, std::size_t i, double start, double end) {
    r.times[k][i] = core::OpTime{core::TimePoint::seconds(start), core::TimePoint::seconds(end)};
    r.next[k] = i + 1;
  }

  // ---- streams ------------------------------------------------------------
  void stream_body(Rank& r, std::size_t k) {
    const core::Stream& st = s_.programs[r.program].streams[k];
    const ProgramInfo& pi = info_[r.program];
    std::size_t i = 0;
    while (i < st.ops.size()) {
      const Op& op = st.ops[i];
      await_issue(r, k, i);
      switch (op.kind) {
        case OpKind::Compute:
        case OpKind::Alloc:
        case OpKind::Free: i = compute_run(r, k, i); continue;
        case OpKind::Record:
          done(r, k, i, now_s(), now_s());
          record_event(r, pi.event[k][i]);
          break;
        case OpKind::Wait: {
          const auto ev = static_cast<std::size_t>(pi.event[k][i]);
          if (r.event_time[ev] < 0) {
            r.event_waiters[static_cast<int>(ev)].push_back(sg4::Actor::self());
            sg4::this_actor::suspend();
          }
          done(r, k, i, now_s(), now_s());
          break;
        }
        case OpKind::Sync: done(r, k, i, now_s(), now_s()); break;
        case OpKind::Collective: collective(r, k, i, op); break;
        case OpKind::Send:
        case OpKind::Recv: transfer(r, k, i, op); break;
      }
      ++i;
    }
    r.device.retire(k);
  }

  // Kernels that start back to back (each issued before the previous one
  // ends, even uncontended) run as one timed wait; allocs and frees between
  // them take their place in it. Returns the index after the run.
  std::size_t compute_run(Rank& r, std::size_t k, std::size_t first) {
    const core::Stream& st = s_.programs[r.program].streams[k];
    const ProgramInfo& pi = info_[r.program];
    const double t0 = now_s();
    double work = 0;
    std::size_t j = first;
    for (; j < st.ops.size(); ++j) {
      const OpKind kind = st.ops[j].kind;
      if (kind != OpKind::Compute && kind != OpKind::Alloc && kind != OpKind::Free) break;
      if (j > first && (!issued(r, k, j) || issue_time(r, k, j) > t0 + work)) break;
      work += pi.work[k][j];
    }
    r.device.run(k, work);
    double done_work = 0;
    for (std::size_t i = first; i < j; ++i) {
      const double start = r.device.time_after(t0, done_work);
      done_work += pi.work[k][i];
      const double end = pi.work[k][i] > 0 ? r.device.time_after(t0, done_work) : start;
      done(r, k, i, start, end);
    }
    return j;
  }

  LoweredPtr lower(int group, core::CollectiveKind kind, std::int64_t bytes) {
    auto key = std::tuple{group, static_cast<int>(kind), bytes};
    auto it = lowered_.find(key);
    if (it != lowered_.end()) return it->second;
    auto l = std::make_shared<Lowered>();
    l->set = lower_collective(pm_, kind, core::Bytes(bytes), s_.group(group).ranks, o_.nccl_channels);
    lowered_.emplace(key, l);
    return l;
  }

  // A mirror group's flows that leave their leaf switch: the only ones that
  // share a link with anything simulated (flows inside a leaf use just the
  // two NICs, and a mirror group's NICs are its own).
  LoweredPtr background(int group, core::CollectiveKind kind, std::int64_t bytes) {
    auto key = std::tuple{-1 - group, static_cast<int>(kind), bytes};
    auto it = lowered_.find(key);
    if (it != lowered_.end()) return it->second;
    auto l = std::make_shared<Lowered>(*lower(group, kind, bytes));
    std::erase_if(l->set.flows, [this](const Flow& f) { return leaf(f.src) == leaf(f.dst); });
    lowered_.emplace(key, l);
    return l;
  }

  [[nodiscard]] int leaf(int device) const { return leaf_.at(static_cast<std::size_t>(device)); }

  // Puts the flows of `l` from `me` (all sources when -1) that `take`
  // accepts on the network and waits for them.
  template <class Take>
  void run_flows(int me, const Lowered& l, Take take) {
    std::size_t lo = 0, hi = l.set.flows.size();
    if (me >= 0) std::tie(lo, hi) = l.from(me);
    std::vector<sg4::CommPtr> comms;
    for (std::size_t f = lo; f < hi; ++f) {
      const Flow& fl = l.set.flows[f];
      if (!take(fl.src)) continue;
      comms.push_back(
          sg4::Comm::sendto_async(host(fl.src), host(fl.dst), static_cast<std::uint64_t>(std::ceil(fl.wire_bytes))));
    }
    flows_ += static_cast<long long>(comms.size());
    if (comms.size() == 1) {
      comms[0]->wait();
    } else if (!comms.empty()) {
      for (auto& c : comms) c->wait();
    }
  }

  void flows_done(Instance& inst) {
    if (--inst.pending > 0) return;
    inst.end = now_s() + inst.flows->set.latency_s;
    for (auto& a : inst.finish_waiters) a->resume();
    inst.finish_waiters.clear();
  }

  void give(int rank, Proxy::Job job) {
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
      sg4::Actor::kill_all();
    }
  }

  void collective(Rank& r, std::size_t k, std::size_t i, const Op& op) {
    const core::Group& rep_group = s_.group(op.group);
    const int gid =
        classes_ ? op.group : group_of_[static_cast<std::size_t>(rep_group.kind)][static_cast<std::size_t>(r.rank)];
    if (gid < 0) {
      throw core::ScheduleError(
          fmt::format("rank {} is in no group of kind {}", r.rank, core::to_string(rep_group.kind)));
    }
    const std::uint64_t key = (static_cast<std::uint64_t>(gid) << 32) | static_cast<std::uint32_t>(op.seq);
    InstancePtr& slot = instances_[key];
    if (!slot) {
      slot = std::make_shared<Instance>();
      slot->group = gid;
      slot->kind = op.collective;
      slot->expected = participants_[static_cast<std::size_t>(gid)];
    }
    InstancePtr inst = slot;
    inst->max_bytes = std::max(inst->max_bytes, op.bytes.count());
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
  void own_flows(Rank& r, Instance& inst) {
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
  void launch_all(Instance& inst) {
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
  void start_collective(const InstancePtr& shared) {
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
      if (crosses_[static_cast<std::size_t>(inst.group)]) {
        auto it = mirrors_.find(static_cast<int>(g.kind));
        if (it != mirrors_.end()) {
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
      }
    }
    if (!inst.launch_all) {
      for (auto& a : inst.arrival_waiters) a->resume();
      inst.arrival_waiters.clear();
    }
  }

  void transfer(Rank& r, std::size_t k, std::size_t i, const Op& op) {
    const bool is_send = op.kind == OpKind::Send;
    const int rep = s_.programs[r.program].ranks.at(0);
    const int peer = op.peer + (r.rank - rep);
    const auto key = is_send ? std::tuple{r.rank, peer, op.seq} : std::tuple{peer, r.rank, op.seq};
    auto [it, first] = transfers_.try_emplace(key);
    std::shared_ptr<Transfer>& t = it->second;
    if (first) {
      t = std::make_shared<Transfer>();
      t->waiting = sg4::Actor::self();
      t->waiting_rank = &r;
      std::shared_ptr<Transfer> keep = t;
      sg4::this_actor::suspend();
      done(r, k, i, keep->start, keep->end);
      return;
    }
    std::shared_ptr<Transfer> keep = t;
    transfers_.erase(it);
    const int src = std::get<0>(key), dst = std::get<1>(key);
    keep->start = now_s();
    r.device.begin();
    keep->waiting_rank->device.begin();
    if (classes_ && pm_.topology().domain_of(src) != pm_.topology().domain_of(dst)) {
      // The sender's class mates send to their own peers at the same time.
      const core::Program& sender =
          s_.programs[static_cast<std::size_t>(program_of_rank_.at(static_cast<std::size_t>(src)))];
      for (int m : sender.ranks) {
        const int to = m + (dst - src);
        if (m == src || to < 0 || to >= pm_.topology().devices() || leaf(m) == leaf(to)) continue;
        auto l = std::make_shared<Lowered>();
        l->set = lower_p2p(pm_, op.bytes, m, to);
        give(m, Proxy::Job{nullptr, l});
      }
    }
    FlowSet fs = lower_p2p(pm_, op.bytes, src, dst);
    flows_ += static_cast<long long>(fs.flows.size());
    for (const Flow& f : fs.flows) {
      sg4::Comm::sendto(host(f.src), host(f.dst), static_cast<std::uint64_t>(std::ceil(f.wire_bytes)));
    }
    if (fs.latency_s > 0) sg4::this_actor::sleep_for(fs.latency_s);
    keep->end = now_s();
    r.device.end();
    keep->waiting_rank->device.end();
    done(r, k, i, keep->start, keep->end);
    keep->waiting->resume();
  }

  // ---- results --------------------------------------------------------------
  SimResult collect() {
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

  const core::Schedule& s_;
  const topologies::PerfModel& pm_;
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
};

// ---- the child process's report --------------------------------------------
enum class Status : std::int64_t { Ok, Input, Schedule, Infeasible, Other };

void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const std::string& s) {
  put(out, static_cast<std::int64_t>(s.size()));
  out += s;
}

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  std::int64_t i64() {
    std::int64_t v = 0;
    if (at + sizeof v > in.size())
      throw std::runtime_error("simgrid engine: truncated result from the simulation process");
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = static_cast<std::size_t>(i64());
    if (at + n > in.size()) throw std::runtime_error("simgrid engine: truncated result from the simulation process");
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
};

std::string encode(const SimResult& r) {
  std::string out;
  put(out, static_cast<std::int64_t>(Status::Ok));
  put(out, r.ranks_simulated);
  put(out, r.flows);
  put(out, static_cast<std::int64_t>(r.times.size()));
  for (std::size_t p = 0; p < r.times.size(); ++p) {
    put(out, r.emitted_rank[p]);
    put(out, static_cast<std::int64_t>(r.times[p].size()));
    for (const auto& st : r.times[p]) {
      put(out, static_cast<std::int64_t>(st.size()));
      for (const auto& t : st) {
        put(out, t.start.count_ns());
        put(out, t.end.count_ns());
      }
    }
  }
  return out;
}

SimResult decode(const std::string& in) {
  Reader rd{in};
  const auto status = static_cast<Status>(rd.i64());
  switch (status) {
    case Status::Ok: break;
    case Status::Input: {
      std::string f = rd.str(), k = rd.str(), e = rd.str();
      throw core::InputError(f, k, e);
    }
    case Status::Schedule: throw core::ScheduleError(rd.str());
    case Status::Infeasible: throw core::InfeasibleError(rd.str());
    default: throw std::runtime_error(rd.str());
  }
  SimResult r;
  r.ranks_simulated = static_cast<int>(rd.i64());
  r.flows = rd.i64();
  r.times.resize(static_cast<std::size_t>(rd.i64()));
  r.emitted_rank.resize(r.times.size());
  for (std::size_t p = 0; p < r.times.size(); ++p) {
    r.emitted_rank[p] = static_cast<int>(rd.i64());
    r.times[p].resize(static_cast<std::size_t>(rd.i64()));
    for (auto& st : r.times[p]) {
      st.resize(static_cast<std::size_t>(rd.i64()));
      for (auto& t : st) {
        t.start = core::TimePoint::ns(rd.i64());
        t.end = core::TimePoint::ns(rd.i64());
      }
    }
  }
  return r;
}

// Runs the simulation in a child process and returns what it reported.
SimResult simulate_forked(const core::Schedule& s, const topologies::PerfModel& pm, const EngineOptions& o) {
  core::Child child(
      [&](int, int fd) {
        std::string out;
        try {
          // The result leaves before the engine's teardown, which the child skips.
          (void)Simulation(s, pm, o).run([&](const SimResult& r) {
            (void)core::write_all_fd(fd, encode(r));
            ::close(fd);
            ::_exit(0);
          });
        } catch (const core::InputError& e) {
          put(out, static_cast<std::int64_t>(Status::Input));
          put(out, e.file());
          put(out, e.key());
          put(out, e.expected());
        } catch (const core::ScheduleError& e) {
          put(out, static_cast<std::int64_t>(Status::Schedule));
          put(out, std::string(e.what()));
        } catch (const core::InfeasibleError& e) {
          put(out, static_cast<std::int64_t>(Status::Infeasible));
          put(out, std::string(e.what()));
        } catch (const std::exception& e) {
          put(out, static_cast<std::int64_t>(Status::Other));
          put(out, std::string(e.what()));
        } catch (...) {
          put(out, static_cast<std::int64_t>(Status::Other));
          put(out, std::string("simgrid engine: unknown error in the simulation process"));
        }
        (void)core::write_all_fd(fd, out);
        return 0;
      },
      core::ChildOptions{});
  const std::string data = child.read_all();
  const core::ExitStatus status = child.wait();
  if (status.signaled) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process died of signal {}", status.signal));
  }
  if (!status.ok() || data.empty()) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process exited with status {}", status.code));
  }
  return decode(data);
}

}  // namespace

void SimGridEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  check_fits(s, pm_.topology());
  // The walk with zero costs names the first offending op of a broken
  // Schedule before any actor runs.
  (void)core::replay(s, core::ReplayCosts{});
  SimResult r;
  try {
    r = simulate_forked(s, pm_, options_);
  } catch (const std::runtime_error& e) {
    // SimGrid aborts on a setting it does not know or accept.
    const bool died = std::string(e.what()).find("simulation process died") != std::string::npos;
    if (!died || options_.simgrid_config.empty()) throw;
    throw core::InputError("command line", "--simgrid-cfg",
                           fmt::format("expected SimGrid settings it accepts (key:value), got '{}' ({})",
                                       fmt::join(options_.simgrid_config, " "), e.what()));
  }
  header.engine = name();
  const int world = pm_.topology().devices();
  header.engine_detail = fmt::format(
      "ranks={} ({} of {} ranks in detail), {} NCCL channels, {} flows, compute slowdown under "
      "collectives {}",
      options_.ranks, r.ranks_simulated, world, options_.nccl_channels, r.flows,
      options_.interference ? pm_.topology().spec().device.comm_compute_slowdown : 1.0);
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r.times, header, sink);
}

}  // namespace hzp::sim::simgrid
