// A cluster as a run sees it: the catalog entry or file, with a calibration
// overlay (device-profile values fitted for its device) and what-if changes
// (NIC speed, the leaf switches' oversubscription, the devices' power limit)
// applied to its JSON.
#pragma once

#include <optional>
#include <string>

#include "topologies/cluster_spec.hpp"

namespace hzp::topologies {

struct ClusterOverlay {
  /// A calibration file (what `hzp calibrate` writes): {"schema_version": 1,
  /// "device": NAME, optional "stack": the software stack it was fitted
  /// under, "source": ..., "device_profile": {key: value}, optional
  /// "scale_up": {...}, "scale_out": {...}}; "" for none.
  std::string calibration;
  std::optional<double> nic_gbps;          // scale_out.nic_Gbps
  std::optional<double> oversubscription;  // the first tier's down:up ratio
  /// device.power.limit_W: the rated limit or a cap the device profile lists.
  std::optional<double> power_limit_w;
  [[nodiscard]] bool empty() const { return calibration.empty() && !nic_gbps && !oversubscription && !power_limit_w; }
  /// What the overlay changes, in words for a header ("NIC 200 Gb/s, leaf
  /// oversubscription 2:1"); "" when empty.
  [[nodiscard]] std::string describe() const;
};

struct ResolvedCluster {
  ClusterSpec spec;
  std::string text;  // the JSON the spec was parsed from (hashed into provenance)
  std::string file;  // the name errors are reported under
  /// The stack the calibration was fitted under ("" when it names none or
  /// there is no calibration): it holds for that stack only.
  std::string calibration_stack;
};

/// The cluster file's text with the overlay applied, and the name errors are
/// reported under. Errors in the calibration name its file and key.
[[nodiscard]] std::pair<std::string, std::string> overlaid_cluster_text(const std::string& name_or_path,
                                                                        const ClusterOverlay& overlay,
                                                                        std::string* calibration_stack = nullptr);
/// The same, parsed.
[[nodiscard]] ResolvedCluster resolve_cluster(const std::string& name_or_path, const ClusterOverlay& overlay);

}  // namespace hzp::topologies
