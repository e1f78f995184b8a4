// Calibration and what-if overlays on a cluster file (see overlay.hpp).
#include "topologies/overlay.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::topologies {
namespace {

std::string apply_calibration(nlohmann::ordered_json& j, const std::string& path) {
  const nlohmann::json cal = core::read_json_file(path);
  core::StrictObject o(cal, path);
  core::require_schema_version(o, 1);
  const std::string device = o.str("device");
  if (device != j["device"].value("name", "")) {
    o.fail("device",
           fmt::format("expected the cluster's device \"{}\", got \"{}\"", j["device"].value("name", ""), device));
  }
  const std::string stack = o.has("stack") ? o.name("stack") : "";
  if (o.str("source").empty()) o.fail("source", "expected how the calibration was obtained");
  // Each section overlays the cluster file's object of the same meaning; only
  // keys that object has.
  auto overlay = [&](const std::string& section, nlohmann::ordered_json& target, bool required) {
    if (!required && !o.has(section)) return;
    const nlohmann::json& values = o.raw(section);
    if (!values.is_object()) o.fail(section, "expected an object of values for the cluster file's " + section);
    for (const auto& [key, value] : values.items()) {
      if (!target.contains(key) || key == "name") {
        o.fail(section + "." + key, "expected a key of the cluster file's " + section);
      }
      target[key] = value;
    }
  };
  overlay("device_profile", j["device"], true);
  overlay("scale_up", j["node"]["scale_up"], false);
  overlay("scale_out", j["scale_out"], false);
  o.finish();
  return stack;
}

// The devices held to `watts`. The cluster reader holds the rule (the
// rated limit or a listed cap); its error is restated here for the flag.
void set_power_limit(nlohmann::ordered_json& j, const std::string& file, double watts) {
  const std::string who = fmt::format("{}'s {}", j.value("name", ""), j["device"].value("name", ""));
  if (!j["device"].contains("power")) {
    throw core::InputError(
        "command line", "--power-limit",
        fmt::format("expected a cluster whose device profile has a power section; {} has none", who));
  }
  j["device"]["power"]["limit_W"] = watts;
  try {
    (void)cluster_from_json(j.dump(), file);
  } catch (const core::InputError& e) {
    if (e.key() != "device.power.limit_W") throw;
    throw core::InputError("command line", "--power-limit",
                           fmt::format("{} for {}, got {} W", e.expected(), who, watts));
  }
}

}  // namespace

std::pair<std::string, std::string> overlaid_cluster_text(const std::string& name_or_path,
                                                          const ClusterOverlay& overlay,
                                                          std::string* calibration_stack) {
  auto [text, file] = cluster_text(name_or_path);
  if (overlay.empty()) return {text, file};
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  if (!overlay.calibration.empty()) {
    const std::string stack = apply_calibration(j, overlay.calibration);
    if (calibration_stack) *calibration_stack = stack;
    file += " with calibration " + overlay.calibration;
  }
  if (overlay.nic_gbps) j["scale_out"]["nic_Gbps"] = *overlay.nic_gbps;
  if (overlay.oversubscription && !j["scale_out"]["tiers"].empty()) {
    j["scale_out"]["tiers"][0]["oversubscription"] = *overlay.oversubscription;
  }
  if (overlay.power_limit_w) set_power_limit(j, file, *overlay.power_limit_w);
  return {j.dump(2), file};
}

std::string ClusterOverlay::describe() const {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (nic_gbps) add(fmt::format("NIC {:g} Gb/s", *nic_gbps));
  if (oversubscription) add(fmt::format("leaf oversubscription {:g}:1", *oversubscription));
  if (power_limit_w) add(fmt::format("power limit {:g} W", *power_limit_w));
  if (!calibration.empty()) add("calibration " + calibration);
  return out;
}

ResolvedCluster resolve_cluster(const std::string& name_or_path, const ClusterOverlay& overlay) {
  std::string stack;
  auto [text, file] = overlaid_cluster_text(name_or_path, overlay, &stack);
  ClusterSpec spec = cluster_from_json(text, file);
  return ResolvedCluster{std::move(spec), std::move(text), std::move(file), std::move(stack)};
}

}  // namespace hzp::topologies
