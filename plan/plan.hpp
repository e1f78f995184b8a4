// Parallel plans and their lowering to a Schedule: model + cluster + plan
// options in, one per-rank, multi-stream Schedule out.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.hpp"
#include "core/options.hpp"
#include "models/model_spec.hpp"
#include "models/step_graph.hpp"
#include "plan/doc_lengths.hpp"
#include "schedule/schedule.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan {

/// Every data-parallel strategy is one hierarchical ZeRO plan (g_p, g_g, g_o):
///   ddp (1, 1, 1) with all-reduce       zero1 (1, 1, DP)   zero2 (1, DP, DP)
///   fsdp / zero3 (DP, DP, DP)           hsdp (S, S, S), S = --param-shard or a node
///   hpz (node, DP, DP), ZeRO++'s hierarchical partitioning
///   hzp: any (g_p, g_g, g_o) with g_p | g_o, g_g | g_o, g_o | DP;
///        default (scale-up domain, node, DP); asynchronous by default.
/// Hsdp2 is (1, S, S): PyTorch FSDP's _HYBRID_SHARD_ZERO2, as SHARD_GRAD_OP is zero2.
enum class Strategy { Ddp, Zero1, Zero2, Fsdp, Hsdp, Hsdp2, Hpz, Hzp };
inline constexpr core::Names<Strategy, 8> kStrategies{{{Strategy::Ddp, "ddp"},
                                                       {Strategy::Zero1, "zero1"},
                                                       {Strategy::Zero2, "zero2"},
                                                       {Strategy::Fsdp, "fsdp"},
                                                       {Strategy::Hsdp, "hsdp"},
                                                       {Strategy::Hsdp2, "hsdp2"},
                                                       {Strategy::Hpz, "hpz"},
                                                       {Strategy::Hzp, "hzp"}}};

[[nodiscard]] std::string_view to_string(Strategy s);
/// Parses a strategy name ("zero3" is fsdp); nullopt for any other text.
[[nodiscard]] std::optional<Strategy> parse_strategy(std::string_view s);
/// Every strategy implemented so far, in the order tables list them.
[[nodiscard]] std::vector<Strategy> all_strategies();

/// "none" | "selective" | "full", and back (nullopt for any other text).
[[nodiscard]] std::string_view to_string(models::Recompute r);
[[nodiscard]] std::optional<models::Recompute> parse_recompute(std::string_view s);
/// "bf16" | "fp8-delayed" | "fp8-current" | "fp8-block", and back (models::Precision).
[[nodiscard]] std::string_view to_string(models::Precision p);
[[nodiscard]] std::optional<models::Precision> parse_precision(std::string_view s);
/// Gradient accumulation dtypes a plan accepts: "fp32" | "bf16".
[[nodiscard]] std::optional<core::Dtype> parse_grad_dtype(std::string_view s);

/// The order of a pipeline stage's slots: 1F1B (Megatron's interleaved 1F1B
/// when vpp > 1), or one of Qi et al.'s zero-bubble schedules (ICLR 2024),
/// which split each backward into B (input gradients) and W (weight
/// gradients) and defer W into the bubbles: ZB-H1 (vpp 1) and ZB-V (vpp 2,
/// chunks placed in a V); or DeepSeek-V3's DualPipe (arXiv:2412.19437
/// §3.2.1, vpp 1, pp even): every stage also holds a copy of the mirror
/// stage pp − 1 − p, half the micro-batches run down the stages and half up
/// through the copies, with B and W split.
/// The built-in schedules; one registered later (register_pipeline_schedule)
/// takes the next id.
enum class PipelineSchedule : int { OneFOneB, ZbH1, ZbV, DualPipe };
inline constexpr core::Names<PipelineSchedule, 4> kPipelineSchedules{{{PipelineSchedule::OneFOneB, "1f1b"},
                                                                      {PipelineSchedule::ZbH1, "zb-h1"},
                                                                      {PipelineSchedule::ZbV, "zb-v"},
                                                                      {PipelineSchedule::DualPipe, "dualpipe"}}};
/// The built-ins' names ("1f1b" | "zb-h1" | "zb-v" | "dualpipe") and any
/// registered schedule's, and back (nullopt for any other text).
[[nodiscard]] std::string_view to_string(PipelineSchedule s);
[[nodiscard]] std::optional<PipelineSchedule> parse_pipeline_schedule(std::string_view s);

