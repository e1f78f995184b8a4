// Plan options as a strict, versioned JSON file (`hzp simulate --plan FILE`):
// every key present, none unknown, each checked for type and range.
#pragma once

#include <string>

#include "plan/plan.hpp"

namespace hzp::plan {

inline constexpr int kPlanSchemaVersion = 1;

/// Parses plan options; errors name `file` and the key.
[[nodiscard]] PlanOptions plan_from_json(const std::string& text, const std::string& file);
/// The same options as a plan file's JSON text (pretty-printed).
[[nodiscard]] std::string plan_to_json(const PlanOptions& o);

}  // namespace hzp::plan
