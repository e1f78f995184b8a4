// Collective validation cases (see collective_cases.hpp).
#include "validation/collective_cases.hpp"

#include "validation/cases.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "cost/nccl.hpp"
#include "cost/perf_model.hpp"
#include "topologies/overlay.hpp"

namespace hzp::validation {
namespace {

constexpr core::CollectiveKind kKinds[] = {core::CollectiveKind::AllGather, core::CollectiveKind::ReduceScatter,
                                           core::CollectiveKind::AllReduce, core::CollectiveKind::Broadcast,
                                           core::CollectiveKind::AllToAll};

std::optional<double> mean_abs(const std::vector<ScoredRow>& rows, bool large) {
  double sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    if (r.large() != large) continue;
    sum += std::abs(r.error());
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// How hzp models the run: cluster, group shape, what it forced.
void read_model(core::StrictObject m, CollectiveCase& c) {
  c.cluster = m.str("cluster");
  if (!m.raw("nic_gbps").is_null()) c.nic_gbps = m.number("nic_gbps", 0, 1e6, true);
  c.gpus = static_cast<int>(m.integer("gpus", 2, 1 << 20));
  c.ranks_per_node = static_cast<int>(m.integer("ranks_per_node", 1, 1 << 12));
  c.gpus_per_process = static_cast<int>(m.integer("gpus_per_process", 1, 1 << 12));
  if (c.gpus % c.ranks_per_node != 0) m.fail("ranks_per_node", fmt::format("expected a divisor of gpus ({})", c.gpus));
  if (!m.raw("algorithms").is_null()) {
    const auto& algos = m.array("algorithms");
    for (const auto& a : algos) {
      const std::string name = a.is_string() ? a.get<std::string>() : "";
      if (!cost::find_collective_algorithm(name)) {
        std::string names;
        for (const cost::CollectiveAlgorithm* k : cost::collective_algorithms()) {
          names += fmt::format("{}{}", names.empty() ? "" : ", ", k->name());
        }
        m.fail("algorithms", fmt::format("expected names among {}", names));
      }
      c.algorithms.push_back(name);
    }
  }
  if (!m.raw("protocol").is_null()) {
    c.protocol = m.str("protocol");
    if (c.protocol != "LL" && c.protocol != "LL128" && c.protocol != "Simple") {
      m.fail("protocol", fmt::format("expected LL|LL128|Simple or null, got \"{}\"", c.protocol));
    }
  }
  m.finish();
}

// Rows: [size bytes, time µs or null, busbw GB/s], sizes ascending.
void read_rows(core::StrictObject& o, CollectiveCase& c) {
  const auto& rows = o.array("rows");
  if (rows.empty()) o.fail("rows", "expected [size_bytes, time_us|null, busbw_GBps] rows");
  for (const auto& r : rows) {
    if (!r.is_array() || r.size() != 3 || !r[0].is_number() || !(r[1].is_number() || r[1].is_null()) ||
        !r[2].is_number()) {
      o.fail("rows", "expected [size_bytes, time_us|null, busbw_GBps] rows");
    }
    CollectiveRow row{r[0].get<double>(), r[1].is_null() ? 0.0 : r[1].get<double>(), r[2].get<double>()};
    if (!(row.bytes >= 1) || !(row.busbw_GBps >= 0) || !(row.time_us >= 0) ||
        !(row.time_us > 0 || row.busbw_GBps > 0) || !std::isfinite(row.bytes) || !std::isfinite(row.time_us) ||
        !std::isfinite(row.busbw_GBps)) {
      o.fail("rows", "expected sizes >= 1 and a time or a bus bandwidth > 0");
    }
    if (!c.rows.empty() && row.bytes <= c.rows.back().bytes) o.fail("rows", "expected sizes in ascending order");
    // What nccl-tests prints is rounded: derive the missing one from the other.
    const double factor = busbw_factor(c.op, c.gpus);
    if (row.time_us == 0) row.time_us = row.bytes * factor / row.busbw_GBps / 1e3;
    if (row.busbw_GBps == 0) row.busbw_GBps = row.bytes * factor / row.time_us / 1e3;
    c.rows.push_back(row);
  }
}

}  // namespace

double busbw_factor(core::CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case core::CollectiveKind::AllReduce: return 2 * (n - 1) / n;
    case core::CollectiveKind::Broadcast: return 1;
    default: return (n - 1) / n;  // all-gather, reduce-scatter, all-to-all
  }
}

CollectiveCase collective_case_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  core::require_schema_version(o, 1);
  CollectiveCase c;
  c.file = file;
  c.id = o.name("id");
  core::StrictObject src = o.object("source");
  c.source = fmt::format("{} <{}>, {}", src.str("title"), src.str("url"), src.str("where"));
  src.finish();
  (void)o.str("hardware");
  c.fabric = o.name("fabric");
  if (!o.raw("nccl_version").is_null()) (void)o.str("nccl_version");
  c.measured_algorithm = o.str("measured_algorithm");
  (void)o.str("notes");
  const std::string placement = o.str("placement");
  if (placement != "out-of-place" && placement != "in-place") {
    o.fail("placement", fmt::format("expected out-of-place|in-place, got \"{}\"", placement));
  }
  const std::string use = o.str("use");
  if (use == "score") {
    c.use = CollectiveUse::Score;
  } else if (use == "figure") {
    c.use = CollectiveUse::Figure;
  } else if (use == "context") {
    c.use = CollectiveUse::Context;
  } else {
    o.fail("use", fmt::format("expected score|figure|context, got \"{}\"", use));
  }
  c.reason = o.str("reason");
  if (c.use != CollectiveUse::Score && c.reason.empty()) o.fail("reason", "expected why the case is not scored");

