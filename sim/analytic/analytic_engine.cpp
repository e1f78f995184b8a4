// Analytic engine (see analytic_engine.hpp). Costs: compute from the
// roofline (slowed under collectives on the same device), collectives as
// NCCL would run them (cost/nccl.hpp), send/recv as one transfer; the
// walk is core::replay.
#include "sim/analytic/analytic_engine.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "schedule/replay.hpp"
#include "sim/caching_allocator.hpp"
#include "sim/emit.hpp"

namespace hzp::sim {

namespace {

// Shared links: walks, each from the intervals of the walk before, until no
// collective's end would move by more than kSharingTolerance of the step,
// at most kSharingWalks.
constexpr int kSharingWalks = 6;
constexpr double kSharingTolerance = 2.5e-3;

// Where a collective is in the Schedule, its link class (0: inside a
// scale-up domain, 1: across domains) and its latency term, ns.
struct CollectiveSite {
  std::size_t program, stream, index;
  int link_class;
  std::int64_t latency_ns;
};

// How far the walk `r` is from its own fixed point: the most any
// collective's end would move (ns) if costed by `collective_at` (the sharing
// of `r`'s own intervals) from its start in `r`, every member's cost taken
// and the slowest kept, as the walk does; and the last collective's end.
std::pair<std::int64_t, std::int64_t> sharing_residual(
    const core::Schedule& s, const std::vector<CollectiveSite>& sites, const core::ReplayResult& r,
    const decltype(core::ReplayCosts::collective_at)& collective_at) {
  // (group << 32 | seq, costed end, walked end) of every member; a collective's
  // members all end together in the walk, and its costed end is their latest.
  std::vector<std::tuple<std::uint64_t, std::int64_t, std::int64_t>> ends;
  ends.reserve(sites.size());
  std::int64_t last = 0;
  for (const CollectiveSite& c : sites) {
    const core::OpTime& t = r.times[c.program][c.stream][c.index];
    const core::Op& op = s.programs[c.program].streams[c.stream].ops[c.index];
    const core::Op::Collective& coll = op.collective();
    last = std::max(last, t.end.count_ns());
    const std::int64_t costed = t.start.count_ns() + collective_at(s.group(coll.group), op, s.programs[c.program],
                                                                   core::OpAt{c.stream, c.index}, t.start)
                                                         .count_ns();
    const auto key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(coll.group)) << 32) |
                     static_cast<std::uint32_t>(coll.seq);
    ends.emplace_back(key, costed, t.end.count_ns());
  }
  std::sort(ends.begin(), ends.end());
  std::int64_t most = 0;
  for (std::size_t i = 0; i < ends.size();) {
    const auto [key, first_costed, walked] = ends[i];
    std::int64_t costed = first_costed;
    for (; i < ends.size() && std::get<0>(ends[i]) == key; ++i) costed = std::max(costed, std::get<1>(ends[i]));
    most = std::max(most, std::abs(costed - walked));
  }
  return {most, last};
}

// Per program: the merged intervals during which a collective or transfer
// runs on its device, ns.
using Busy = std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>;

Busy comm_busy(const core::Schedule& s, const core::ReplayPlan& plan, const core::ReplayResult& r) {
  Busy busy(s.programs.size());
  for (const core::ReplayPlan::CommSite& c : plan.comm_sites()) {
    const core::OpTime& t = r.times[c.program][c.stream][c.index];
    if (t.end > t.start) busy[c.program].emplace_back(t.start.count_ns(), t.end.count_ns());
  }
  for (auto& iv : busy) {
    std::sort(iv.begin(), iv.end());
    std::size_t out = 0;
    for (const auto& x : iv) {
      if (out > 0 && x.first <= iv[out - 1].second) {
        iv[out - 1].second = std::max(iv[out - 1].second, x.second);
      } else {
        iv[out++] = x;
      }
    }
    iv.resize(out);
  }
  return busy;
}

// The first of the merged intervals `busy` that ends after `t0`. `hint` is
// where the search for the same stream ended last: a stream's ops start in
// time order within a walk, so the search walks on from there, and falls
// back to bisection when `t0` is behind it (a new walk).
std::size_t first_ending_after(const std::vector<std::pair<std::int64_t, std::int64_t>>& busy, std::int64_t t0,
                               std::size_t& hint) {
  std::size_t i = hint;
  if (i > busy.size() || (i > 0 && busy[i - 1].second > t0)) {
    i = static_cast<std::size_t>(
        std::partition_point(busy.begin(), busy.end(), [t0](const auto& iv) { return iv.second <= t0; }) -
        busy.begin());
  } else {
    while (i < busy.size() && busy[i].second <= t0) ++i;
  }
  hint = i;
  return i;
}