/// Group sizes of a hierarchical ZeRO plan: bf16 parameters over g_p ranks,
/// accumulated gradients over g_g, fp32 master weights and Adam moments over g_o.
struct ShardSizes {
  int param = 1;
  int grad = 1;
  int optim = 1;
  friend bool operator==(const ShardSizes&, const ShardSizes&) = default;
};

/// The global batch when a plan names none: 16M tokens (2,048 sequences of 8,192).
inline constexpr std::int64_t kDefaultGlobalBatchTokens = 16LL << 20;

/// The most ops a lowered Schedule may hold unless raised (--max-ops): about
/// 3.2 GB and under a minute of lowering on one core. The largest validation
/// case (Korthikanti et al. 2022, 1T parameters, 64 stages: 4.2 M ops, 23 s,
/// 2.7 GB) fits; Llama-3 70B on 1,024 GPUs has 10,115 ops.
inline constexpr std::int64_t kDefaultMaxOps = 8'000'000;
/// Bytes a lowered op holds in memory on average (the Op, its name and
/// buffer strings, the vectors around it): measured, to state the memory an
/// estimate of ops stands for.
inline constexpr std::int64_t kBytesPerOp = 400;

struct PlanOptions {
  Strategy strategy = Strategy::Hzp;
  std::int64_t seq_len = 0;  // 0: min(model max_seq_len, 8192)
  /// The global batch, in tokens or in sequences: at most one is set; neither
  /// means kDefaultGlobalBatchTokens.
  std::optional<std::int64_t> global_batch_tokens;
  std::optional<std::int64_t> global_batch_sequences;
  /// Weak scaling: the global batch as tokens per GPU (times the GPUs);
  /// instead of global_batch_tokens and global_batch_sequences.
  std::optional<std::int64_t> tokens_per_gpu;
  /// A global batch that does not split over data-parallel ranks x
  /// micro-batch is rounded to the nearest multiple that does (and the
  /// summary says so) instead of refused.
  bool round_batch = false;
  std::int64_t micro_batch = 1;  // sequences per micro-batch per rank
  models::Recompute recompute = models::Recompute::None;
  bool flash_attention = true;
  /// Fused softmax cross-entropy (models::GraphOptions::fused_loss).
  bool fused_loss = true;
  /// How many units ahead the parameter all-gather may run (1 = the next unit).
  int prefetch_depth = 1;
  /// The linear layers' GEMM precision (models::Precision): bf16, or an FP8
  /// recipe (delayed, current or block scaling) at the device's fp8 rate.
  models::Precision precision = models::Precision::Bf16;
  /// FP8 weight all-gather (FSDP2's Float8 all-gather, Megatron's
  /// --fp8-param-gather): each unit's weight shard is cast to FP8 before its
  /// all-gather (half the bytes) and the gathered FP8 weights are only
  /// transposed, not cast again. Needs an FP8 precision and g_p > 1.
  bool fp8_param_gather = false;
  /// Dtype of accumulated gradients and of the once-per-step reductions of them.
  core::Dtype grad_dtype = core::Dtype::Fp32;
  /// hzp (and hsdp's S): requested group sizes; 0 = the strategy's default.
  int param_shard = 0;
  int grad_shard = 0;
  int optim_shard = 0;
  /// Background issue threads for the parameter all-gathers and gradient
  /// reduce-scatters, buffers from pre-allocated pools. Unset: on for hzp,
  /// off for the presets (their reference implementations issue inline).
  std::optional<bool> async;
  /// Free gathered parameters after forward and gather them again for
  /// backward (true), or keep them gathered in between (false).
  bool reshard_after_forward = true;
  /// Steady-state overlap of the 1/g_o -> 1/g_p parameter all-gather with the
  /// forward pass (Megatron's --overlap-param-gather): the gather of the last
  /// update runs at the start of the step, each unit's before its first
  /// forward, instead of after the optimizer at the end.
  bool overlap_param_gather = false;
  /// Reduce each unit's final gradients as soon as its last backward is done,
  /// overlapping the rest of the backward pass (true: DDP buckets, FSDP,
  /// Megatron's --overlap-grad-reduce), or only after the stage's whole
  /// backward pass (false: Megatron-LM's default, the runs of Narayanan et al.
  /// 2021, Korthikanti et al. 2022 and vTrain). Applies to the reduction of the
  /// final gradients; gradients sharded over g_g > 1 are still reduce-scattered
  /// per micro-batch.
  bool overlap_grad_reduce = true;
  /// The host waits (torch.cuda.synchronize) for every pipeline receive
  /// before issuing more work, as Megatron does after its batched p2p
  /// (batch_p2p_sync, on by default there); off: receives are stream-ordered
  /// only and the host runs ahead.
  bool pipeline_p2p_sync = false;
  /// The pipeline schedule: 1F1B (interleaved when vpp > 1), ZB-H1 (vpp 1)
  /// or ZB-V (vpp 2), see PipelineSchedule.
  PipelineSchedule pipeline_schedule = PipelineSchedule::OneFOneB;
  /// ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): the fp32 master
  /// weights and Adam moments of the 1/g_o shard live in host memory; each
  /// unit's final 1/g_o gradients go device -> host once per step, Adam runs
  /// on the host CPU and the updated bf16 1/g_o parameters go host -> device.
  /// Needs the cluster's node.host.
  bool offload_optimizer = false;
  /// What each unit's forward keeps for its backward is copied device -> host
  /// after the forward and host -> device ahead of the backward, on their own
  /// streams; the device holds it only in flight. Needs node.host.
  bool offload_activations = false;
  /// Parameter offload as ZeRO-Infinity does it (Rajbhandari et al. 2021,
  /// arXiv:2104.07857): each rank's bf16 1/g_p parameter shard lives in host
  /// memory; before every use that needs a unit's parameters (each forward,
  /// and each backward unless kept since the forward) the shard goes host ->
  /// device, then is all-gathered over g_p (g_p = 1: the copy is the unit's
  /// whole parameters); the step's updated shard goes device -> host. The
  /// device holds parameters only in flight. Needs node.host.
  bool offload_params = false;
  /// Tensor-parallel communication overlap: each all-gather + GEMM and GEMM +
  /// reduce-scatter pair runs as pipelined chunks on a separate stream
  /// (userbuffers-style), cut as the stack's overlap knobs say
  /// (stacks::Overlap), instead of back to back.
  bool tp_comm_overlap = false;
  /// Megatron model parallelism: tensor-parallel size (with sequence
  /// parallelism by default), pipeline stages and virtual stages per pipeline
  /// rank (interleaved 1F1B when > 1). Data-parallel size = GPUs / (tp · pp).
  int tp = 1;
  bool sequence_parallel = true;
  int pp = 1;
  int vpp = 1;
  /// Context parallelism (ring attention): sequences split over cp ranks that
  /// pass K/V blocks around, overlapped with attention. Data-parallel size =
  /// GPUs / (tp · pp · cp); parameters are sharded over DP × CP.
  int cp = 1;
  /// DeepSpeed-Ulysses sequence parallelism (Jacobs et al. 2023,
  /// arXiv:2309.14509): sequences split over `ulysses` ranks outside
  /// attention; before attention an all-to-all turns each rank's tokens of
  /// every head into every token of heads / ulysses heads, after it another
  /// turns them back. Composes with ring CP (the ulysses ranks of one cp
  /// index each hold a cp chunk): data-parallel size = GPUs / (tp · pp · cp ·
  /// ulysses); parameters are sharded over DP × CP × ulysses.
  int ulysses = 1;
  /// Uneven pipelines (Megatron's --decoder-first/last-pipeline-num-layers):
  /// transformer layers on the first and on the last pipeline stage, the
  /// rest split evenly over the stages between; null: even. Each divides by vpp.
  std::optional<int> first_stage_layers;
  std::optional<int> last_stage_layers;
  /// Megatron's --pipeline-model-parallel-layout: the pp·vpp virtual stages in
  /// order, separated by '|', each a run of 'E' (embedding), 't' (a
  /// transformer layer) and 'L' (final norm, output layer and loss), with
  /// "X*N" and "(...)*N" repeating, e.g. "Et*7|(t*8|)*14t*7L"; null: even or
  /// first/last_stage_layers. See PipelineLayout.
  std::optional<std::string> pipeline_layout;
  /// Expert parallelism for MoE models: experts split over ep data-parallel
  /// ranks (dispatch and combine all-to-all); expert parameters then follow
  /// the same (g_p, g_g, g_o) plan over the DP / ep expert-data-parallel ranks.
  int ep = 1;
  /// Expert tensor-parallel size (Megatron-Core's --expert-tensor-parallel-size,
  /// MoE parallel folding); unset: tp, experts split like the dense FFN and ep
  /// over data-parallel ranks. Set otherwise, expert parallelism folds over
  /// the stage's tp x cp x dp ranks independently of attention: ep x expert_tp
  /// divides them, and the expert-data-parallel size is their quotient.
  std::optional<int> expert_tp;
  /// Expert parameters' own (g_p, g_g, g_o) over the expert-data-parallel
  /// ranks (DP / ep, or tp·DP / (expert_tp·ep) when folded); unset: the dense
  /// sizes capped there.
  std::optional<ShardSizes> expert_shards;

