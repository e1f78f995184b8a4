// Plan files (see plan_file.hpp).
#include "plan/plan_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::plan {

PlanOptions plan_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  if (!j.is_object()) throw core::InputError(file, "(top level)", "expected a JSON object");
  PlanOptions p;
  std::vector<core::Problem> problems;
  if (!j.contains("schema_version") || j.at("schema_version") != kPlanSchemaVersion) {
    const std::string got = j.contains("schema_version") ? j.at("schema_version").dump() : "nothing";
    problems.push_back({"schema_version", fmt::format("expected {}, got {}", kPlanSchemaVersion, got)});
  }
  for (auto& problem : plan_options_from_json(j, p)) problems.push_back(std::move(problem));
  if (!problems.empty()) {
    throw core::InputError(file, "", core::join_problems(problems, [](const std::string& key) { return key; }));
  }
  return p;
}

std::string plan_to_json(const PlanOptions& p) {
  nlohmann::ordered_json j;
  j["schema_version"] = kPlanSchemaVersion;
  const nlohmann::ordered_json body = plan_options_json(p);
  for (const auto& [key, value] : body.items()) j[key] = value;
  return j.dump(2) + "\n";
}

}  // namespace hzp::plan
