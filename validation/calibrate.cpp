// Calibration fitting (see calibrate.hpp).
#include "validation/calibrate.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/units.hpp"
#include "cost/nccl.hpp"
#include "cost/perf_model.hpp"

namespace hzp::validation {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Medians of the values at each size, sizes ascending, efficiencies in (0, 1].
Points curve(const std::map<double, std::vector<double>>& by_size) {
  Points p;
  for (const auto& [size, values] : by_size) p.emplace_back(size, std::clamp(median(values), 1e-4, 1.0));
  return p;
}

struct LinkFit {
  double step_latency_us = 0;  // NCCL's Simple ring step on this link, as fitted
  double ring_efficiency = 0;
  double median_error = 0;
  std::size_t used = 0;
};

enum class Link { ScaleUp, ScaleOut };

// The cluster with one link's figures replaced.
topologies::ClusterSpec with_link(topologies::ClusterSpec c, Link link, double step_us, double efficiency) {
  if (link == Link::ScaleUp) {
    c.scale_up.step_latency_us = step_us;
    c.scale_up.ring_efficiency = efficiency;
  } else {
    c.scale_out.step_latency_us = step_us;
    c.scale_out.ring_efficiency = efficiency;
  }
  return c;
}

cost::GroupSpan measured_span(const traces::CollectiveResult& r) {
  const int per_node = std::max(1, r.ranks_per_node);
  return cost::GroupSpan{r.ranks, std::max(1, r.ranks / per_node), per_node, per_node, r.ranks > per_node ? 0 : -1};
}

// NCCL's model with two free figures per link: the Simple ring step latency
// (the other protocols' steps scale with it) and the Simple ring's
// efficiency. For each step latency on a log grid the efficiency is the
// median the largest ring messages imply once the model's latency is taken out;
// the pair with the least median |error| over every measurement wins.
LinkFit fit_link(const topologies::ClusterSpec& cluster, Link link, const std::vector<traces::CollectiveResult>& rs) {
  const auto link_class = link == Link::ScaleUp ? cluster.scale_up.link : topologies::LinkClass::Net;
  const double nccl_step =
      cost::nccl_tuning().step_latency_us[static_cast<std::size_t>(link_class)][static_cast<std::size_t>(
          cost::NcclAlgorithm::Ring)][static_cast<std::size_t>(cost::NcclProtocol::Simple)];
  const std::int64_t largest =
      std::max_element(rs.begin(), rs.end(), [](auto& a, auto& b) { return a.bytes < b.bytes; })->bytes;
  LinkFit best;
  best.median_error = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= 240; ++i) {
    const double step_us = nccl_step * std::pow(10.0, -1.0 + i / 120.0);  // NCCL's figure ÷10 to ×10
    std::vector<double> effs;
    for (const auto& r : rs) {
      if (r.bytes != largest) continue;
      const cost::NcclModel m(with_link(cluster, link, step_us, 1.0));
      const auto c = m.choose(r.collective, static_cast<double>(r.bytes), measured_span(r));
      if (c.algorithm->nccl() != cost::NcclAlgorithm::Ring) continue;  // NVLS, tree, PAT: not the ring's figure
      const double transfer = r.seconds - c.latency_s;
      if (transfer > 0) effs.push_back(std::clamp(c.transfer_s / transfer, 1e-3, 1.0));
    }
    if (effs.empty()) continue;
    const double eff = median(effs);
    const cost::NcclModel m(with_link(cluster, link, step_us, eff));
    std::vector<double> errors;
    for (const auto& r : rs) {
      const double model = m.choose(r.collective, static_cast<double>(r.bytes), measured_span(r)).seconds();
      errors.push_back(std::abs(model - r.seconds) / r.seconds);
    }
    const double err = median(errors);
    if (err < best.median_error) best = LinkFit{step_us, eff, err, rs.size()};
  }
  if (!std::isfinite(best.median_error)) best = LinkFit{nccl_step, 1.0, 1.0, rs.size()};
  return best;
}

nlohmann::ordered_json points_json(const Points& p) {
  auto a = nlohmann::ordered_json::array();
  for (const auto& [s, e] : p) a.push_back({s, std::round(e * 1e4) / 1e4});
  return a;
}

}  // namespace