  /// Workload variability, which breaks the symmetry between ranks: the
  /// data-parallel ranks of each stage split into `variability_classes`
  /// contiguous blocks (rank classes); every rank has its own documents and
  /// jitter, a class runs the expected slowest of its ranks, and the classes
  /// take the expected order statistics of those maxima (expected_stragglers),
  /// so the slowest class is the expected slowest of all ranks; synchronising
  /// collectives then propagate it.
  int variability_classes = 1;
  /// Packed documents of exponentially distributed length with this mean
  /// (tokens): attention costs Σ lenᵢ² instead of seq². 0: one document per sequence.
  double doc_mean_tokens = 0;
  /// Packed documents of lengths from a named public distribution or a
  /// histogram (plan/doc_lengths.hpp); instead of doc_mean_tokens.
  std::optional<std::string> doc_lengths;
  /// Relative standard deviation of each (rank, micro-batch)'s compute time.
  double compute_jitter = 0;
  /// MoE routing skew: expert j receives tokens ∝ 1/(j+1)^skew (Zipf); 0 is
  /// uniform. With ep > 1 each expert-parallel rank index becomes its own rank
  /// class: expert GEMMs and all-to-alls grow with the load of its experts.
  double moe_skew = 0;
  std::uint64_t seed = 1;
};