// When `work` ns of uncontended compute begun at `t0` are done, at rate 1
// outside the busy intervals and 1/slowdown inside (device_rate.hpp's rule).
std::int64_t finish_after(const std::vector<std::pair<std::int64_t, std::int64_t>>& busy, std::int64_t t0, double work,
                          double slowdown, std::size_t& hint) {
  double t = static_cast<double>(t0);
  auto it = busy.begin() + static_cast<std::ptrdiff_t>(first_ending_after(busy, t0, hint));
  for (; work > 0 && it != busy.end(); ++it) {
    const double a = static_cast<double>(it->first), b = static_cast<double>(it->second);
    if (a > t) {  // full speed until the interval
      if (t + work <= a) return core::round_nearest(t + work);
      work -= a - t;
      t = a;
    }
    const double inside = (b - t) / slowdown;  // work done by the interval's end
    if (work <= inside) return core::round_nearest(t + work * slowdown);
    work -= inside;
    t = b;
  }
  return core::round_nearest(t + work);
}

// Compute ops at their duration in `first` (uncontended), slowed by
// `slowdown` inside the busy intervals of their device.
std::function<core::Duration(const core::Program&, const core::Op&, core::OpAt, core::TimePoint)> slowed_compute(
    const core::Schedule& s, const core::ReplayResult& first, const Busy& busy, double slowdown) {
  // Per program and stream: where its last search in `busy` ended.
  std::vector<std::vector<std::size_t>> hints(s.programs.size());
  for (std::size_t p = 0; p < s.programs.size(); ++p) hints[p].assign(s.programs[p].streams.size(), 0);
  return [&s, &first, &busy, slowdown, hints = std::move(hints)](const core::Program& prog, const core::Op& op,
                                                                 core::OpAt at, core::TimePoint start) mutable {
    const auto p = static_cast<std::size_t>(&prog - s.programs.data());
    const core::OpTime& t = first.times[p][at.stream][at.index];
    const core::Duration d = t.end - t.start;
    if (d.count_ns() == 0) return d;
    const std::int64_t end =
        finish_after(busy[p], start.count_ns(), static_cast<double>(d.count_ns()), slowdown, hints[p][at.stream]);
    // Offload runs on the host, not the device's SMs: not slowed (read only
    // when it matters, as reading the op costs a cache miss).
    if (end == start.count_ns() + d.count_ns() || core::is_offload(op.compute().kind)) return d;
    return core::Duration::ns(end - start.count_ns());
  };
}

// Concurrent collectives of one device share its links: those of one link
// class (inside the scale-up domain, or across domains over the NICs) on
// different streams split its bandwidth evenly while they move data, as the
// SimGrid engine's flows do. From the intervals of the walk before, a
// collective's transfer runs at 1 / (1 + the other streams' collectives of
// its class in flight). Their latency terms are not shared; sends and
// receives are neither slowed nor counted (pipeline transfers are small
// beside the data-parallel collectives that meet here).
class LinkSharing {
 public:
  static constexpr int kClasses = 2;  // 0: scale-up, 1: scale-out

  struct Interval {
    std::size_t stream;
    std::int64_t start, end;  // ns, the transfer part
  };

  LinkSharing(std::size_t programs, const std::vector<CollectiveSite>& sites, const core::ReplayResult& r)
      : iv_(programs), steps_(programs) {
    for (const CollectiveSite& c : sites) {
      const core::OpTime& t = r.times[c.program][c.stream][c.index];
      const std::int64_t start = t.start.count_ns() + c.latency_ns, end = t.end.count_ns();
      if (end > start) iv_[c.program][static_cast<std::size_t>(c.link_class)].push_back({c.stream, start, end});
    }
    for (std::size_t p = 0; p < programs; ++p) {
      for (auto& v : iv_[p]) {
        std::sort(v.begin(), v.end(), [](const Interval& x, const Interval& y) { return x.start < y.start; });
        // Any two streams' transfers overlapping?
        std::int64_t reach = INT64_MIN;
        std::size_t reach_stream = 0;
        for (const Interval& x : v) {
          if (x.start < reach && x.stream != reach_stream) shared_ = true;
          if (x.end > reach) reach = x.end, reach_stream = x.stream;
        }
      }
    }
  }

