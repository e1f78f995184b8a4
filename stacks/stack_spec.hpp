// StackSpec: the software that runs a plan — how its kernels decompose the
// model's non-GEMM ops, which attention kernel it runs, what its selective
// recomputation recomputes, how it cuts and wraps the data-parallel
// collectives, what its host spends per kernel and per collective, and how it
// overlaps communication. The third input beside model and cluster, read
// strictly from versioned JSON (catalog stacks/catalog/*.json); every figure
// names its public source in the file.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/names.hpp"
#include "core/stack_kernels.hpp"

namespace hzp::stacks {

inline constexpr int kStackSchemaVersion = 1;

/// How the data-parallel collectives of one unit are cut: one per unit (a
/// flat buffer: FSDP, FSDP2, hzp), one per parameter tensor (DeepSpeed
/// ZeRO-3's partitioned parameters), or buckets of `bucket_MB`.
enum class Granularity { Unit, Parameter, Bucket };
inline constexpr core::Names<Granularity, 3> kGranularities{
    {{Granularity::Unit, "unit"}, {Granularity::Parameter, "parameter"}, {Granularity::Bucket, "bucket"}}};

/// How the once-per-step gradient reduction reaches the optimizer's shards:
/// hierarchical (reduce-scatter over the g_o ranks of a shard group, then an
/// all-reduce across its replicas: hzp's, and Megatron's distributed
/// optimizer when g_o = DP) or one all-reduce over every data-parallel rank,
/// each rank keeping its part (InternEvo's hybrid ZeRO).
enum class StepReduction { Hierarchical, AllReduce };
inline constexpr core::Names<StepReduction, 2> kStepReductions{
    {{StepReduction::Hierarchical, "hierarchical"}, {StepReduction::AllReduce, "all_reduce"}}};

/// How updated 1/g_o shards return to every rank that needs them: one
/// all-gather per unit over the regather group, or one broadcast per owner
/// rank of its whole updated shard after the optimizer step (InternEvo).
enum class Regather { AllGather, Broadcast };
inline constexpr core::Names<Regather, 2> kRegathers{
    {{Regather::AllGather, "all_gather"}, {Regather::Broadcast, "broadcast"}}};

struct Collectives {
  Granularity gather = Granularity::Unit;
  Granularity reduce = Granularity::Unit;
  double bucket_MB = 0;  // Bucket granularity: bytes of one bucket (MB = 1e6 bytes)
  /// Copies around each parameter all-gather: `copy_in` gathers the
  /// parameters' shards into the contiguous send buffer (on the gather
  /// stream), `copy_out` splits the gathered buffer into the parameters (on
  /// the compute stream, before the unit runs). Copies around each gradient
  /// reduce-scatter: `grad_copy_in` packs the gradients into its send buffer.
  bool copy_in = false, copy_out = false, grad_copy_in = false;
  /// ZeRO++: parameters all-gathered as int8 with per-block scales (qwZ,
  /// quantized before and dequantized after the gather) and gradients reduced
  /// as int4 (qgZ: quantized, reduce-scattered, dequantized and summed).
  bool int8_weights = false, int4_gradients = false;
  StepReduction step_reduction = StepReduction::Hierarchical;
  Regather regather = Regather::AllGather;
};

/// How a tensor-parallel overlap cuts a collective and the GEMM beside it.
/// split: kTpOverlapChunks chunks, each GEMM chunk after (all-gather) or
/// before (reduce-scatter) its own piece of the collective (Transformer
/// Engine's "pipeline" method, num_splits 4). ring_exchange: tp steps, one
/// shard a step passed to the ring neighbour; an all-gather's first GEMM
/// chunk is the rank's own shard and waits for nothing (Transformer Engine's
/// "ring_exchange" method, num_splits = tp size).
enum class TpOverlapCut { Split, RingExchange };
inline constexpr core::Names<TpOverlapCut, 2> kTpOverlapCuts{
    {{TpOverlapCut::Split, "split"}, {TpOverlapCut::RingExchange, "ring_exchange"}}};

/// What the thread that issues an op spends on it, in microseconds. The
/// defaults are a PyTorch framework's, each call made from Python:
///  - event_us: recording a CUDA event or making a stream wait on one. The
///    driver call is 0.24-0.26 us (harrism/cuda_event_benchmark README:
///    cudaEventRecord without timing 4.1 M/s, cudaStreamWaitEvent 3.9 M/s);
///    Python's argument parsing adds about 1 us a call (pytorch/pytorch#41383:
///    `x*x` costs about 2 us from Python, half of it parsing).
///  - alloc_us: one caching-allocator allocation or free: `torch.empty` and
///    its release together 2.15 us (NVIDIA/cutlass#3275, x64 host).
///  - sync_us: from the moment a blocking wait's event happens until the
///    thread issues again; 0 unless a stack states what it does there
///    (torch-fsdp1 states its rate limiter's).
struct HostCosts {
  double kernel_us = 0;      // host time to launch one kernel (framework dispatch included)
  double collective_us = 0;  // host time to issue one collective (hooks and bookkeeping included)
  double event_us = 1.25;
  double alloc_us = 1.1;
  double sync_us = 0;
};

struct Overlap {
  /// Collectives issued by background threads on their own streams (hzp's
  /// runtime); otherwise by the training loop's thread.
  bool background_threads = false;
  /// At most this many parameter all-gathers in flight at once (FSDP1's
  /// limit_all_gathers); 0: no limit beyond the plan's prefetch depth.
  int max_inflight_gathers = 0;
  /// Gathered parameters that may be fetched ahead of their use, MB
  /// (DeepSpeed's stage3_prefetch_bucket_size): whole units that fit in it
  /// are prefetched; 0: no budget beyond the plan's prefetch depth.
  double prefetch_MB = 0;
  /// Tensor-parallel overlap's chunk GEMMs run on this many compute streams
  /// at once (Transformer Engine's userbuffers: up to 3,
  /// NVTE_COMM_OVERLAP_MAX_STREAMS), so a chunk fills the device as that many
  /// chunks together; 1: one after another on the compute stream.
  int tp_gemm_streams = 1;
  /// The cut of an overlapped all-gather + GEMM and of a GEMM +
  /// reduce-scatter (see TpOverlapCut).
  TpOverlapCut tp_gather_cut = TpOverlapCut::Split;
  TpOverlapCut tp_scatter_cut = TpOverlapCut::Split;
  /// The backward of a column-parallel linear as Transformer Engine's "bulk"
  /// method runs it: the saved sequence shard of its input is all-gathered
  /// again while the input-gradient GEMM runs, and that gradient's
  /// reduce-scatter runs whole while the weight-gradient GEMM runs (the
  /// weight-gradient GEMM waits for the gathered input). false: the
  /// reduce-scatter is cut as tp_scatter_cut after the weight gradient.
  bool tp_bulk_backward = false;
};

/// Where the sharding collectives' buffers come from: pools of fixed slots
/// allocated once (hzp's runtime: no fragmentation) or the framework's caching
/// allocator, one allocation per use.
enum class Allocator { Pools, Caching };
inline constexpr core::Names<Allocator, 2> kAllocators{{{Allocator::Pools, "pools"}, {Allocator::Caching, "caching"}}};

/// The plans a stack can express: its data-parallel strategies (plan
/// strategy names; "zero3" is fsdp) and its model parallelism ("tp", "pp",
/// "cp", "ep", "ulysses"; [] for none). Unset: every one (a stack file
/// without "runs", or without "parallelism").
struct Runs {
  std::optional<std::vector<std::string>> strategies;
  std::optional<std::vector<std::string>> parallelism;
  std::string source;  // where the stack's documentation says so
};
/// The names "runs" accepts (plan/plan_test checks them against plan's strategies).
[[nodiscard]] const std::vector<std::string>& strategy_names();
[[nodiscard]] const std::vector<std::string>& parallelism_names();

struct StackSpec {
  std::string name;
  std::string source;
  Runs runs;
  core::NonGemmKernels ops;
  core::AttentionKernel attention = core::AttentionKernel::Flash2;
  core::SelectivePolicy selective = core::SelectivePolicy::CoreAttention;
  /// How its cross-entropy runs when the plan does not fuse it ("unfused_loss",
  /// optional: Megatron's in-place one unless the file says otherwise).
  core::UnfusedLoss unfused_loss = core::UnfusedLoss::MegatronVocabParallel;
  /// What its FP8 linear layers save of their inputs ("fp8_saved_inputs",
  /// optional: the high-precision input unless the file says otherwise).
  core::Fp8SavedInputs fp8_saved_inputs = core::Fp8SavedInputs::HighPrecision;
  Collectives collectives;
  HostCosts host;
  Overlap overlap;
  Allocator allocator = Allocator::Caching;
};

[[nodiscard]] constexpr std::string_view to_string(Granularity g) { return core::name_of(kGranularities, g); }

/// Parses a StackSpec; errors name `file` and the key.
[[nodiscard]] StackSpec stack_from_json(const std::string& text, const std::string& file);
/// The JSON text of a catalog name or a .json file, and the name errors are reported under.
[[nodiscard]] std::pair<std::string, std::string> stack_text(const std::string& name_or_path);
[[nodiscard]] StackSpec load_stack(const std::string& name_or_path);
[[nodiscard]] std::vector<std::string> stack_catalog_names();

/// The stack a scenario runs when none is named.
inline constexpr const char* kDefaultStack = "hzp-async";

/// A stack as an input: the spec, the file it came from and the SHA-256 of its text.
struct Stack {
  StackSpec spec;
  std::string file;
  std::string sha256;
};
/// Loads a catalog name or a .json file (InputError naming the file and key on
/// bad input); kDefaultStack is default_stack(), loaded once.
[[nodiscard]] std::shared_ptr<const Stack> resolve_stack(const std::string& name_or_path);
/// A stack given as JSON text (a validation case's), errors reported under `file`.
[[nodiscard]] std::shared_ptr<const Stack> stack_from_text(const std::string& text, const std::string& file);
/// kDefaultStack, loaded once.
[[nodiscard]] const std::shared_ptr<const Stack>& default_stack();

}  // namespace hzp::stacks
