// ClusterSpec parsing and the cluster catalog (see cluster_spec.hpp).
#include "topologies/cluster_spec.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "topologies/catalog.hpp"

namespace hzp::topologies {
namespace {

using core::StrictObject;

EfficiencyCurve read_curve(StrictObject& o, const std::string& key, double max_eff) {
  const auto& a = o.array(key);
  EfficiencyCurve c;
  for (const auto& p : a) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      o.fail(key, "expected an array of [size, efficiency] pairs");
    }
    double x = p[0].get<double>(), e = p[1].get<double>();
    if (!(x > 0) || !(e >= 1e-3) || e > max_eff || !std::isfinite(x)) {
      o.fail(key, fmt::format("expected sizes > 0 and efficiencies in [0.001, {}]", max_eff));
    }
    if (!c.points.empty() && x <= c.points.back().first) o.fail(key, "expected sizes in ascending order");
    c.points.emplace_back(x, e);
  }
  if (c.points.empty() || c.points.size() > 256) o.fail(key, "expected 1 to 256 [size, efficiency] pairs");
  return c;
}

}  // namespace

double EfficiencyCurve::at(double size) const {
  if (points.empty()) return 1.0;
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second;
  auto hi = std::upper_bound(points.begin(), points.end(), size, [](double s, const auto& p) { return s < p.first; });
  auto lo = hi - 1;
  double t = (std::log(size) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return lo->second + t * (hi->second - lo->second);
}

ClusterSpec cluster_from_json(const std::string& text, const std::string& file) {
  nlohmann::json j = core::parse_json(text, file);
  StrictObject o(j, file);
  core::require_schema_version(o, kClusterSchemaVersion);
  ClusterSpec c;
  c.name = o.name("name");
  c.source = o.str("source");

  StrictObject d = o.object("device");
  c.device.name = d.name("name");
  StrictObject peak = d.object("peak_tflops");
  // bf16 is required; a dtype the device lacks (fp8 on A100) is null.
  c.device.peak_tflops[core::Dtype::Bf16] = peak.number("bf16", 1e-3, 1e6);
  for (auto [dt, key] :
       {std::pair{core::Dtype::Fp16, "fp16"}, {core::Dtype::Fp8, "fp8"}, {core::Dtype::Fp32, "fp32"}}) {
    if (!peak.raw(key).is_null()) c.device.peak_tflops[dt] = peak.number(key, 1e-3, 1e6);
  }
  peak.finish();
  c.device.hbm_GiB = d.number("hbm_GiB", 1e-3, 1e5);
  c.device.hbm_GBps = d.number("hbm_GBps", 1e-3, 1e6);
  c.device.launch_latency_us = d.number("launch_latency_us", 0, 1e4);
  c.device.collective_launch_latency_us = d.number("collective_launch_latency_us", 0, 1e4);
  c.device.gemm = read_curve(d, "gemm_efficiency", 1.0);
  c.device.attention_efficiency = d.number("attention_efficiency", 1e-3, 1);
  c.device.hbm_efficiency = d.number("hbm_efficiency", 1e-3, 1);
  if (d.has("comm_compute_slowdown")) c.device.comm_compute_slowdown = d.number("comm_compute_slowdown", 1, 10);
  d.finish();

  StrictObject n = o.object("node");
  c.devices_per_node = static_cast<int>(n.integer("devices", 1, 1 << 12));
  StrictObject up = n.object("scale_up");
  std::string kind = up.str("kind");
  if (kind == "nvswitch") {
    c.scale_up.kind = ScaleUpKind::NvSwitch;
  } else if (kind == "full_mesh") {
    c.scale_up.kind = ScaleUpKind::FullMesh;
  } else {
    up.fail("kind", fmt::format("expected nvswitch|full_mesh, got \"{}\"", kind));
  }
  c.scale_up.domain_devices = static_cast<int>(up.integer("domain_devices", 1, c.devices_per_node));
  if (c.devices_per_node % c.scale_up.domain_devices != 0) {
    up.fail("domain_devices", fmt::format("expected a divisor of node.devices ({})", c.devices_per_node));
  }
  c.scale_up.bw_GBps = up.number("bw_GBps", 1e-3, 1e6);
  c.scale_up.latency_us = up.number("latency_us", 0, 1e4);
  // Efficiencies above 1 are allowed up to 1.1: NVLink SHARP (NVLS) reduces in
  // the switch, so all-reduce bus bandwidth can exceed the link rate.
  c.scale_up.efficiency = read_curve(up, "efficiency", 1.1);
  up.finish();
  n.finish();

  StrictObject out = o.object("scale_out");
  c.scale_out.nics_per_node = static_cast<int>(out.integer("nics_per_node", 1, 1 << 12));
  c.scale_out.nic_Gbps = out.number("nic_Gbps", 1e-3, 1e7);
  c.scale_out.rail_optimized = out.boolean("rail_optimized");
  c.scale_out.nic_latency_us = out.number("nic_latency_us", 0, 1e4);
  const auto& tiers = out.array("tiers");
  if (tiers.empty() || tiers.size() > 6) out.fail("tiers", "expected one to six fabric tiers");
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    StrictObject t = out.element("tiers", i);
    FabricTier tier;
    tier.name = t.str("name");
    tier.radix = static_cast<int>(t.integer("radix", 2, 1 << 12));
    tier.oversubscription = t.number("oversubscription", 1, 64);
    tier.hop_latency_us = t.number("hop_latency_us", 0, 1e4);
    t.finish();
    c.scale_out.tiers.push_back(tier);
  }
  c.scale_out.efficiency = read_curve(out, "efficiency", 1.0);
  out.finish();

  const auto& price = o.raw("price_per_device_hour");
  if (!price.is_null()) c.price_per_device_hour = o.number("price_per_device_hour", 0, 1e6);
  o.finish();
  return c;
}

std::vector<std::string> cluster_catalog_names() {
  std::vector<std::string> names;
  for (const auto& e : cluster_catalog()) names.emplace_back(e.name);
  return names;
}

std::pair<std::string, std::string> cluster_text(const std::string& name_or_path) {
  if (name_or_path.size() > 5 && name_or_path.ends_with(".json")) return {core::read_file(name_or_path), name_or_path};
  for (const auto& e : cluster_catalog()) {
    if (e.name == name_or_path) return {std::string(e.json), fmt::format("topologies/catalog/{}.json", e.name)};
  }
  std::string known;
  for (const auto& n : cluster_catalog_names()) known += (known.empty() ? "" : ", ") + n;
  throw core::InputError(
      "command line", "--cluster",
      fmt::format("unknown cluster '{}'; expected a catalog name ({}) or a .json file", name_or_path, known));
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  auto [text, file] = cluster_text(name_or_path);
  return cluster_from_json(text, file);
}

}  // namespace hzp::topologies