/// Ranks a sequence is split over: ring CP times Ulysses.
[[nodiscard]] inline int sequence_split(const PlanOptions& o) { return o.cp * o.ulysses; }

/// What a plan runs on, loaded once (explore::resolve_inputs): the model, the
/// cluster sized to the job's GPUs (calibration and what-if changes already
/// applied) and the software stack. Inputs, not plan options: no key, flag or
/// plan-file entry; the Schedule's provenance records each. Lowering takes
/// the stack's kernels, host costs, collective granularity and copies.
struct Inputs {
  const models::ModelSpec& model;
  const topologies::Topology& cluster;
  std::shared_ptr<const stacks::Stack> stack = stacks::default_stack();  // never null
};

/// How lowering is bounded and checked: neither inputs nor plan options.
struct LowerOptions {
  /// The most ops lowering may build, checked against estimate_work before
  /// any op is built (--max-ops).
  std::int64_t max_ops = kDefaultMaxOps;
  /// core::check_schedule before return (plan search skips it for plans it
  /// only scores; a caller whose engine checks progress skips it too).
  bool check = true;
  /// Ops carry their names (traces, error messages). Plan search's walks read
  /// none: without, an op holds an empty name and costs no string of its own;
  /// buffers keep theirs (allocations are matched by them).
  bool names = true;
};

/// The (g_p, g_g, g_o) a strategy uses on `dp` data-parallel ranks of this
/// cluster; core::ProblemError naming param_shard/grad_shard/optim_shard when
/// the sizes do not divide or nest.
[[nodiscard]] ShardSizes resolve_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c);
/// The same without throwing: the problems (empty: `out` holds the sizes).
[[nodiscard]] std::vector<core::Problem> check_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c,
                                                      ShardSizes& out);
/// The expert-data-parallel ranks of an MoE plan whose dense states shard
/// over `shard_ranks` (tp·shard_ranks / (expert_tp·ep)), and the group sizes
/// the experts' states shard over there: the plan's expert_shards, else `sh`
/// capped at those ranks. Divisibility is check_plan's.
[[nodiscard]] int expert_data_parallel(const PlanOptions& o, int shard_ranks);
[[nodiscard]] ShardSizes expert_shard_sizes(const PlanOptions& o, int shard_ranks, const ShardSizes& sh);
/// Whether collectives are issued asynchronously: the plan's `async`, unset:
/// on for hzp when `stack` issues from background threads.
[[nodiscard]] bool resolve_async(const PlanOptions& o, const stacks::StackSpec& stack);

