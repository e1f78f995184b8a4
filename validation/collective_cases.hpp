// Published nccl-tests measurements as validation cases for the collective
// cost model (validation/collectives/*.json): each names its source, the
// hardware, how hzp models it (a cluster, the group's shape, how many GPUs
// one nccl-tests process drove) and the measured rows, and is scored per row:
// bus bandwidth from 1 MiB up, time below.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace hzp::validation {

/// What a case is for. Scored cases count in the per-fabric summary; a
/// "figure" case is where a catalog figure was read (reported apart, not
/// scored: it would check itself); a "context" case runs something hzp
/// does not model (SHARP, a fabric or machine without a catalog cluster) and
/// is only reported, with its reason.
enum class CollectiveUse { Score, Figure, Context };

struct CollectiveRow {
  double bytes = 0;    // nccl-tests' size
  double time_us = 0;  // measured (out-of-place); from busbw when the source gives only that
  double busbw_GBps = 0;
};

struct CollectiveCase {
  std::string file, id;
  std::string source;  // title, URL and where in it
  std::string fabric;  // nvlink, infiniband, roce, efa, ...
  std::string measured_algorithm;
  CollectiveUse use = CollectiveUse::Score;
  std::string reason;  // why a case is not scored
  // The model: a catalog cluster (or a .json) and what-if NIC speed, the GPUs,
  // the group's ranks per node, and the GPUs one nccl-tests process drove
  // (its host issues one NCCL call per GPU each iteration).
  std::string cluster;
  std::optional<double> nic_gbps;
  int gpus = 0;
  int ranks_per_node = 0;
  int gpus_per_process = 1;
  /// What the run forced (NCCL_ALGO, NCCL_PROTO, NVLS or CollNet disabled):
  /// hzp chooses only among these; empty for NCCL's own choice.
  std::vector<std::string> algorithms;
  std::string protocol;
  core::CollectiveKind op = core::CollectiveKind::AllGather;
  std::vector<CollectiveRow> rows;
};

/// Throws InputError naming the file and key for anything malformed.
[[nodiscard]] CollectiveCase collective_case_from_json(const std::string& text, const std::string& file);
/// Every `*.json` in `dir` whose id contains `filter`, sorted by id.
[[nodiscard]] std::vector<CollectiveCase> load_collective_cases(const std::string& dir, const std::string& filter = "");

/// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw × it.
[[nodiscard]] double busbw_factor(core::CollectiveKind kind, int ranks);

struct ScoredRow {
  CollectiveRow measured;
  double predicted_us = 0;
  double predicted_busbw_GBps = 0;
  std::string choice;  // algorithm/protocol/channels hzp's model picked
  /// Bus bandwidth error from 1 MiB up, time error below; signed, relative.
  [[nodiscard]] bool large() const { return measured.bytes >= 1048576; }
  [[nodiscard]] double error() const {
    return large() ? (predicted_busbw_GBps - measured.busbw_GBps) / measured.busbw_GBps
                   : (predicted_us - measured.time_us) / measured.time_us;
  }
};

struct ScoredCollective {
  const CollectiveCase* c = nullptr;
  std::vector<ScoredRow> rows;
  /// Mean |error| of the rows from 1 MiB up and below; nullopt when none.
  [[nodiscard]] std::optional<double> large_error() const;
  [[nodiscard]] std::optional<double> small_error() const;
};

/// Runs one case through hzp's collective model.
[[nodiscard]] ScoredCollective score_collective_case(const CollectiveCase& c);

/// Acceptance per fabric: mean bus-bandwidth |error| within 15 % from 1 MiB
/// up, mean time |error| within 25 % below.
inline constexpr double kLargeTolerance = 0.15;
inline constexpr double kSmallTolerance = 0.25;

struct FabricSummary {
  std::string fabric;
  int cases = 0;
  int large_rows = 0, small_rows = 0;
  double large_error = 0, small_error = 0;  // mean |error| over the rows
  [[nodiscard]] bool within() const { return large_error <= kLargeTolerance && small_error <= kSmallTolerance; }
};
/// The scored cases' summary per fabric, fabrics sorted.
[[nodiscard]] std::vector<FabricSummary> summarize_collectives(const std::vector<ScoredCollective>& scored);

/// Every case (its use, mean errors) and the summary per fabric, as JSON.
[[nodiscard]] std::string collectives_json(const std::vector<ScoredCollective>& scored);

/// Every case and row, then the summary per fabric (Markdown).
[[nodiscard]] std::string collectives_table(const std::vector<ScoredCollective>& scored, bool rows);

}  // namespace hzp::validation
