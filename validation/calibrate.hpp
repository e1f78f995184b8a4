// `hzp calibrate`: fits the performance model of a cluster's device and links
// from microbenchmark results (traces/bench_results.hpp) and writes a
// calibration overlay the engines load with --calibration.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topologies/cluster_spec.hpp"
#include "traces/bench_results.hpp"

namespace hzp::validation {

using Points = std::vector<std::pair<double, double>>;  // (size, efficiency), ascending

struct CalibrationFit {
  std::string device;
  /// GEMM: fraction of the dtype's peak against cbrt(m·n·k), the median of
  /// the shapes at each size (the roofline's byte term still bounds small
  /// shapes from below).
  std::optional<Points> gemm_efficiency;
  /// Collectives inside one scale-up domain (ranks_per_node == ranks) and
  /// rail groups (one rank per node), each fitted to NCCL's model
  /// (cost/nccl.hpp): the Simple ring step latency on the link (the
  /// other protocols' steps scale with it) and the Simple ring's efficiency.
  std::optional<double> scale_up_step_latency_us;
  std::optional<double> scale_up_ring_efficiency;
  std::optional<double> net_step_latency_us;
  std::optional<double> scale_out_ring_efficiency;
  /// Median slowdown of a GEMM while a collective runs beside it.
  std::optional<double> comm_compute_slowdown;
  /// One line per fitted quantity: from how many measurements, and the
  /// median |error| of the fitted model on them.
  std::vector<std::string> notes;
};

/// `inputs`: (file name, results). Throws InputError naming the file when a
/// result is for another device or the inputs fit nothing.
[[nodiscard]] CalibrationFit fit_calibration(const topologies::ClusterSpec& cluster,
                                             const std::vector<std::pair<std::string, traces::BenchResults>>& inputs);

/// The overlay file: {"schema_version", "device", "source", "device_profile",
/// "scale_up", "scale_out"} with only the fitted keys.
[[nodiscard]] std::string calibration_json(const CalibrationFit& fit, const std::string& source);

}  // namespace hzp::validation