/// Bytes per parameter of the Adam optimizer step: read the gradient (4),
/// read and write the fp32 master weight, first and second moments (3 x 8),
/// write the bf16 parameter (2).
inline constexpr std::int64_t kAdamBytesPerParam = 30;
/// Device memory NCCL holds per communicator a rank uses: its default
/// NCCL_BUFFSIZE of 4 MiB per channel and direction (NCCL environment
/// documentation), for an assumed 8 channels and a ring's two peers.
inline constexpr std::int64_t kNcclBufferBytes = 4LL * 1024 * 1024 * 8 * 2;
/// Chunks of a tensor-parallel collective overlapped with its GEMM.
inline constexpr int kTpOverlapChunks = 4;
/// fp32 master weight + Adam's two moments.
inline constexpr std::int64_t kOptimizerStateBytesPerParam = 12;
/// offload_optimizer: the host memory CPU Adam streams per parameter besides
/// reading the gradient (fp32 4 or bf16 2 bytes): read and write the fp32
/// master weight and both moments (3 x 8) and write the bf16 parameter it
/// uploads (2); with an fp32 gradient, kAdamBytesPerParam. The CPU step
/// (ZeRO-Offload's vectorised CPU Adam, Ren et al. 2021, arXiv:2101.06840) is
/// modelled as bound by this traffic at the node's host memory bandwidth.
inline constexpr std::int64_t kCpuAdamBytesPerParam = 26;
/// offload_optimizer: the host memory per parameter of a rank's 1/g_o shard
/// besides its gradient landing buffer (grad_dtype): the optimizer states and
/// the bf16 staging buffer of the upload.
inline constexpr std::int64_t kHostStateBytesPerParam = kOptimizerStateBytesPerParam + 2;

/// Rank layout: rank = t + tp·(d + dp·p) for tensor rank t, data-parallel
/// rank d and pipeline stage p (tensor ranks innermost, so they share a node).
[[nodiscard]] inline int rank_of(int t, int d, int p, int tp, int dp) { return t + tp * (d + dp * p); }

/// Which part of a backward a slot runs: all of it (1F1B), or under a
/// zero-bubble schedule its B (recomputation and input gradients) or its W
/// (weight gradients) alone.
enum class BackwardPart { Whole, Input, Weight };

/// One slot of a pipeline stage's schedule: a micro-batch through one model chunk.
struct PipelineSlot {
  std::int64_t micro_batch = 0;
  int chunk = 0;
  bool backward = false;
  BackwardPart part = BackwardPart::Whole;  // for a backward slot
  friend bool operator==(const PipelineSlot&, const PipelineSlot&) = default;
};

/// The order in which stage `stage` of `pp` runs `m` micro-batches through its
/// `vpp` chunks: 1F1B (warm-up of pp − stage − 1 forwards, then one forward one
/// backward, then the remaining backwards), or Megatron's interleaved 1F1B for
/// vpp > 1 (m a multiple of pp); under a zero-bubble schedule (plan/zero_bubble.cpp)
/// every backward is a B slot and a later W slot.
[[nodiscard]] std::vector<PipelineSlot> pipeline_order(int stage, int pp, int vpp, std::int64_t m,
                                                       PipelineSchedule schedule = PipelineSchedule::OneFOneB);
/// The relative times of a chunk's F, B and W passes, which ZB-V builds its
/// order with (as the paper's schedules take the profiled times).
struct PassTimes {
  double forward = 1, input = 1, weight = 1;
};
/// A transformer layer's F, B and W passes in proportion to their FLOPs.
[[nodiscard]] PassTimes layer_pass_times(const models::StepGraph& graph);
/// The orders of every stage at once (ZB-V builds them together).
[[nodiscard]] std::vector<std::vector<PipelineSlot>> pipeline_orders(int pp, int vpp, std::int64_t m,
                                                                     PipelineSchedule schedule, PassTimes times = {});

