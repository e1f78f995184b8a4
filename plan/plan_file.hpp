// Plan options as a strict, versioned JSON file (`hzp simulate --plan FILE`),
// read and written through the plan option table (options.hpp): every key
// present, none unknown, each checked for type and range.
#pragma once

#include <string>

#include "plan/options.hpp"
#include "plan/plan.hpp"

namespace hzp::plan {

/// Parses plan options; one error names `file` and every bad key.
[[nodiscard]] PlanOptions plan_from_json(const std::string& text, const std::string& file);
/// The same options as a plan file's JSON text (pretty-printed).
[[nodiscard]] std::string plan_to_json(const PlanOptions& o);

}  // namespace hzp::plan
