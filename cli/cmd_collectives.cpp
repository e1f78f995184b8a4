// `hzp collectives`: what hzp's collective model predicts for one collective
// over a range of sizes and a group shape, printed in nccl-tests' columns so
// it lies next to a real nccl-tests log (plus the algorithm, protocol and
// channels NCCL's tuner would pick).
#include <fmt/format.h>

#include <iostream>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/option_flags.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "cost/perf_model.hpp"
#include "topologies/overlay.hpp"
#include "validation/collective_cases.hpp"

namespace hzp::cli {
namespace {

struct CollectivesArgs {
  std::string cluster = "dgx-h100";
  int gpus = 16;
  std::string group = "all";
  std::string op = "all_reduce";
  std::string min_bytes = "8";
  std::string max_bytes = "8G";
  int factor = 2;
  cli::OptionFlags overlay_flags;  // calibration and network what-ifs, from the scenario option table
};

std::int64_t bytes_arg(const std::string& text, const char* flag) {
  const auto n = core::parse_token_count(text);
  if (!n)
    throw core::InputError("command line", flag, fmt::format("expected a byte count like 8, 64K, 1G; got '{}'", text));
  return *n;
}

// The group's ranks on a cluster of `gpus`: every device, one scale-up
// domain, the first N, or one rank per node (a rail).
std::vector<int> group_ranks(const topologies::Topology& topo, const std::string& group) {
  const int gpus = topo.devices();
  std::vector<int> ranks;
  if (group == "all") {
    for (int r = 0; r < gpus; ++r) ranks.push_back(r);
  } else if (group == "node") {
    for (int r = 0; r < std::min(gpus, topo.spec().scale_up.domain_devices); ++r) ranks.push_back(r);
  } else if (group == "rail") {
    for (int r = 0; r < gpus; r += topo.spec().devices_per_node) ranks.push_back(r);
  } else {
    const auto n = core::parse_token_count(group);
    if (!n || *n < 2 || *n > gpus) {
      throw core::InputError("command line", "--group",
                             fmt::format("expected all, node, rail or 2 to {} ranks, got '{}'", gpus, group));
    }
    for (int r = 0; r < *n; ++r) ranks.push_back(r);
  }
  if (ranks.size() < 2) {
    throw core::InputError("command line", "--group",
                           fmt::format("expected a group of 2 or more ranks, got {}", ranks.size()));
  }
  return ranks;
}

int cmd_collectives(const CollectivesArgs& a) {
  // The what-ifs through the same option table as every command (one range each).
  std::vector<std::pair<std::string, nlohmann::json>> values;
  if (std::vector<core::Problem> problems = a.overlay_flags.values(values); !problems.empty()) {
    throw core::ProblemError(std::move(problems));
  }
  explore::Scenario sc;
  cli::apply_values(values, sc);
  const topologies::ClusterOverlay overlay = sc.overlay;
  core::CollectiveKind kind = core::CollectiveKind::AllReduce;
  bool known = false;
  for (auto k : {core::CollectiveKind::AllGather, core::CollectiveKind::ReduceScatter, core::CollectiveKind::AllReduce,
                 core::CollectiveKind::Broadcast, core::CollectiveKind::AllToAll}) {
    if (a.op == core::to_string(k)) {
      kind = k;
      known = true;
    }
  }
  if (!known) {
    throw core::InputError(
        "command line", "--op",
        fmt::format("expected all_gather, reduce_scatter, all_reduce, broadcast or all_to_all, got '{}'", a.op));
  }
  const std::int64_t lo = bytes_arg(a.min_bytes, "--min-bytes"), hi = bytes_arg(a.max_bytes, "--max-bytes");
  if (hi < lo) throw core::InputError("command line", "--max-bytes", "expected at least --min-bytes");
  const topologies::ResolvedCluster cluster = topologies::resolve_cluster(a.cluster, overlay);
  const cost::PerfModel pm(topologies::Topology(cluster.spec, a.gpus));
  const std::vector<int> ranks = group_ranks(pm.topology(), a.group);
  const cost::GroupSpan g = pm.span(ranks);
  const int n = static_cast<int>(ranks.size());
  const double factor = validation::busbw_factor(kind, n);

  std::cout << fmt::format(
      "# hzp collectives: {} over {} ranks ({} scale-up domain(s), {} to {} ranks each) of {} x {} ({})\n"
      "# predicted by NCCL {}'s cost model with {}'s link figures; out-of-place, float; no host launch cost\n"
      "{}"
      "#\n"
      "#{:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8}  {}\n"
      "#{:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8}\n",
      a.op, n, g.domains, g.min_ranks_per_domain, g.max_ranks_per_domain, a.gpus, cluster.spec.name, cluster.file,
      cost::nccl_tuning().version, cluster.spec.name,
      overlay.empty() ? std::string() : fmt::format("# what-if: {}\n", overlay.describe()), "size", "count", "type",
      "redop", "root", "time", "algbw", "busbw", "algorithm/protocol/channels", "(B)", "(elements)", "", "", "", "(us)",
      "(GB/s)", "(GB/s)");
  const bool reduces = kind == core::CollectiveKind::AllReduce || kind == core::CollectiveKind::ReduceScatter;
  for (std::int64_t bytes = lo; bytes <= hi; bytes *= a.factor) {
    const cost::CollectiveCost c = pm.collective_cost(kind, core::Bytes(bytes), g);
    const double us = c.seconds() * 1e6;
    const double algbw = us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0;
    std::cout << fmt::format(" {:>12} {:>12} {:>8} {:>6} {:>6} {:>10.2f} {:>8.2f} {:>8.2f}  {}/{}/{}\n", bytes,
                             bytes / 4, "float", reduces ? "sum" : "none", -1, us, algbw, algbw * factor, c.algorithm,
                             cost::to_string(c.protocol), c.channels);
    if (bytes > hi / a.factor) break;
  }
  return 0;
}

int run_collectives(CollectivesArgs& a) { return cmd_collectives(a); }

}  // namespace

void add_collectives_command(CLI::App& app, Commands& out) {
  auto* c = app.add_subcommand(
      "collectives", "predicted time and bus bandwidth of a collective over a size range (nccl-tests columns)");
  auto cmd = std::make_unique<SimpleCommand<CollectivesArgs>>(c, run_collectives);
  CollectivesArgs& a = cmd->args;
  c->add_option("--cluster", a.cluster, "catalog name or .json")->capture_default_str();
  c->add_option("--gpus", a.gpus, "devices in the cluster")->capture_default_str()->check(integer_in(1, 1 << 20));
  c->add_option("--group", a.group, "all, node (one scale-up domain), rail (one rank per node) or a rank count")
      ->capture_default_str();
  c->add_option("--op", a.op, "all_gather, reduce_scatter, all_reduce, broadcast or all_to_all")->capture_default_str();
  c->add_option("-b,--min-bytes", a.min_bytes, "smallest size (nccl-tests -b; K, M, G are powers of 1024)")
      ->capture_default_str();
  c->add_option("-e,--max-bytes", a.max_bytes, "largest size (nccl-tests -e)")->capture_default_str();
  c->add_option("-f,--factor", a.factor, "size multiplier (nccl-tests -f)")
      ->capture_default_str()
      ->check(integer_in(2, 1024));
  // Every what-if, as every command takes them (the power limit changes no
  // collective in hzp's model: taken and echoed, for one grammar).
  a.overlay_flags.add(c, scenario_specs(false, {"calibration", "nic_gbps", "oversubscription", "power_limit"}),
                      option_defaults());
  out.push_back(std::move(cmd));
}

}  // namespace hzp::cli