/// What the plan check, the lowering, plan search and the explanation know of
/// a pipeline schedule, one entry each: the built-ins (plan/zero_bubble.cpp)
/// and any registered since. A new schedule is one entry and its order
/// function, registered in one file.
struct PipelineScheduleTraits {
  PipelineSchedule schedule;
  std::string_view name;
  /// Each backward runs as B (input gradients) and W (weight gradients).
  bool split_backward;
  /// Two chunks a stage placed in a V: stage p holds virtual stages p and
  /// 2pp - 1 - p; stage 0 runs 2pp - 1 forwards of chunk 0 before its first backward.
  bool v_shape;
  /// Every stage also holds its mirror stage's copy; micro-batches from both ends.
  bool mirrored;
  /// The vpp it runs with; 0: any (interleaved when above 1).
  int vpp;
  /// Its fill and drain cannot be hidden: (pp - 1) / vpp micro-batches of one
  /// stage's work (the zero-bubble schedules may hide them all).
  bool fills_and_drains;
  /// Its step is affine in the micro-batch count from this many per stage on.
  int settled_per_stage;
  /// Every stage's slots for m micro-batches per rank (its pipeline_orders).
  std::vector<std::vector<PipelineSlot>> (*orders)(int pp, int vpp, std::int64_t m, PassTimes times);
  /// Its own legality beyond `vpp` (DualPipe: an even pp and micro-batch
  /// count), checked by check_plan before the generic rules: the problem,
  /// naming its option key, or nullopt where it runs. Null: none.
  std::optional<core::Problem> (*check)(int pp, int vpp, std::int64_t micro_batches) = nullptr;
};
/// Every schedule: the built-ins in kPipelineSchedules' order, then the registered ones.
[[nodiscard]] const std::vector<PipelineScheduleTraits>& pipeline_schedules();
/// A schedule's entry (std::logic_error for an id nobody registered).
[[nodiscard]] const PipelineScheduleTraits& traits(PipelineSchedule s);
/// Adds a schedule under the next id (its `schedule` is set to it) and
/// returns the id. Register before the plan option table is first read (a
/// static initializer does) for its name to be a choice of every channel.
PipelineSchedule register_pipeline_schedule(PipelineScheduleTraits t);

/// Where the model's layers sit on the pipeline. Virtual stage v (v = chunk ·
/// pp + stage, Megatron's order) holds layers [first_layer[v],
/// first_layer[v + 1]); the embedding rides on virtual stage 0, the head
/// (final norm, output layer, loss) on the last.
struct PipelineLayout {
  int pp = 1;
  int vpp = 1;
  std::vector<int> first_layer;  // pp·vpp + 1 entries; the last is the layer count
  /// ZB-V's placement: chunk 0 runs down the stages, chunk 1 back up, so
  /// virtual stage v sits on stage v (v < pp) or 2·pp − 1 − v, chunk 1 (and
  /// the embedding and the head both on stage 0). Otherwise Megatron's
  /// v = chunk · pp + stage.
  bool v_shape = false;
  /// DualPipe's placement: stage p runs virtual stage p as chunk 0 and a copy
  /// of virtual stage pp − 1 − p as chunk 1 (vpp stays 1: the copies are
  /// not further virtual stages). Chunk 1 carries the embedding on the last
  /// stage and the head on the first.
  bool dual = false;

  [[nodiscard]] int virtual_stages() const { return pp * vpp; }
  /// The pipeline stage and chunk virtual stage v runs on, and back.
  [[nodiscard]] int stage_of(int v) const { return v_shape && v >= pp ? 2 * pp - 1 - v : v % pp; }
  [[nodiscard]] int chunk_of(int v) const { return v / pp; }
  [[nodiscard]] int virtual_stage(int stage, int chunk) const {
    return v_shape && chunk == 1 ? 2 * pp - 1 - stage : chunk * pp + stage;
  }
  [[nodiscard]] int layers_of(int v) const;
  /// The virtual stage that holds `layer` (for a layer in [0, layers)).
  [[nodiscard]] int virtual_stage_of(int layer) const;
  /// Layers of pipeline stage p over its vpp chunks.
  [[nodiscard]] int stage_layers(int p) const;
  [[nodiscard]] int max_stage_layers() const;
  /// Whether every virtual stage holds the same number of layers.
  [[nodiscard]] bool even() const;
  /// Megatron's layout text of this layout, runs of equal stages folded:
  /// "Et*7|(t*8|)*14t*7L".
  [[nodiscard]] std::string text() const;
  friend bool operator==(const PipelineLayout&, const PipelineLayout&) = default;
};

/// The layout a plan asks for: pipeline_layout, else first/last_stage_layers,
/// else layers split evenly over pp·vpp virtual stages. The problems name
/// the option (empty: `out` holds the layout).
[[nodiscard]] std::vector<core::Problem> check_pipeline_layout(const models::ModelSpec& m, const PlanOptions& o,
                                                               PipelineLayout& out);
