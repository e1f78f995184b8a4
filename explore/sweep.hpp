// Sweeps: the Cartesian product of values over model, cluster and plan keys,
// each point simulated in a worker process and recorded as one row of an
// SQLite database (sweep_db.hpp) that survives interruption.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "explore/scenario.hpp"

namespace hzp::explore {

/// A sweep: fixed values, swept axes (in order: the last varies fastest) and
/// filters ("tp * pp <= 16" style: KEY|NUMBER [* KEY|NUMBER] OP KEY|NUMBER,
/// OP one of < <= == != >= >, or "KEY divides KEY").
struct SweepSpec {
  nlohmann::ordered_json base = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, std::vector<nlohmann::ordered_json>>> axes;
  std::vector<std::string> where;
  /// SHA-256 of the canonical spec: a database belongs to exactly one sweep.
  [[nodiscard]] std::string hash() const;
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

/// The JSON Schema of a sweep spec: base and axes take every scenario and plan
/// key (generated from the option tables).
[[nodiscard]] nlohmann::ordered_json sweep_schema();

/// {"schema_version": 1, "base": {...}, "axes": {"gpus": [256, 512], ...}, "where": [...]}.
[[nodiscard]] SweepSpec sweep_from_json(const std::string& text, const std::string& file);
/// Adds `--set key=v1,v2,...` (numbers where they parse, strings otherwise).
void add_set(SweepSpec& spec, const std::string& set);

struct SweepPoint {
  std::int64_t index = 0;         // position in the product (before filtering)
  nlohmann::ordered_json inputs;  // every key the point sets (base and axes)
  std::string key;                // canonical JSON of `inputs`: the row's identity
};

/// The points of the product that pass every filter. Throws InputError for an
/// unknown key, a bad value or a malformed filter (naming `file`).
[[nodiscard]] std::vector<SweepPoint> expand(const SweepSpec& spec, const std::string& file);

/// The scenario a point describes (one strategy).
[[nodiscard]] Scenario scenario_of(const nlohmann::ordered_json& inputs, const std::string& file);

/// One finished point: status "ok", "infeasible" (out of memory) or "error".
struct PointResult {
  std::string status;
  std::string error;
  nlohmann::ordered_json row;  // column -> value (inputs resolved, metrics, provenance)
};

/// The point's inputs as row columns (every input key has one), for the rows
/// of points that fail before they resolve.
void copy_input_columns(const nlohmann::ordered_json& inputs, nlohmann::ordered_json& row);

/// Simulates one point under `limits`; never throws for bad input (status "error").
[[nodiscard]] PointResult run_point(const SweepPoint& p, const WorkLimits& limits = {});

struct SweepOptions {
  std::string db;  // the database (or this rank's shard of it)
  int jobs = 1;
  int rank = 0, ranks = 1;  // MPI partition: this process runs points with index % ranks == rank
  bool progress_tty = false;
  std::function<void(const std::string&)> progress;  // where progress lines go
  WorkLimits limits;                                 // every point's (--max-ops, --max-flows)
};

struct SweepSummary {
  std::int64_t points = 0;   // this rank's points
  std::int64_t skipped = 0;  // already in the database
  std::int64_t ran = 0;
  std::int64_t ok = 0, infeasible = 0, errors = 0;
  std::int64_t rounded = 0;  // points whose global batch --round-batch changed
  /// The failed points' reasons grouped by their words (numbers aside), in
  /// the order first met: how many points, and the first one's reason.
  struct ErrorGroup {
    std::string kind;   // the reason with each number as '#'
    std::string first;  // "point N: reason"
    std::int64_t points = 0;
  };
  std::vector<ErrorGroup> error_groups;
  void add_error(std::int64_t point, const std::string& reason);
  double seconds = 0;
  bool interrupted = false;
};

/// Runs every point of `spec` not yet in the database, `jobs` worker processes
/// at a time; rows are committed as they finish, so a killed sweep resumes
/// where it stopped. A worker that dies takes only its point with it (recorded
/// as an error). SIGINT/SIGTERM stop it cleanly.
[[nodiscard]] SweepSummary run_sweep(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o);

/// The MPI rank and size from mpirun (OpenMPI), PMI or Slurm; {0, 1} alone.
[[nodiscard]] std::pair<int, int> launcher_rank();
/// "out.db" -> "out.rank1of4.db".
[[nodiscard]] std::string shard_path(const std::string& db, int rank, int ranks);
/// The progress line's time left: the points still to run at the rate of
/// those finished ("after the first point" while none has).
[[nodiscard]] std::string eta_text(std::int64_t finished, std::int64_t total, double elapsed_s);

}  // namespace hzp::explore
