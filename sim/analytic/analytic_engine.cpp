// Analytic engine (see analytic_engine.hpp). Costs: compute from the
// roofline (slowed under collectives on the same device), collectives as
// NCCL would run them (topologies/nccl.hpp), send/recv as one transfer; the
// walk is core::replay.
#include "sim/analytic/analytic_engine.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/schedule_replay.hpp"
#include "sim/caching_allocator.hpp"
#include "sim/emit.hpp"

namespace hzp::sim {

namespace {

// Per program: the merged intervals during which a collective or transfer
// runs on its device, ns.
using Busy = std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>;

Busy comm_busy(const core::Schedule& s, const core::ReplayResult& r) {
  Busy busy(s.programs.size());
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    auto& iv = busy[p];
    for (std::size_t k = 0; k < s.programs[p].streams.size(); ++k) {
      const auto& ops = s.programs[p].streams[k].ops;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const core::OpKind kind = ops[i].kind;
        if (kind != core::OpKind::Collective && kind != core::OpKind::Send && kind != core::OpKind::Recv) continue;
        const core::OpTime& t = r.times[p][k][i];
        if (t.end > t.start) iv.emplace_back(t.start.count_ns(), t.end.count_ns());
      }
    }
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

// When `work` ns of uncontended compute begun at `t0` are done, at rate 1
// outside the busy intervals and 1/slowdown inside (device_rate.hpp's rule).
std::int64_t finish_after(const std::vector<std::pair<std::int64_t, std::int64_t>>& busy, std::int64_t t0, double work,
                          double slowdown) {
  double t = static_cast<double>(t0);
  auto it = std::upper_bound(busy.begin(), busy.end(), std::pair{t0, INT64_MAX});
  if (it != busy.begin() && std::prev(it)->second > t0) --it;
  for (; work > 0 && it != busy.end(); ++it) {
    const double a = static_cast<double>(it->first), b = static_cast<double>(it->second);
    if (a > t) {  // full speed until the interval
      if (t + work <= a) return std::llround(t + work);
      work -= a - t;
      t = a;
    }
    const double inside = (b - t) / slowdown;  // work done by the interval's end
    if (work <= inside) return std::llround(t + work * slowdown);
    work -= inside;
    t = b;
  }
  return std::llround(t + work);
}

}  // namespace

core::ReplayResult AnalyticEngine::walk(const core::Schedule& s, const FreeOps& free) const {
  std::vector<topologies::GroupSpan> spans;
  spans.reserve(s.groups.size());
  for (const auto& g : s.groups) spans.push_back(pm_.span(g.ranks));
  check_fits(s, pm_.topology());
  // Collectives repeat with the same (kind, bytes, group): cost each once.
  std::map<std::tuple<int, int, std::int64_t>, core::Duration> collective_cache;
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) {
    return free && free(op) ? core::Duration{} : pm_.compute(op);
  };
  costs.collective = [&](const core::Group& g, const core::Op& op) {
    if (free && free(op)) return core::Duration{};
    auto key = std::tuple{g.id, static_cast<int>(op.collective), op.bytes.count()};
    auto it = collective_cache.find(key);
    if (it != collective_cache.end()) return it->second;
    core::Duration d = pm_.collective(op.collective, op.bytes, spans[static_cast<std::size_t>(g.id)]);
    collective_cache.emplace(key, d);
    return d;
  };
  costs.p2p = [&](const core::Program& sender, const core::Op& op) {
    return pm_.p2p(op.bytes, sender.ranks.at(0), op.peer);
  };
  const core::ReplayPlan plan(s);  // shared by the two walks
  core::ReplayResult r = plan.replay(costs);
  const double slowdown = pm_.topology().spec().device.comm_compute_slowdown;
  if (!interference_ || slowdown <= 1) return r;
  // Compute slowed under the collectives of the uncontended walk, walked
  // once more: on the presets the step is then within 0.1 % of where further
  // walks settle (llama3-8b fsdp on 16 H100: 1.7485 s after one, 1.7474 s after
  // ten), and each walk costs as much as the first.
  {
    const Busy busy = comm_busy(s, r);
    // The uncontended cost of every compute op is its duration in the first
    // walk (pm_.compute's, or nothing for a free op): read back, not costed again.
    const core::ReplayResult first = std::move(r);
    costs.compute_at = [&](const core::Program& prog, const core::Op& op, core::OpAt at, core::TimePoint start) {
      const auto p = static_cast<std::size_t>(&prog - s.programs.data());
      const core::OpTime& t = first.times[p][at.stream][at.index];
      const core::Duration d = t.end - t.start;
      if (d.count_ns() == 0) return d;
      const std::int64_t end = finish_after(busy[p], start.count_ns(), static_cast<double>(d.count_ns()), slowdown);
      // Offload runs on the host, not the device's SMs: not slowed (read only
      // when it matters, as reading the op costs a cache miss).
      if (end == start.count_ns() + d.count_ns() || core::is_offload(op.compute)) return d;
      return core::Duration::ns(end - start.count_ns());
    };
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
  emit_timeline(s, r.times, header, sink);
}

StepEstimate AnalyticEngine::estimate(const core::Schedule& s, const FreeOps& free) const {
  const core::ReplayResult r = walk(s, free);
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
                (op.compute == core::ComputeKind::Gemm || op.compute == core::ComputeKind::Attention)) {
              compute += pm_.compute(op).count_ns();
            }
            [[fallthrough]];
          case core::OpKind::Collective:
          case core::OpKind::Send:
          case core::OpKind::Recv: span.add(t.start, t.end); break;
          case core::OpKind::Alloc:
            deltas.emplace_back(t.start.count_ns(), op.id, op.bytes.count(), &op.buffer);
            if (op.buffer_class == core::BufferClass::Params || op.buffer_class == core::BufferClass::Grads ||
                op.buffer_class == core::BufferClass::OptimizerStates) {
              states += op.bytes;
            }
            break;
          case core::OpKind::Free: deltas.emplace_back(t.start.count_ns(), op.id, -op.bytes.count(), &op.buffer); break;
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