  /// Whether any device ran transfers of one class on two streams at once.
  [[nodiscard]] bool any() const { return shared_; }

  /// When `work` ns of uncontended transfer begun at `t0` on stream `k` of
  /// program `p`, link class `cls`, end.
  [[nodiscard]] std::int64_t finish(std::size_t p, int cls, std::size_t k, std::int64_t t0, double work) const {
    const Steps& st = steps(p, cls, k);
    double t = static_cast<double>(t0);
    auto it = std::upper_bound(st.begin(), st.end(), t0, [](std::int64_t x, const auto& e) { return x < e.first; });
    int others = it == st.begin() ? 0 : std::prev(it)->second;
    for (; work > 0 && it != st.end(); ++it) {
      const double rate = 1.0 / (1 + others), until = static_cast<double>(it->first);
      if (t + work / rate <= until) return core::round_nearest(t + work / rate);
      work -= (until - t) * rate;
      t = until;
      others = it->second;
    }
    return core::round_nearest(t + work * (1 + others));
  }

 private:
  // From .first on, .second transfers of the class run on other streams.
  using Steps = std::vector<std::pair<std::int64_t, int>>;

  const Steps& steps(std::size_t p, int cls, std::size_t k) const {
    auto& per_stream = steps_[p][static_cast<std::size_t>(cls)];
    if (per_stream.size() <= k) per_stream.resize(k + 1);
    auto& slot = per_stream[k];
    if (slot) return *slot;
    std::vector<std::pair<std::int64_t, int>> edges;
    for (const Interval& x : iv_[p][static_cast<std::size_t>(cls)]) {
      if (x.stream == k) continue;
      edges.emplace_back(x.start, +1);
      edges.emplace_back(x.end, -1);
    }
    std::sort(edges.begin(), edges.end());
    Steps out;
    int n = 0;
    for (const auto& [t, d] : edges) {
      n += d;
      if (!out.empty() && out.back().first == t) {
        out.back().second = n;
      } else {
        out.emplace_back(t, n);
      }
    }
    slot = std::move(out);
    return *slot;
  }

  std::vector<std::array<std::vector<Interval>, kClasses>> iv_;
  bool shared_ = false;
  // Built on first use: [program][class][stream].
  mutable std::vector<std::array<std::vector<std::optional<Steps>>, kClasses>> steps_;
};

// Each collective's uncontended cost, as its latency and its transfer (the
// part that shares links), costed once per (group, kind, bytes):
// collectives repeat. A collective that directly follows one of the
// same kind on the same group in its stream (nothing between: the stream
// issues it as the other ends) pays the latency left once the one before has
// drained into it (cost::CollectiveCost::back_to_back_latency_s: a run of
// broadcasts pays its chain once).
class CollectiveCosts {
 public:
  struct Cost {
    core::Duration latency, transfer;
  };
  CollectiveCosts(const cost::PerfModel& pm, const core::Schedule& s) : pm_(pm) {
    spans_.reserve(s.groups.size());
    for (const auto& g : s.groups) spans_.push_back(pm_.span(g.ranks));
    for (const core::Program& prog : s.programs) {
      for (const core::Stream& st : prog.streams) {
        for (std::size_t i = 1; i < st.ops.size(); ++i) {
          if (back_to_back(st, i)) back_to_back_.insert(&st.ops[i]);
        }
      }
    }
  }
  Cost operator()(const core::Group& g, const core::Op& op) {
    const core::Op::Collective& coll = op.collective();
    auto key = std::tuple{g.id, static_cast<int>(coll.kind), coll.bytes.count()};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      const cost::CollectiveCost c = pm_.collective_cost(coll.kind, coll.bytes, span(g));
      const core::Duration total = core::Duration::seconds(c.seconds());
      const core::Duration latency = std::min(total, core::Duration::seconds(c.latency_s));
      const core::Duration back_to_back = std::min(latency, core::Duration::seconds(c.back_to_back_latency_s));
      it = cache_.emplace(key, Costed{latency, back_to_back, total - latency}).first;
    }
    const Costed& c = it->second;
    const bool b2b = !back_to_back_.empty() && back_to_back_.contains(&op);
    return Cost{b2b ? c.back_to_back : c.latency, c.transfer};
  }
  /// 1: the group crosses scale-up domains (its transfers use the NICs); 0: inside one.
  [[nodiscard]] int link_class(const core::Group& g) const { return span(g).domains > 1 ? 1 : 0; }

 private:
  [[nodiscard]] const cost::GroupSpan& span(const core::Group& g) const {
    return spans_[static_cast<std::size_t>(g.id)];
  }
  const cost::PerfModel& pm_;
  std::vector<cost::GroupSpan> spans_;
  // Costed once per (group, kind, bytes): the latency alone and back to back.
  struct Costed {
    core::Duration latency, back_to_back, transfer;
  };
  std::unordered_set<const core::Op*> back_to_back_;
  std::map<std::tuple<int, int, std::int64_t>, Costed> cache_;
};