CalibrationFit fit_calibration(const topologies::ClusterSpec& cluster,
                               const std::vector<std::pair<std::string, traces::BenchResults>>& inputs) {
  CalibrationFit fit;
  fit.device = cluster.device.name;
  std::map<double, std::vector<double>> gemm;
  std::vector<traces::CollectiveResult> up, rails;
  std::vector<double> slowdowns;
  std::size_t gemm_count = 0, skipped = 0;
  for (const auto& [file, r] : inputs) {
    if (r.device != cluster.device.name) {
      throw core::InputError(
          file, "device",
          fmt::format("expected results for the cluster's device \"{}\", got \"{}\"", cluster.device.name, r.device));
    }
    for (const auto& g : r.gemm) {
      auto it = cluster.device.peak_tflops.find(g.dtype);
      if (it == cluster.device.peak_tflops.end() || it->second <= 0) {
        throw core::InputError(file, "results.dtype",
                               fmt::format("expected a dtype {} has a peak for", cluster.device.name));
      }
      const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
                           static_cast<double>(g.batch);
      const double size = std::cbrt(static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k));
      double eff = flops / g.seconds / core::FlopRate::from_TFLOPs(it->second).flops_per_s();
      if (const auto& tiling = cluster.device.gemm_tiling) {
        // The curve holds squares: a shape's measured rate is brought to the
        // square of its size, as the cost model takes it back (PerfModel::gemm_fill).
        eff *= cost::PerfModel::gemm_fill(*tiling, size, size) /
               cost::PerfModel::gemm_fill(*tiling, static_cast<double>(g.m), static_cast<double>(g.n),
                                          static_cast<double>(g.batch));
      }
      gemm[std::round(size)].push_back(eff);
      ++gemm_count;
    }
    for (const auto& c : r.collectives) {
      if (c.collective == core::CollectiveKind::AllToAll) {
        ++skipped;  // pairwise: not a ring, not fitted
      } else if (c.ranks_per_node == c.ranks && c.ranks <= cluster.scale_up.domain_devices) {
        up.push_back(c);
      } else if (c.ranks_per_node == 1) {
        rails.push_back(c);
      } else {
        ++skipped;  // mixed groups check the model; they do not fit it
      }
    }
    for (const auto& o : r.overlap) slowdowns.push_back(o.overlapped_seconds / o.alone_seconds);
  }
  if (!gemm.empty()) {
    fit.gemm_efficiency = curve(gemm);
    fit.notes.push_back(fmt::format("GEMM efficiency: {} shapes at {} sizes", gemm_count, gemm.size()));
  }
  // One line per link: what was fitted and how well.
  auto link_note = [](const char* what, const char* step, const LinkFit& f) {
    return fmt::format(
        "{}: {} ring collectives, NCCL's Simple {} step {:.2f} us, ring efficiency {:.3f}, median "
        "|error| {:.1f}%",
        what, f.used, step, f.step_latency_us, f.ring_efficiency, 100 * f.median_error);
  };
  if (!up.empty()) {
    const LinkFit f = fit_link(cluster, Link::ScaleUp, up);
    fit.scale_up_step_latency_us = f.step_latency_us;
    fit.scale_up_ring_efficiency = f.ring_efficiency;
    fit.notes.push_back(link_note("scale-up", "ring", f));
  }
  if (!rails.empty()) {
    const LinkFit f = fit_link(cluster, Link::ScaleOut, rails);
    fit.net_step_latency_us = f.step_latency_us;
    fit.scale_out_ring_efficiency = f.ring_efficiency;
    fit.notes.push_back(link_note("scale-out (rail groups)", "NET", f));
  }
  if (!slowdowns.empty()) {
    fit.comm_compute_slowdown = std::max(1.0, median(slowdowns));
    fit.notes.push_back(fmt::format("compute slowdown under collectives: median of {} pairs", slowdowns.size()));
  }
  if (skipped > 0) fit.notes.push_back(fmt::format("{} collectives not fitted (all-to-all or mixed groups)", skipped));
  if (!fit.gemm_efficiency && !fit.scale_up_step_latency_us && !fit.net_step_latency_us && !fit.comm_compute_slowdown) {
    throw core::InputError(inputs.empty() ? "calibrate" : inputs.front().first, "results",
                           "expected measurements to fit (GEMMs, ring collectives or overlap pairs)");
  }
  return fit;
}

std::string calibration_json(const CalibrationFit& fit, const std::string& source) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["device"] = fit.device;
  std::string text = source;
  for (const auto& n : fit.notes) text += " " + n + ".";
  j["source"] = text;
  j["device_profile"] = nlohmann::ordered_json::object();
  if (fit.gemm_efficiency) j["device_profile"]["gemm_efficiency"] = points_json(*fit.gemm_efficiency);
  if (fit.comm_compute_slowdown) {
    j["device_profile"]["comm_compute_slowdown"] = std::round(*fit.comm_compute_slowdown * 1e4) / 1e4;
  }
  if (fit.scale_up_step_latency_us) {
    j["scale_up"] = {{"step_latency_us", std::round(*fit.scale_up_step_latency_us * 1e3) / 1e3},
                     {"ring_efficiency", std::round(*fit.scale_up_ring_efficiency * 1e4) / 1e4}};
  }
  if (fit.net_step_latency_us) {
    j["scale_out"] = {{"step_latency_us", std::round(*fit.net_step_latency_us * 1e3) / 1e3},
                      {"ring_efficiency", std::round(*fit.scale_out_ring_efficiency * 1e4) / 1e4}};
  }
  return j.dump(2) + "\n";
}

}  // namespace hzp::validation
