// What `hzp simulate` prints and writes: a readable table and a JSON summary
// with provenance. Formatting lives here, never in the engines.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "explore/scenario.hpp"

namespace hzp::cli {

using explore::ScenarioResult;
using explore::StrategyResult;

[[nodiscard]] std::string summary_text(const ScenarioResult& r);
/// The JSON summary (also what --json prints), pretty-printed, deterministic.
[[nodiscard]] std::string summary_json(const ScenarioResult& r, const std::string& command_line);
/// File-name stem for one run: "<model>_<cluster>x<gpus>_<strategy>".
[[nodiscard]] std::string run_stem(const ScenarioResult& r, const StrategyResult& run);

/// A JSON Schema's properties as a Markdown table a person reads: key, type,
/// default, accepted values, whether a file must state it, and what it means.
[[nodiscard]] std::string schema_reference(const nlohmann::ordered_json& schema);

}  // namespace hzp::cli