/// The same, throwing core::ProblemError.
[[nodiscard]] PipelineLayout pipeline_layout(const models::ModelSpec& m, const PlanOptions& o);
/// Parses Megatron's layout text into per-virtual-stage layer counts (what
/// check_pipeline_layout validates against the model and the pipeline);
/// problems name `pipeline_layout`.
[[nodiscard]] std::vector<core::Problem> parse_pipeline_layout(std::string_view text, int pp, int vpp, int layers,
                                                               PipelineLayout& out);
/// A layout for `layers` over pp·vpp virtual stages when they do not divide:
/// every virtual stage holds ceil(layers / (pp·vpp)) layers but for the
/// shortfall, taken one layer at a time from the ends inwards (the first and
/// last virtual stages, which also carry the embedding and the head, first).
[[nodiscard]] PipelineLayout balanced_layout(int layers, int pp, int vpp);

/// The most micro-batches per rank a plan may have (the Schedule holds them all).
inline constexpr std::int64_t kMaxMicroBatches = 4096;

/// How the global batch splits: sequences, data-parallel size, micro-batches.
struct BatchSplit {
  std::int64_t seq_len = 0;
  std::int64_t sequences = 0;
  /// The sequences asked for, before round_batch rounded them to `sequences`.
  std::int64_t requested_sequences = 0;
  int data_parallel = 0;
  std::int64_t micro_batches = 0;  // per rank
};
/// Throws core::ProblemError naming the option when the batch does not divide.
[[nodiscard]] BatchSplit split_batch(const models::ModelSpec& m, int world, const PlanOptions& o);
/// The same without throwing: the problems, stopping at the first that leaves
/// nothing further to check (empty: `out` holds the split).
[[nodiscard]] std::vector<core::Problem> check_batch(const models::ModelSpec& m, int world, const PlanOptions& o,
                                                     BatchSplit& out);

/// Per rank class and micro-batch: what the workload's variability makes of
/// the nominal step (attention and compute factors; expert-load factor of the class).
struct Workload {
  std::vector<double> attention;  // per micro-batch: Σ lenᵢ² / seq² of the class's slowest rank
  std::vector<double> compute;    // per micro-batch: jitter factor of the class's slowest rank
  double experts = 1.0;           // this class's expert load relative to uniform
};
/// What the classes of a plan stand for: `classes` rank classes drawing
/// independently, each the slowest of `ranks` data-parallel ranks; ranks wait
/// for each other every `period` micro-batches, each of `micro_batch`
/// sequences of `seq_len` tokens.
struct WorkloadShape {
  std::int64_t seq_len = 0;
  std::int64_t micro_batch = 1;
  std::int64_t period = 1;
  int classes = 1;
  std::int64_t ranks = 1;
  bool at_mean = false;  // every class runs the mean work (ResolvedPlan::ranks_at_mean)
};
/// The expected order statistics of the classes' factors, ascending: entry k
/// is the expected k-th slowest of the classes' maxima (each the slowest of
/// its ranks over a period), so the last is the expected slowest of all ranks.
struct Stragglers {
  std::vector<double> attention;
  std::vector<double> compute;
  std::int64_t period = 1;
  bool at_mean = false;  // the factors are the mean's, and experts carry the mean load
};
/// Computed once per plan (deterministic in the seed through the document
/// sample); 1.0 throughout without documents or jitter.
[[nodiscard]] Stragglers expected_stragglers(const PlanOptions& o, const WorkloadShape& w);
/// Class `data_class`'s factors: in period p it runs order statistic
/// (data_class + p) mod classes, so the straggler moves from class to class.
[[nodiscard]] Workload class_workload(const PlanOptions& o, const Stragglers& s, std::int64_t micro_batches,
                                      int data_class, int expert_rank, int ep, int experts);
/// The plan's document lengths: `doc_lengths`, else exponential of
/// `doc_mean_tokens`, else none (one document per sequence). Throws
/// core::ProblemError naming doc_lengths when it does not parse.
[[nodiscard]] std::optional<DocLengths> doc_lengths(const PlanOptions& o);

