// The sweep database's columns and CSV export (see sweep_db.hpp): no SQLite,
// so a build without it (runtime-only) still names and exports the columns.
#include <nlohmann/json.hpp>

#include "explore/scenario.hpp"
#include "explore/sweep_db.hpp"
#include "plan/options.hpp"

namespace hzp::explore {
namespace {

std::string sql_type(core::ValueType t) {
  switch (t) {
    case core::ValueType::Integer:
    case core::ValueType::Boolean:
    case core::ValueType::TokenCount: return "INTEGER";
    case core::ValueType::Number: return "REAL";
    default: return "TEXT";
  }
}

std::vector<std::pair<std::string, std::string>> make_columns() {
  std::vector<std::pair<std::string, std::string>> c = {{"point", "INTEGER"}, {"key", "TEXT"}, {"inputs", "TEXT"}};
  // One column per input key, generated from the option tables.
  for (const auto& row : scenario_option_table()) c.emplace_back(row.spec.key, sql_type(row.spec.type));
  for (const auto& row : plan::plan_option_table()) c.emplace_back(row.spec.key, sql_type(row.spec.type));
  for (const char* name : {"status", "error"}) c.emplace_back(name, "TEXT");
  for (const char* name : {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "exposed_comm_s", "peak_memory_gib",
                           "peak_reserved_gib"}) {
    c.emplace_back(name, "REAL");
  }
  c.emplace_back("fits", "INTEGER");
  // The global batch as it ran, and what was asked when --round-batch changed it (else NULL).
  c.emplace_back("batch_sequences", "INTEGER");
  c.emplace_back("batch_rounded_from", "INTEGER");
  c.emplace_back("wall_s", "REAL");
  for (const char* name :
       {"hzp_version", "git_revision", "model_sha256", "cluster_sha256", "schedule_sha256", "engine_detail", "shard"}) {
    c.emplace_back(name, "TEXT");
  }
  return c;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& SweepDb::columns() {
  static const std::vector<std::pair<std::string, std::string>> c = make_columns();
  return c;
}

std::string rows_to_csv(const std::vector<nlohmann::ordered_json>& rows) {
  std::string out;
  const auto& cols = SweepDb::columns();
  for (std::size_t i = 0; i < cols.size(); ++i) out += (i ? "," : "") + cols[i].first;
  out += "\n";
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < cols.size(); ++i) {
      const auto& v = r.at(cols[i].first);
      std::string cell = v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump();
      if (cell.find_first_of(",\"\n") != std::string::npos) {
        std::string q = "\"";
        for (char c : cell) q += c == '"' ? std::string("\"\"") : std::string(1, c);
        cell = q + "\"";
      }
      out += (i ? "," : "") + cell;
    }
    out += "\n";
  }
  return out;
}

}  // namespace hzp::explore
