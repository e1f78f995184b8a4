// Calibration fitting (see calibrate.hpp).
#include "validation/calibrate.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/units.hpp"

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

// Ring steps (latency terms) and the bytes each rank moves per byte of buffer
// (nccl-tests' bus-bandwidth factor) of a ring collective over P ranks.
std::pair<double, double> ring_terms(core::CollectiveKind kind, int P) {
  const double steps = P - 1, share = static_cast<double>(P - 1) / P;
  switch (kind) {
    case core::CollectiveKind::AllReduce: return {2 * steps, 2 * share};
    case core::CollectiveKind::Broadcast: return {steps, 1.0};
    default: return {steps, share};  // all-gather, reduce-scatter (all-to-all: pairwise, not fitted here)
  }
}

struct LinkFit {
  double latency_us = 0;
  Points efficiency;
  double median_error = 0;
  std::size_t used = 0;
};

// t = steps·ℓ + factor·N / (bw·eff(N)): ℓ from the smallest messages (where
// the transfer term is least), then eff(N) from the rest of each time.
LinkFit fit_link(const std::vector<traces::CollectiveResult>& rs, core::Bandwidth bw) {
  LinkFit f;
  std::vector<double> per_step;
  const std::int64_t smallest =
      std::min_element(rs.begin(), rs.end(), [](auto& a, auto& b) { return a.bytes < b.bytes; })->bytes;
  for (const auto& r : rs) {
    if (r.bytes == smallest) per_step.push_back(r.seconds / ring_terms(r.collective, r.ranks).first);
  }
  const double latency_s = *std::min_element(per_step.begin(), per_step.end());
  f.latency_us = core::seconds_to_us(latency_s);
  std::map<double, std::vector<double>> eff;
  for (const auto& r : rs) {
    const auto [steps, factor] = ring_terms(r.collective, r.ranks);
    const double transfer = r.seconds - steps * latency_s;
    if (transfer <= 0) continue;  // latency-bound: says nothing about bandwidth
    eff[static_cast<double>(r.bytes)].push_back(factor * static_cast<double>(r.bytes) / (transfer * bw.bytes_per_s()));
  }
  f.efficiency = curve(eff);
  topologies::EfficiencyCurve c{f.efficiency};
  std::vector<double> errors;
  for (const auto& r : rs) {
    const auto [steps, factor] = ring_terms(r.collective, r.ranks);
    const double n = static_cast<double>(r.bytes);
    const double model = steps * latency_s + core::transfer_seconds(factor * n, bw * c.at(n));
    errors.push_back(std::abs(model - r.seconds) / r.seconds);
  }
  f.median_error = median(errors);
  f.used = rs.size();
  return f;
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
      gemm[std::round(size)].push_back(flops / g.seconds / core::FlopRate::from_TFLOPs(it->second).flops_per_s());
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
  if (!up.empty()) {
    const LinkFit f = fit_link(up, cluster.scale_up_bandwidth());
    fit.scale_up_latency_us = f.latency_us;
    fit.scale_up_efficiency = f.efficiency;
    fit.notes.push_back(fmt::format("scale-up: {} collectives, {:.2f} us per ring step, median |error| {:.1f}%", f.used,
                                    f.latency_us, 100 * f.median_error));
  }
  if (!rails.empty()) {
    const LinkFit f = fit_link(rails, cluster.nic_bandwidth_per_device());
    const double leaf_hop = cluster.scale_out.tiers.empty() ? 0.0 : cluster.scale_out.tiers.front().hop_latency_us;
    fit.nic_latency_us = std::max(0.0, f.latency_us - leaf_hop);
    fit.scale_out_efficiency = f.efficiency;
    fit.notes.push_back(
        fmt::format("scale-out (rail groups): {} collectives, {:.2f} us per ring step (NIC {:.2f} + leaf hop {:.2f}), "
                    "median |error| {:.1f}%",
                    f.used, f.latency_us, *fit.nic_latency_us, leaf_hop, 100 * f.median_error));
  }
  if (!slowdowns.empty()) {
    fit.comm_compute_slowdown = std::max(1.0, median(slowdowns));
    fit.notes.push_back(fmt::format("compute slowdown under collectives: median of {} pairs", slowdowns.size()));
  }
  if (skipped > 0) fit.notes.push_back(fmt::format("{} collectives not fitted (all-to-all or mixed groups)", skipped));
  if (!fit.gemm_efficiency && !fit.scale_up_latency_us && !fit.nic_latency_us && !fit.comm_compute_slowdown) {
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
  if (fit.scale_up_latency_us) {
    j["scale_up"] = {{"latency_us", std::round(*fit.scale_up_latency_us * 1e3) / 1e3},
                     {"efficiency", points_json(*fit.scale_up_efficiency)}};
  }
  if (fit.nic_latency_us) {
    j["scale_out"] = {{"nic_latency_us", std::round(*fit.nic_latency_us * 1e3) / 1e3},
                      {"efficiency", points_json(*fit.scale_out_efficiency)}};
  }
  return j.dump(2) + "\n";
}

}  // namespace hzp::validation
