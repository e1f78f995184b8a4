// ClusterSpec parsing and the cluster catalog (see cluster_spec.hpp).
#include "topologies/cluster_spec.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "topologies/catalog.hpp"

namespace hzp::topologies {
namespace {

using core::StrictObject;

// What a power limit must be: the rated limit or a listed cap.
std::string power_limits_expected(const DeviceProfile::Power& w) {
  std::string caps;
  for (const auto& c : w.caps) caps += fmt::format("{}{:g} W", caps.empty() ? "" : ", ", c.limit_W);
  return fmt::format("expected the rated {:g} W or a cap whose clock was measured ({})", w.rated_W,
                     caps.empty() ? "none listed" : caps);
}

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

// The device's power section; the limit it runs under sets the tensor clock.
DeviceProfile::GemmTiling read_gemm_tiling(StrictObject t) {
  DeviceProfile::GemmTiling g;
  g.sms = static_cast<int>(t.integer("sms", 1, 1024));
  const auto& tiles = t.array("tiles");
  if (tiles.empty() || tiles.size() > 8) t.fail("tiles", "expected 1 to 8 [m, n, relative rate] tiles");
  for (const auto& e : tiles) {
    auto whole = [](const nlohmann::json& v) {
      return v.is_number_integer() && v.get<std::int64_t>() >= 8 && v.get<std::int64_t>() <= 1024;
    };
    if (!e.is_array() || e.size() != 3 || !whole(e[0]) || !whole(e[1]) || !e[2].is_number() ||
        !(e[2].get<double>() > 0) || e[2].get<double>() > 1) {
      t.fail("tiles", "expected [m, n, relative rate] tiles: m and n integers in [8, 1024], the rate in (0, 1]");
    }
    g.tiles.push_back(
        {static_cast<int>(e[0].get<std::int64_t>()), static_cast<int>(e[1].get<std::int64_t>()), e[2].get<double>()});
  }
  if (t.str("source").empty()) t.fail("source", "expected where the tiles and their rates come from");
  t.finish();
  return g;
}

void read_power(StrictObject p, DeviceProfile& dev) {
  DeviceProfile::Power w;
  w.rated_W = p.number("rated_W", 1, 1e5);
  w.compute_clock_MHz = p.number("compute_clock_MHz", 1, 1e5);
  if (p.has("sustained_fraction")) w.sustained_fraction = p.number("sustained_fraction", 0, 1, true);
  const std::size_t caps = p.array("caps").size();
  for (std::size_t i = 0; i < caps; ++i) {
    StrictObject c = p.element("caps", i);
    DeviceProfile::PowerCap cap{c.number("limit_W", 1, 1e5), c.number("tensor_clock_MHz", 1, 1e5)};
    if (cap.limit_W >= w.rated_W) c.fail("limit_W", fmt::format("expected a cap below the rated {:g} W", w.rated_W));
    if (cap.tensor_clock_MHz > w.compute_clock_MHz) {
      c.fail("tensor_clock_MHz", fmt::format("expected at most the compute clock, {:g} MHz", w.compute_clock_MHz));
    }
    if (c.str("source").empty()) c.fail("source", "expected where the clock under this cap was measured");
    c.finish();
    for (const auto& other : w.caps) {
      if (other.limit_W == cap.limit_W) {
        c.fail("limit_W", fmt::format("expected each cap once ({:g} W is listed twice)", cap.limit_W));
      }
    }
    w.caps.push_back(cap);
  }
  w.limit_W = p.has("limit_W") ? p.number("limit_W", 1, 1e5) : w.rated_W;
  dev.tensor_clock_scale = w.sustained_fraction;
  if (w.limit_W != w.rated_W) {
    auto it = std::find_if(w.caps.begin(), w.caps.end(), [&](const auto& c) { return c.limit_W == w.limit_W; });
    if (it == w.caps.end()) p.fail("limit_W", power_limits_expected(w));
    dev.tensor_clock_scale *= it->tensor_clock_MHz / w.compute_clock_MHz;
  }
  p.finish();
  dev.power = std::move(w);
}

DeviceProfile read_device(StrictObject d) {
  DeviceProfile dev;
  dev.name = d.name("name");
  dev.compute_capability = d.number("compute_capability", 1, 20);
  StrictObject peak = d.object("peak_tflops");
  // bf16 is required; a dtype the device lacks (fp8 on A100) is null.
  dev.peak_tflops[core::Dtype::Bf16] = peak.number("bf16", 1e-3, 1e6);
  for (auto [dt, key] :
       {std::pair{core::Dtype::Fp16, "fp16"}, {core::Dtype::Fp8, "fp8"}, {core::Dtype::Fp32, "fp32"}}) {
    if (!peak.raw(key).is_null()) dev.peak_tflops[dt] = peak.number(key, 1e-3, 1e6);
  }
  peak.finish();
  dev.hbm_GiB = d.number("hbm_GiB", 1e-3, 1e5);
  dev.hbm_GBps = d.number("hbm_GBps", 1e-3, 1e6);
  dev.launch_latency_us = d.number("launch_latency_us", 0, 1e4);
  dev.collective_launch_latency_us = d.number("collective_launch_latency_us", 0, 1e4);
  dev.gemm = read_curve(d, "gemm_efficiency", 1.0);
  if (d.has("gemm_efficiency_fp8")) dev.gemm_fp8 = read_curve(d, "gemm_efficiency_fp8", 1.0);
  if (d.has("gemm_tiling")) dev.gemm_tiling = read_gemm_tiling(d.object("gemm_tiling"));
  dev.attention_efficiency = d.number("attention_efficiency", 1e-3, 1);
  if (d.has("attention_kernels")) {
    StrictObject k = d.object("attention_kernels");
    for (const auto& [family, name] : core::kAttentionKernels) {
      const std::string key(name);
      if (!k.has(key)) continue;
      StrictObject f = k.object(key);
      dev.attention_kernels[family] = {f.number("forward", 1e-3, 1), f.number("backward", 1e-3, 1)};
      f.finish();
    }
    k.finish();
  }
  dev.hbm_efficiency = d.number("hbm_efficiency", 1e-3, 1);
  if (d.has("kernel_tail_us")) dev.kernel_tail_us = d.number("kernel_tail_us", 0, 1e3);
  if (d.has("comm_compute_slowdown")) dev.comm_compute_slowdown = d.number("comm_compute_slowdown", 1, 10);
  if (d.has("power")) read_power(d.object("power"), dev);
  d.finish();

  return dev;
}

ScaleUp read_scale_up(StrictObject up, int devices_per_node) {
  ScaleUp u;
  u.kind = core::choose(up, "kind", kScaleUpKinds);
  u.domain_devices = static_cast<int>(up.integer("domain_devices", 1, devices_per_node));
  if (devices_per_node % u.domain_devices != 0) {
    up.fail("domain_devices", fmt::format("expected a divisor of node.devices ({})", devices_per_node));
  }
  u.bw_GBps = up.number("bw_GBps", 1e-3, 1e6);
  u.link = core::choose(up, "link", kScaleUpLinks);
  u.ring_efficiency = up.number("ring_efficiency", 1e-3, 1);
  // NVLink SHARP reduces in the switch: all-reduce bus bandwidth may exceed the link rate.
  if (up.has("nvls_efficiency")) {
    const auto nvls = up.number_or_null("nvls_efficiency", 1e-3, 1.5);
    if (nvls && u.kind != ScaleUpKind::NvSwitch) up.fail("nvls_efficiency", "expected null: only an NVSwitch has NVLS");
    if (nvls) u.nvls_efficiency = *nvls;
  }
  if (up.has("step_latency_us")) {
    if (const auto l = up.number_or_null("step_latency_us", 0, 1e4)) u.step_latency_us = *l;
  }
  up.finish();
  return u;
}

ScaleOut read_scale_out(StrictObject out) {
  ScaleOut so;
  so.nics_per_node = static_cast<int>(out.integer("nics_per_node", 1, 1 << 12));
  so.nic_Gbps = out.number("nic_Gbps", 1e-3, 1e7);
  so.rail_optimized = out.boolean("rail_optimized");
  so.ring_efficiency = out.number("ring_efficiency", 1e-3, 1);
  if (out.has("step_latency_us")) {
    if (const auto l = out.number_or_null("step_latency_us", 0, 1e4)) so.step_latency_us = *l;
  }
  if (out.has("step_latency_by_protocol_us")) {
    if (so.step_latency_us) {
      out.fail("step_latency_by_protocol_us", "expected it or step_latency_us, not both");
    }
    StrictObject by = out.object("step_latency_by_protocol_us");
    so.step_latency_by_protocol_us = {by.number("LL", 0, 1e4), by.number("LL128", 0, 1e4), by.number("Simple", 0, 1e4)};
    by.finish();
  }
  if (out.has("plugin_latency_us")) so.plugin_latency_us = out.number("plugin_latency_us", 0, 1e4);
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
    so.tiers.push_back(tier);
  }
  out.finish();
  return so;
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

double EfficiencyCurve::max() const {
  double m = points.empty() ? 1.0 : 0.0;
  for (const auto& p : points) m = std::max(m, p.second);
  return m;
}

ClusterSpec cluster_from_json(const std::string& text, const std::string& file) {
  nlohmann::json j = core::parse_json(text, file);
  StrictObject o(j, file);
  if (o.has("schema_version") && o.raw("schema_version") == 1) {
    o.fail("schema_version",
           "expected 2, got 1: version 2 costs collectives as NCCL does and replaced scale_up.latency_us and "
           "efficiency by link and ring_efficiency (nvls_efficiency where the switch has NVLS), and "
           "scale_out.nic_latency_us and efficiency by ring_efficiency (see docs/REFERENCE.md)");
  }
  core::require_schema_version(o, kClusterSchemaVersion);
  ClusterSpec c;
  c.name = o.name("name");
  c.source = o.str("source");

  c.device = read_device(o.object("device"));

  StrictObject n = o.object("node");
  c.devices_per_node = static_cast<int>(n.integer("devices", 1, 1 << 12));
  c.scale_up = read_scale_up(n.object("scale_up"), c.devices_per_node);
  // Optional (files written before offload stay valid); absent or null: no offload.
  if (n.has("host")) {
    if (auto h = n.object_or_null("host")) {
      c.host = HostSide{h->number("link_GBps", 1e-3, 1e6), h->number("memory_GiB", 1e-3, 1e9),
                        h->number("memory_GBps", 1e-3, 1e7)};
      h->finish();
      c.device.host_memory_GiB_per_device = c.host->memory_GiB / c.devices_per_node;
    }
  }
  n.finish();

  c.scale_out = read_scale_out(o.object("scale_out"));

  c.price_per_device_hour = o.number_or_null("price_per_device_hour", 0, 1e6);
  o.finish();
  return c;
}

std::vector<std::string> cluster_catalog_names() { return core::catalog_names(cluster_catalog()); }

std::pair<std::string, std::string> cluster_text(const std::string& name_or_path) {
  return core::catalog_text(cluster_catalog(), name_or_path, "cluster", "topologies/catalog");
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  auto [text, file] = cluster_text(name_or_path);
  return cluster_from_json(text, file);
}

}  // namespace hzp::topologies