/// A plan with every default resolved: `options` holds the group sizes the
/// strategy uses (expert ones for MoE models, else null), async, sequence
/// parallelism as it runs (only with tp > 1), the sequence length and the
/// global batch in sequences (tokens null).
struct ResolvedPlan {
  PlanOptions options;
  BatchSplit batch;
  ShardSizes shards;      // the dense (g_p, g_g, g_o)
  int shard_ranks = 0;    // DP x CP: the ranks parameters are replicated over
  PipelineLayout layout;  // the layers of each virtual stage
  /// The stack it runs under (never null in a plan check_plan resolved):
  /// the provenance records its name, file and SHA-256.
  std::shared_ptr<const stacks::Stack> stack;
  /// Not from the plan: every rank runs the mean of the work the plan's
  /// documents, jitter and routing skew draw, not the expected slowest of
  /// its class: the reference that says what stragglers cost
  /// (explore::PlanTerms::stragglers_s). Not in the provenance.
  bool ranks_at_mean = false;
  /// The Schedule's provenance "plan": the resolved options (a plan file's
  /// body) plus micro_batches, data_parallel and shard_ranks.
  [[nodiscard]] nlohmann::json provenance() const;
  [[nodiscard]] std::string provenance_json() const;
};

/// Every problem of the plan on this model and cluster, fields named by their
/// option key (plan/options.hpp); empty when lower() accepts it, and then
/// `resolved` (if given) holds the resolved plan. Never throws for bad input.
[[nodiscard]] std::vector<core::Problem> check_plan(const Inputs& in, const PlanOptions& o,
                                                    ResolvedPlan* resolved = nullptr);
/// Why `stack` cannot run the plan ("torch-fsdp2 runs ddp, fsdp and hsdp,
/// not hzp"; "deepspeed-zero runs no tensor parallelism"), from its `runs`;
/// nullopt where it can. Not a lowering problem: hzp simulates the plan
/// under the stack's costs either way; plan search proposes only what it runs.
[[nodiscard]] std::optional<std::string> not_runnable(const stacks::StackSpec& stack, const PlanOptions& o);

/// The resolved plan; core::ProblemError with every problem otherwise.
[[nodiscard]] ResolvedPlan resolve_plan(const Inputs& in, const PlanOptions& o);

/// What lowering a resolved plan will build, from the step graph and the
/// layout alone (no op is built): programs (rank classes) and ops, within
/// about a factor of two (plan/work_estimate_test.cpp holds it to that).
struct WorkEstimate {
  std::int64_t programs = 0;
  std::int64_t ops = 0;
  [[nodiscard]] std::int64_t bytes() const { return ops * kBytesPerOp; }
};
[[nodiscard]] WorkEstimate estimate_work(const models::ModelSpec& m, const PlanOptions& o, const ResolvedPlan& rp);
/// InputError("command line", "--max-ops", ...) when the estimate exceeds max_ops.
void check_work(const WorkEstimate& w, std::int64_t max_ops);

/// A lowered plan: the Schedule and the resolved plan beside it.
struct LoweredPlan {
  core::Schedule schedule;
  ResolvedPlan plan;
};
/// Lowers the plan on these inputs to a Schedule, checked by
/// core::check_schedule before return unless `lo.check` is off. Bad plans
/// throw core::ProblemError (see check_plan); one over `lo.max_ops`,
/// core::InputError.
[[nodiscard]] LoweredPlan lower_plan(const Inputs& in, const PlanOptions& o, const LowerOptions& lo = {});
/// The same for a plan check_plan already resolved (`o` as it was checked):
/// what plan search uses to check each candidate once.
[[nodiscard]] LoweredPlan lower_resolved(const Inputs& in, const PlanOptions& o, ResolvedPlan resolved,
                                         const LowerOptions& lo = {});
/// lower_resolved, or nullopt where the Schedule would hold more than
/// `lo.max_ops` ops (estimate_work, one step graph for both): plan search.
[[nodiscard]] std::optional<LoweredPlan> lower_within(const Inputs& in, const PlanOptions& o, ResolvedPlan resolved,
                                                      const LowerOptions& lo = {});
/// lower_plan(...).schedule.
[[nodiscard]] core::Schedule lower(const Inputs& in, const PlanOptions& o, const LowerOptions& lo = {});

/// Whether an op of a lowered Schedule exists or costs what it does because
/// of the data-parallel sharding (g_p, g_g, g_o, async), by its role: the
/// parameter gathers and gradient reductions of the data-parallel groups,
/// gradient accumulation, the optimizer and zeroing the gradients. Every other
/// op is the same under every sharding of one model-parallel plan, which is
/// what bounds a plan search. (`s` is unused since schema 2; kept for callers.)
[[nodiscard]] bool is_sharding_op(const core::Schedule& s, const core::Op& op);

}  // namespace hzp::plan