// GEMMs' costs, costed once per distinct GEMM of the walk: a step repeats
// the same few shapes in every layer and micro-batch, and costing one by its
// tiles (PerfModel::compute: a cube root, the efficiency curve, two tile
// fills) is most of what a compute op costs the walk. The key holds every
// field PerfModel::compute reads of a GEMM (its role and attention kernel
// only matter for attention).
class GemmCosts {
 public:
  explicit GemmCosts(const cost::PerfModel& pm) : pm_(pm) {}
  core::Duration operator()(const core::Op& op) {
    const core::Op::Compute& c = op.compute();
    if (c.kind != core::ComputeKind::Gemm) return pm_.compute(op);
    const core::GemmShape g = c.gemm.value_or(core::GemmShape{0, 0, 0, 0});
    const Key key{g.m, g.n, g.k, g.batch, c.bytes.count(), c.flops.count(), c.kernels, c.dtype};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(key, pm_.compute(op)).first->second;
  }

 private:
  struct Key {
    std::int64_t m, n, k, batch, bytes;
    double flops;
    int kernels;
    core::Dtype dtype;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    std::size_t operator()(const Key& x) const {
      std::size_t h = x.flops == 0 ? 0 : std::bit_cast<std::uint64_t>(x.flops);  // +0 and -0 are one key
      for (std::int64_t v : {x.m, x.n, x.k, x.batch, x.bytes, static_cast<std::int64_t>(x.kernels),
                             static_cast<std::int64_t>(x.dtype)}) {
        h = (h ^ static_cast<std::size_t>(v)) * 0x9E3779B97F4A7C15ULL;
      }
      return h;
    }
  };
  const cost::PerfModel& pm_;
  std::unordered_map<Key, core::Duration, Hash> cache_;
};

}  // namespace

core::ReplayResult AnalyticEngine::walk(const core::Schedule& s, const FreeOps& free) const {
  check_fits(s, pm_.topology());
  CollectiveCosts collective_cost(pm_, s);
  GemmCosts compute_cost(pm_);
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) {
    return free && free(op) ? core::Duration{} : compute_cost(op);
  };
  costs.collective = [&](const core::Group& g, const core::Op& op) {
    if (free && free(op)) return core::Duration{};
    const CollectiveCosts::Cost c = collective_cost(g, op);
    return c.latency + c.transfer;
  };
  costs.p2p = [&](const core::Program& sender, const core::Op& op) {
    const core::Op::Transfer& t = op.transfer();
    return pm_.p2p(t.bytes, sender.ranks.at(0), t.peer);
  };
  const core::ReplayPlan plan(s);  // shared by the walks
  core::ReplayResult r = plan.replay(costs);

  const double slowdown = pm_.topology().spec().device.comm_compute_slowdown;
  const bool interfere = slows_compute();
  std::vector<CollectiveSite> sites;
  std::optional<LinkSharing> sharing;
  if (contention_.link_sharing) {
    for (const core::ReplayPlan::CommSite& c : plan.comm_sites()) {
      if (c.kind != core::OpKind::Collective) continue;
      const core::Op& op = s.programs[c.program].streams[c.stream].ops[c.index];
      const core::Group& g = s.group(op.collective().group);
      sites.push_back(
          {c.program, c.stream, c.index, collective_cost.link_class(g), collective_cost(g, op).latency.count_ns()});
    }
    sharing.emplace(s.programs.size(), sites, r);
    if (!sharing->any()) sharing.reset();
  }
  if (!interfere && !sharing) return r;

  // Walked again with what the walk before shows: compute slowed under its
  // collectives (interference), collectives' transfers shared with the
  // others of their device and link class. For interference one corrective
  // walk lands within 0.1 % of where more settle on the presets (llama3-8b
  // fsdp on 16 H100: 1.7485 s after one, 1.7474 s after ten); shared links
  // settle more slowly where collectives dominate (see kSharingWalks). The
  // uncontended cost of every compute op is its duration in the first walk
  // (pm_.compute's, or nothing for a free op): read back, not costed again.
  const core::ReplayResult first = std::move(r);
  const Busy busy = interfere ? comm_busy(s, plan, first) : Busy{};
  if (interfere) costs.compute_at = slowed_compute(s, first, busy, slowdown);
  if (sharing) {
    costs.collective_at = [&](const core::Group& g, const core::Op& op, const core::Program& member, core::OpAt at,
                              core::TimePoint start) {
      if (free && free(op)) return core::Duration{};
      const CollectiveCosts::Cost c = collective_cost(g, op);
      if (c.transfer.count_ns() == 0) return c.latency;
      const auto p = static_cast<std::size_t>(&member - s.programs.data());
      const std::int64_t end =
          sharing->finish(p, collective_cost.link_class(g), at.stream, start.count_ns() + c.latency.count_ns(),
                          static_cast<double>(c.transfer.count_ns()));
      return core::Duration::ns(end - start.count_ns());
    };
  }
  r = plan.replay(costs);
  for (int w = 1; sharing && w < kSharingWalks; ++w) {
    sharing.emplace(s.programs.size(), sites, r);
    const auto [moved, step] = sharing_residual(s, sites, r, costs.collective_at);
    if (static_cast<double>(moved) <= kSharingTolerance * static_cast<double>(step)) break;
    r = plan.replay(costs);
  }
  return r;
}

void AnalyticEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  core::ReplayResult r = walk(s);
  header.engine = name();
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r, header, sink);
}

StepEstimate AnalyticEngine::estimate(const core::Schedule& s, const FreeOps& free) const {
  const core::ReplayResult r = walk(s, free);
  // Where compute was not slowed, each kernel's walked duration is its
  // uncontended cost, read back rather than costed again.
  const bool slowed = slows_compute();
  StepEstimate e;
  core::StepSpan span;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    const core::Program& prog = s.programs[p];
    std::vector<std::tuple<std::int64_t, int, std::int64_t, const std::string*>> deltas;
    std::int64_t compute = 0;
    core::Bytes states{};
    for (std::size_t k = 0; k < prog.streams.size(); ++k) {
      const core::Stream& st = prog.streams[k];
      for (std::size_t i = 0; i < st.ops.size(); ++i) {
        const core::Op& op = st.ops[i];
        const core::OpTime& t = r.times[p][k][i];
        switch (op.kind) {
          case core::OpKind::Compute:
            // Uncontended: the same under every sharding of a model-parallel plan.
            if (st.kind == core::StreamKind::Compute && !(free && free(op)) &&
                (op.compute().kind == core::ComputeKind::Gemm || op.compute().kind == core::ComputeKind::Attention)) {
              compute += slowed ? pm_.compute(op).count_ns() : (t.end - t.start).count_ns();
            }
            [[fallthrough]];
          case core::OpKind::Collective:
          case core::OpKind::Send:
          case core::OpKind::Recv: span.add(t.start, t.end); break;
          case core::OpKind::Alloc: {
            const core::Op::Buffer& b = op.buffer();
            deltas.emplace_back(t.start.count_ns(), op.id, b.bytes.count(), &b.name);
            if (b.buffer_class == core::BufferClass::Params || b.buffer_class == core::BufferClass::Grads ||
                b.buffer_class == core::BufferClass::OptimizerStates) {
              states += b.bytes;
            }
            break;
          }
          case core::OpKind::Free:
            deltas.emplace_back(t.start.count_ns(), op.id, -op.buffer().bytes.count(), &op.buffer().name);
            break;
          default: break;
        }
      }
    }
    std::sort(deltas.begin(), deltas.end());
    CachingAllocator allocator;
    for (const auto& [t, id, d, buffer] : deltas) {
      if (d >= 0) {
        allocator.allocate(*buffer, core::Bytes(d));
      } else {
        allocator.free(*buffer);
      }
      e.peak_reserved = std::max(e.peak_reserved, allocator.reserved());
    }
    e.model_compute = std::max(e.model_compute, core::Duration::ns(compute));
    e.host = std::max(e.host, prog.host_bytes);
    e.model_states = std::max(e.model_states, states);
  }
  e.step = span.step();
  return e;
}

}  // namespace hzp::sim
