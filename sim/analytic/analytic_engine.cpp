// Analytic engine (see analytic_engine.hpp). Costs: compute from the
// roofline, collectives from the α-β ring/tree model over the slowest tier
// the group spans, send/recv as one transfer; the walk is core::replay.
#include "sim/analytic/analytic_engine.hpp"

#include <map>
#include <tuple>

#include "core/schedule_replay.hpp"
#include "sim/emit.hpp"

namespace hzp::sim {

void AnalyticEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  std::vector<topologies::GroupSpan> spans;
  spans.reserve(s.groups.size());
  for (const auto& g : s.groups) spans.push_back(pm_.span(g.ranks));
  check_fits(s, pm_.topology());
  // Collectives repeat with the same (kind, bytes, group): cost each once.
  std::map<std::tuple<int, int, std::int64_t>, core::Duration> collective_cache;
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) { return pm_.compute(op); };
  costs.collective = [&](const core::Group& g, const core::Op& op) {
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
  core::ReplayResult r = core::replay(s, costs);

  header.engine = name();
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r.times, header, sink);
}

}  // namespace hzp::sim
