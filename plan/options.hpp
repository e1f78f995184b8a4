// The one table of plan options: every PlanOptions field once, with its key,
// type, range, default (a default-constructed PlanOptions) and help. The CLI
// flags, the plan-file reader and writer, sweep keys, the provenance of a
// lowered plan and the plan JSON Schema are all generated from it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/options.hpp"
#include "plan/plan.hpp"

namespace hzp::plan {

/// The version of the plan file format (and of a Schedule's plan provenance).
inline constexpr int kPlanSchemaVersion = 1;

/// One row: the option's spec and how to read and write it on PlanOptions.
/// `set` receives a value that passed core::check_value for `spec`.
struct PlanOption {
  core::OptionSpec spec;
  nlohmann::json (*get)(const PlanOptions&);
  void (*set)(PlanOptions&, const nlohmann::json&);
};

/// Every plan option, in the order files list them.
[[nodiscard]] const std::vector<PlanOption>& plan_option_table();
/// The row of `key`, or nullptr.
[[nodiscard]] const PlanOption* find_plan_option(std::string_view key);
/// Every key of the table.
[[nodiscard]] std::vector<std::string> plan_option_keys();

/// Checks `value` for option `key` and sets it; a problem names the key.
[[nodiscard]] std::optional<core::Problem> set_plan_option(PlanOptions& o, std::string_view key,
                                                           const nlohmann::json& value);

/// Every option's value, keyed and ordered as the table (a plan file's body).
[[nodiscard]] nlohmann::ordered_json plan_options_json(const PlanOptions& o);

/// Reads a plan file's body: every key of the table (keys added after schema 1
/// may be left out), none unknown, each checked; cross-key rules too. Returns
/// every problem at once (fields are the file's keys); `o` holds what was read.
[[nodiscard]] std::vector<core::Problem> plan_options_from_json(const nlohmann::json& j, PlanOptions& o);

/// The JSON Schema (draft 2020-12) of a plan file.
[[nodiscard]] nlohmann::ordered_json plan_schema();

}  // namespace hzp::plan
