// The sweep database: one SQLite file, table `points` (one row per finished
// point: every input, every metric, status, provenance) and table `meta`
// (which sweep it belongs to). WAL journal, synchronous=FULL: a row that was
// committed survives a kill or a power loss; one that was not is recomputed.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

struct sqlite3;

namespace hzp::explore {

class SweepDb {
 public:
  /// Opens (creating if needed) `path` for the sweep with `spec_hash`; a
  /// database of another sweep takes this one's points too (rows are keyed
  /// by their full inputs; the spec is kept as meta `spec.<sha256>`).
  /// InputError if it is not a sweep database of this hzp's columns.
  SweepDb(const std::string& path, const std::string& spec_hash, const std::string& spec_json);
  ~SweepDb();
  SweepDb(const SweepDb&) = delete;
  SweepDb& operator=(const SweepDb&) = delete;

  /// Keys of the points already recorded.
  [[nodiscard]] std::set<std::string> done() const;
  /// Adds a row (ignored if its key is already there); committed by `flush`
  /// or when enough rows or time have accumulated.
  void add(const nlohmann::ordered_json& row);
  void flush();
  /// Copies every row of another database of the same sweep (not already here).
  /// Returns how many were added.
  int merge_from(const std::string& other);

  /// Rows ordered by point index, as JSON objects.
  [[nodiscard]] std::vector<nlohmann::ordered_json> rows() const;

  /// The columns of `points`, in order.
  [[nodiscard]] static const std::vector<std::pair<std::string, std::string>>& columns();

 private:
  void exec(const std::string& sql) const;
  void record_other_spec(const std::string& spec_hash, const std::string& spec_json) const;
  std::string path_;
  sqlite3* db_ = nullptr;
  int pending_ = 0;
  double last_commit_ = 0;
};

/// Reads the spec hash and JSON a database was created with (for merge/export).
[[nodiscard]] std::pair<std::string, std::string> sweep_db_meta(const std::string& path);

/// CSV (header line, one line per row) and JSON (array of objects) exports.
[[nodiscard]] std::string rows_to_csv(const std::vector<nlohmann::ordered_json>& rows);

}  // namespace hzp::explore