  read_model(o.object("model"), c);

  const std::string op = o.str("op");
  bool known = false;
  for (auto k : kKinds) {
    if (op == core::to_string(k)) {
      c.op = k;
      known = true;
    }
  }
  if (!known) {
    o.fail("op", fmt::format("expected all_gather|reduce_scatter|all_reduce|broadcast|all_to_all, got \"{}\"", op));
  }

  read_rows(o, c);
  o.finish();
  return c;
}

std::vector<CollectiveCase> load_collective_cases(const std::string& dir, const std::string& filter) {
  std::vector<CollectiveCase> out;
  for (const auto& file : case_files(dir, "collective cases")) {
    CollectiveCase c = collective_case_from_json(core::read_file(file), file);
    if (filter.empty() || c.id.find(filter) != std::string::npos) out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::optional<double> ScoredCollective::large_error() const { return mean_abs(rows, true); }
std::optional<double> ScoredCollective::small_error() const { return mean_abs(rows, false); }

ScoredCollective score_collective_case(const CollectiveCase& c) {
  topologies::ClusterOverlay overlay;
  overlay.nic_gbps = c.nic_gbps;
  const topologies::ResolvedCluster cluster = topologies::resolve_cluster(c.cluster, overlay);
  const int dpn = cluster.spec.devices_per_node;
  if (c.ranks_per_node > dpn || dpn % c.ranks_per_node != 0) {
    throw core::InputError(c.file, "model.ranks_per_node",
                           fmt::format("expected a divisor of {}'s {} devices per node", c.cluster, dpn));
  }
  // The group: the first ranks_per_node devices of each node.
  const int nodes = c.gpus / c.ranks_per_node;
  const cost::PerfModel pm(topologies::Topology(cluster.spec, nodes > 1 ? nodes * dpn : c.gpus));
  std::vector<int> ranks;
  for (int node = 0; node < nodes; ++node) {
    for (int k = 0; k < c.ranks_per_node; ++k) ranks.push_back(node * dpn + k);
  }
  const cost::GroupSpan g = pm.span(ranks);
  // nccl-tests times a loop of collectives: one host thread issues one NCCL
  // call per GPU it drives each iteration, so the loop runs no faster than that.
  const double host_us = c.gpus_per_process * cluster.spec.device.collective_launch_latency_us;
  ScoredCollective s;
  s.c = &c;
  for (const auto& row : c.rows) {
    if (c.op == core::CollectiveKind::AllToAll) {
      // Pairwise sends and receives, as NCCL runs it (no algorithm choice).
      const auto cost = pm.collective_cost(c.op, core::Bytes(static_cast<std::int64_t>(row.bytes)), g);
      ScoredRow r;
      r.measured = row;
      r.predicted_us = std::max(cost.seconds() * 1e6, host_us);
      r.predicted_busbw_GBps = row.bytes * busbw_factor(c.op, c.gpus) / r.predicted_us / 1e3;
      r.choice = "pairwise";
      s.rows.push_back(r);
      continue;
    }
    // NCCL's choice among what the run allowed.
    std::optional<cost::CollectiveChoice> best;
    for (const auto& cand : pm.nccl().candidates(c.op, row.bytes, g)) {
      const bool algo_ok = c.algorithms.empty() || std::find(c.algorithms.begin(), c.algorithms.end(),
                                                             cand.algorithm->name()) != c.algorithms.end();
      // A forced protocol runs even where hzp's tuner would not pick it.
      const bool proto_ok = c.protocol.empty() ? cand.preferred : c.protocol == cost::to_string(cand.protocol);
      if (algo_ok && proto_ok && (!best || cand.estimate_s < best->estimate_s)) best = cand;
    }
    if (!best) {
      throw core::InputError(c.file, "model.algorithms",
                             fmt::format("expected an algorithm hzp's model offers for this group and size ({})",
                                         static_cast<std::int64_t>(row.bytes)));
    }
    ScoredRow r;
    r.measured = row;
    r.predicted_us = std::max(best->seconds() * 1e6, host_us);
    r.predicted_busbw_GBps = row.bytes * busbw_factor(c.op, c.gpus) / r.predicted_us / 1e3;
    r.choice = fmt::format("{}/{}/{}", best->algorithm->name(), cost::to_string(best->protocol), best->channels);
    s.rows.push_back(r);
  }
  return s;
}

std::vector<FabricSummary> summarize_collectives(const std::vector<ScoredCollective>& scored) {
  struct Sum {
    int cases = 0, nl = 0, ns = 0;
    double el = 0, es = 0;
  };
  std::map<std::string, Sum> by;
  for (const auto& s : scored) {
    if (s.c->use != CollectiveUse::Score) continue;
    Sum& f = by[s.c->fabric];
    ++f.cases;
    for (const auto& r : s.rows) {
      (r.large() ? f.el : f.es) += std::abs(r.error());
      ++(r.large() ? f.nl : f.ns);
    }
  }
  std::vector<FabricSummary> out;
  for (const auto& [fabric, f] : by) {
    out.push_back(FabricSummary{fabric, f.cases, f.nl, f.ns, f.nl > 0 ? f.el / f.nl : 0, f.ns > 0 ? f.es / f.ns : 0});
  }
  return out;
}

std::string collectives_json(const std::vector<ScoredCollective>& scored) {
  nlohmann::ordered_json j;
  auto opt = [](std::optional<double> e) { return e ? nlohmann::ordered_json(*e) : nlohmann::ordered_json(); };
  j["cases"] = nlohmann::ordered_json::array();
  for (const auto& s : scored) {
    const char* use = s.c->use == CollectiveUse::Score    ? "score"
                      : s.c->use == CollectiveUse::Figure ? "figure"
                                                          : "context";
    j["cases"].push_back({{"id", s.c->id},
                          {"fabric", s.c->fabric},
                          {"gpus", s.c->gpus},
                          {"op", core::to_string(s.c->op)},
                          {"use", use},
                          {"busbw_error_from_1MiB", opt(s.large_error())},
                          {"time_error_below_1MiB", opt(s.small_error())}});
  }
  j["fabrics"] = nlohmann::ordered_json::array();
  for (const auto& f : summarize_collectives(scored)) {
    j["fabrics"].push_back({{"fabric", f.fabric},
                            {"cases", f.cases},
                            {"rows_from_1MiB", f.large_rows},
                            {"busbw_mean_abs_error", f.large_error},
                            {"rows_below_1MiB", f.small_rows},
                            {"time_mean_abs_error", f.small_error},
                            {"within", f.within()}});
  }
  return j.dump(2) + "\n";
}

std::string collectives_table(const std::vector<ScoredCollective>& scored, bool rows) {
  auto pct = [](std::optional<double> e) { return e ? fmt::format("{:.1f}%", 100 * *e) : std::string("-"); };
  auto use = [](CollectiveUse u) {
    return u == CollectiveUse::Score ? "score" : u == CollectiveUse::Figure ? "figure" : "context";
  };
  std::string out =
      "| case | fabric | GPUs | op | use | busbw |error| >= 1 MiB | time |error| < 1 MiB |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& s : scored) {
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", s.c->id, s.c->fabric, s.c->gpus,
                       core::to_string(s.c->op), use(s.c->use), pct(s.large_error()), pct(s.small_error()));
  }
  if (rows) {
    out +=
        "\n| case | size | measured us | predicted us | measured busbw | predicted busbw | error | hzp's choice |\n"
        "|---|---|---|---|---|---|---|---|\n";
    for (const auto& s : scored) {
      for (const auto& r : s.rows) {
        out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:+.1f}% | {} |\n", s.c->id,
                           static_cast<std::int64_t>(r.measured.bytes), r.measured.time_us, r.predicted_us,
                           r.measured.busbw_GBps, r.predicted_busbw_GBps, 100 * r.error(), r.choice);
      }
    }
  }
  out +=
      "\n| fabric | scored cases | rows >= 1 MiB | busbw mean |error| | rows < 1 MiB | time mean |error| | within "
      "15 % / 25 % |\n|---|---|---|---|---|---|---|\n";
  for (const auto& f : summarize_collectives(scored)) {
    out += fmt::format("| {} | {} | {} | {:.1f}% | {} | {:.1f}% | {} |\n", f.fabric, f.cases, f.large_rows,
                       100 * f.large_error, f.small_rows, 100 * f.small_error, f.within() ? "yes" : "NO");
  }
  for (const auto& s : scored) {
    if (s.c->use != CollectiveUse::Score) out += fmt::format("\n{} ({}): {}", s.c->id, use(s.c->use), s.c->reason);
  }
  return out + "\n";
}

}  // namespace hzp::validation
