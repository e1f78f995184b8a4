// What `hzp simulate` prints and writes: a readable table and a JSON summary
// with provenance. Formatting lives here, never in the engines.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "explore/scenario.hpp"
#include "validation/expected_error.hpp"

namespace hzp::cli {

using explore::ScenarioResult;
using explore::StrategyResult;

/// The error to expect of the scenario's predictions: the nearest group of
/// checked public runs (its device family, stack and scale).
[[nodiscard]] validation::ExpectedError expected_error_of(const ScenarioResult& r);

/// The expected error as the JSON outputs hold it (the group, its runs, mean
/// |error|, bias, worst, and the warning where the group is not the plan's own).
[[nodiscard]] nlohmann::ordered_json expected_error_json(const validation::ExpectedError& e);

/// A value that may be unset: the number, or null.
[[nodiscard]] nlohmann::ordered_json optional_json(const std::optional<double>& v);
/// The calibration and what-if changes: {calibration, nic_gbps, oversubscription, power_limit_W}, null when unset.
[[nodiscard]] nlohmann::ordered_json overlay_json(const topologies::ClusterOverlay& o);

[[nodiscard]] std::string summary_text(const ScenarioResult& r);
/// The JSON summary (also what --json prints), pretty-printed, deterministic.
[[nodiscard]] std::string summary_json(const ScenarioResult& r, const std::string& command_line);
/// File-name stem for one run: "<model>_<cluster>x<gpus>_<strategy>".
[[nodiscard]] std::string run_stem(const ScenarioResult& r, const StrategyResult& run);

/// A JSON Schema's properties as a Markdown table a person reads: key, type,
/// default, accepted values, whether a file must state it, and what it means.
[[nodiscard]] std::string schema_reference(const nlohmann::ordered_json& schema);

}  // namespace hzp::cli
