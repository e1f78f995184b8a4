// Microbenchmark results: what `hzp-run bench gemm|collectives|overlap`
// measures on a device and `hzp calibrate` fits the performance model from.
// One JSON file per benchmark kind, with the provenance of the machine.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace hzp::traces {

inline constexpr int kBenchSchemaVersion = 1;

/// A GEMM shape timed alone: C[m×n] = A[m×k]·B[k×n], `batch` of them.
struct GemmResult {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  core::Dtype dtype = core::Dtype::Bf16;
  double seconds = 0;  // median over the timed repetitions
};

/// A collective over `ranks` ranks, `ranks_per_node` of them per node
/// (1: one rank per node, a rail group), of `bytes` per rank in nccl-tests'
/// convention (all-gather: receive buffer; reduce-scatter: send buffer;
/// all-reduce: the buffer).
struct CollectiveResult {
  core::CollectiveKind collective = core::CollectiveKind::AllReduce;
  std::int64_t bytes = 0;
  int ranks = 0;
  int ranks_per_node = 0;
  double seconds = 0;  // median, the max across ranks
};

/// A GEMM timed alone and while a collective runs on another stream using
/// `channels` NCCL channels (SMs).
struct OverlapResult {
  std::int64_t m = 0, n = 0, k = 0;
  core::CollectiveKind collective = core::CollectiveKind::AllReduce;
  std::int64_t bytes = 0;
  int channels = 0;
  double alone_seconds = 0, overlapped_seconds = 0;
};

struct BenchResults {
  std::string kind;    // "gemm", "collectives" or "overlap"
  std::string device;  // the device profile's name, e.g. "H200 SXM 141GB"
  /// GPU, driver, CUDA, cuBLAS, NCCL versions, clocks, host, date, hzp version.
  std::map<std::string, std::string> provenance;
  std::vector<GemmResult> gemm;
  std::vector<CollectiveResult> collectives;
  std::vector<OverlapResult> overlap;
};

[[nodiscard]] std::string to_json(const BenchResults& r);
/// Throws InputError naming `file` and the key for anything malformed.
[[nodiscard]] BenchResults bench_results_from_json(const std::string& text, const std::string& file);

}  // namespace hzp::traces
