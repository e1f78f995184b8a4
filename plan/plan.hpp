// Parallel plans and their lowering to a Schedule: model + cluster + plan
// options in, one per-rank, multi-stream Schedule out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/schedule.hpp"
#include "models/model_spec.hpp"
#include "models/step_graph.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan {

enum class Strategy { Ddp, Fsdp };

[[nodiscard]] std::string_view to_string(Strategy s);
/// Parses "ddp" or "fsdp"; InputError(command line, --strategy) otherwise.
[[nodiscard]] Strategy parse_strategy(const std::string& s);
/// Every strategy implemented so far, in the order tables list them.
[[nodiscard]] std::vector<Strategy> all_strategies();

struct PlanOptions {
  Strategy strategy = Strategy::Fsdp;
  std::int64_t seq_len = 0;  // 0: min(model max_seq_len, 8192)
  /// The global batch, in tokens or in sequences: exactly one is set.
  std::optional<std::int64_t> global_batch_tokens;
  std::optional<std::int64_t> global_batch_sequences;
  std::int64_t micro_batch = 1;  // sequences per micro-batch per rank
  models::Recompute recompute = models::Recompute::None;
  bool flash_attention = true;
  /// FSDP: how many units ahead the parameter all-gather may run (1 = the next unit).
  int prefetch_depth = 1;
  /// Dtype of accumulated gradients (and of DDP's all-reduce).
  core::Dtype grad_dtype = core::Dtype::Fp32;
};

/// Bytes per parameter of the Adam optimizer step: read the gradient (4),
/// read and write the fp32 master weight, first and second moments (3 x 8),
/// write the bf16 parameter (2).
inline constexpr std::int64_t kAdamBytesPerParam = 30;
/// fp32 master weight + Adam's two moments.
inline constexpr std::int64_t kOptimizerStateBytesPerParam = 12;

/// How the global batch splits: sequences, data-parallel size, micro-batches.
struct BatchSplit {
  std::int64_t seq_len = 0;
  std::int64_t sequences = 0;
  int data_parallel = 0;
  std::int64_t micro_batches = 0;  // per rank
};
/// Throws InputError naming the option when the batch does not divide.
[[nodiscard]] BatchSplit split_batch(const models::ModelSpec& m, int world, const PlanOptions& o);

/// Lowers the plan to a Schedule (checked by core::check_schedule before return).
[[nodiscard]] core::Schedule lower(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o);

}  // namespace hzp::plan
