// The JSON Schema of every input hzp reads: plan files and sweep specs from
// their option tables, models, clusters and Schedules from what their strict
// readers ask of every catalog entry and of representative lowered plans
// (core::SchemaRecorder), so no schema can drift from the code that reads it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hzp::explore {

/// The inputs a schema exists for: plan, sweep, model, cluster, schedule.
[[nodiscard]] const std::vector<std::string>& schema_names();
/// The schema of one of them; std::invalid_argument for another name.
[[nodiscard]] nlohmann::ordered_json input_schema(const std::string& name);

}  // namespace hzp::explore
