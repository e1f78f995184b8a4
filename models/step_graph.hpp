// The per-layer step graph: the forward and backward ops of each unit of the
// model for one micro-batch — FLOPs, HBM bytes, GEMM shapes — plus parameters
// and the activation bytes kept for backward under each recomputation mode.
// `plan/` turns it into a Schedule; nothing here knows about hardware.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/names.hpp"
#include "core/stack_kernels.hpp"
#include "core/units.hpp"
#include "models/model_spec.hpp"
#include "schedule/schedule.hpp"

namespace hzp::models {

enum class Recompute { None, Selective, Full };
inline constexpr core::Names<Recompute, 3> kRecomputes{
    {{Recompute::None, "none"}, {Recompute::Selective, "selective"}, {Recompute::Full, "full"}}};

/// The training precision of the linear layers' GEMMs. Bf16: every GEMM in
/// bf16. The FP8 recipes (Transformer Engine's and torchao Float8's): the
/// linear layers' forward, input-gradient and weight-gradient GEMMs run on
/// FP8 operands (bf16 output) at the device's fp8 rate; attention, the
/// router and the output layer stay bf16. Around each FP8 GEMM: a
/// cast-transpose of its input (forward; read bf16, write FP8 and its FP8
/// transpose for the weight gradient) and of its output gradient (backward);
/// the weight's cast-transpose once per forward. Delayed scaling takes the
/// scale from an amax history (one fused amax all-reduce per layer forward
/// over the tensor-parallel group); current scaling computes each tensor's
/// amax first (one more read pass, and a 4-byte all-reduce over the
/// tensor-parallel group for the sequence-parallel inputs); block scaling
/// (1x128 / 128x128, DeepSeek-V3 and MXFP8 style) computes its scales inside
/// the cast and writes one fp32 scale per 128 elements.
enum class Precision { Bf16, Fp8Delayed, Fp8Current, Fp8Block };
inline constexpr core::Names<Precision, 4> kPrecisions{{{Precision::Bf16, "bf16"},
                                                        {Precision::Fp8Delayed, "fp8-delayed"},
                                                        {Precision::Fp8Current, "fp8-current"},
                                                        {Precision::Fp8Block, "fp8-block"}}};

struct GraphOptions {
  std::int64_t seq_len = 0;
  std::int64_t micro_batch = 1;  // sequences per micro-batch
  Recompute recompute = Recompute::None;
  /// Fused attention (FlashAttention): no s×s matrices kept, causal blocks skipped.
  /// Off: scores and context as batched GEMMs with softmax and dropout between
  /// them (what Korthikanti et al. measured).
  bool flash_attention = true;
  /// The softmax cross-entropy as one fused kernel (forward and backward);
  /// off: Megatron's vocab-parallel cross-entropy in eager PyTorch, six
  /// kernels over the fp32 logits forward and two backward.
  bool fused_loss = true;
  /// The software stack's kernels: the decomposition of every non-GEMM op
  /// (the fused loss included), the fused attention kernel's family and what
  /// selective recomputation recomputes.
  core::NonGemmKernels kernels{};
  core::AttentionKernel attention_kernel = core::AttentionKernel::Flash2;
  core::SelectivePolicy selective = core::SelectivePolicy::CoreAttention;
  /// How the stack runs the loss when it is not fused: what its backward holds.
  core::UnfusedLoss unfused_loss = core::UnfusedLoss::MegatronVocabParallel;
  /// Under FP8: what each linear layer saves of its input for the backward.
  core::Fp8SavedInputs fp8_saved_inputs = core::Fp8SavedInputs::HighPrecision;
  core::Dtype dtype = core::Dtype::Bf16;
  /// Megatron tensor parallelism over `tp` ranks: attention heads, FFN and
  /// vocabulary split column/row-wise; with sequence parallelism the norms,
  /// residuals and dropouts run on 1/tp of the tokens, joined by all-gathers
  /// and reduce-scatters; without it, by all-reduces.
  int tp = 1;
  bool sequence_parallel = true;
  /// Expert parallelism: each rank of an `ep` group holds experts / ep of
  /// every MoE layer; tokens reach their experts by an all-to-all (dispatch)
  /// and come back by another (combine).
  int ep = 1;
  /// Expert tensor parallelism (Megatron-Core's MoE parallel folding): 0, or
  /// tp, splits experts like the dense FFN, inside the layer's tensor-parallel
  /// all-gather, over ep data-parallel ranks. Any other size folds the
  /// experts over the stage's tp x cp x dp ranks independently of attention:
  /// the router and the all-to-alls run on this rank's own sequence-parallel
  /// tokens, experts split etp ways (an all-gather and reduce-scatter of the
  /// dispatched tokens over the etp group), shared experts stay on tp.
  int etp = 0;
  /// Context parallelism: each rank holds seq_len / cp tokens of every
  /// sequence; its attention covers its queries against all keys (1/cp of
  /// the attention FLOPs, load-balanced under the causal mask). The plan
  /// passes K/V blocks around the cp ranks (ring attention); needs flash attention.
  int cp = 1;
  /// DeepSpeed-Ulysses: each rank holds seq_len / (cp · ulysses) tokens
  /// outside attention; an all-to-all over the ulysses group before the core
  /// attention gives it the cp chunk's every token for heads / ulysses of
  /// its heads (K/V heads replicated up to ulysses when fewer), and another
  /// after it brings the context back to its own tokens.
  int ulysses = 1;
  Precision precision = Precision::Bf16;
  /// FP8: the weights arrive as FP8 from an FP8 all-gather (the plan's
  /// fp8_param_gather: cast on the shard before the gather), so the layer
  /// casts none of them itself.
  bool fp8_gathered_weights = false;
};

/// Which group a collective of the step graph runs on.
enum class CommGroup { Tp, Ep, Etp, Ulysses };

enum class Phase { Forward, Recompute, BackwardInput, BackwardWeight };

/// The s×s parts of unfused attention: the scores and context batched GEMMs,
/// the softmax (one fused kernel or its eager steps) and the dropout. The fused
/// (flash) kernel is ComputeKind::Attention and None here.
enum class AttentionPart { None, Scores, Softmax, Dropout, Context };

/// One kernel's worth of work, or a tensor-parallel collective.
struct GraphOp {
  std::string name;
  core::ComputeKind kind = core::ComputeKind::Gemm;
  Phase phase = Phase::Forward;
  core::Flops flops{};  // executed on the device
  core::Bytes bytes{};  // HBM traffic (reads + writes); for a collective its buffer (nccl-tests size)
  std::optional<core::GemmShape> gemm;
  /// Set for a collective, over `comm_group`.
  std::optional<core::CollectiveKind> collective;
  CommGroup comm_group = CommGroup::Tp;
  /// Expert for the routed experts' kernels and all-to-alls (their cost follows
  /// the expert load), Dense for everything else.
  core::ParamClass param_class = core::ParamClass::Dense;
  AttentionPart attention = AttentionPart::None;
  int kernels = 1;  // kernels launched (a stack's eager op is several)
  /// The operands' dtype of a GEMM (Fp8: at the fp8 rate); Bf16 for everything else.
  core::Dtype dtype = core::Dtype::Bf16;
  std::optional<core::AttentionKernel> attention_kernel{};  // the fused attention kernel's family
};

enum class UnitKind { Embedding, Layer, Head };

/// What FSDP wraps as one piece: the embedding, each transformer layer, the head.
struct Unit {
  std::string name;
  UnitKind kind = UnitKind::Layer;
  int layer = -1;  // transformer layer index, -1 for embedding and head
  /// Dense parameters this unit owns on one tensor-parallel rank (a tied head owns none).
  std::int64_t params = 0;
  /// Expert parameters on one rank (routed experts / ep, split by tp): sharded
  /// and reduced over the expert-data-parallel dimension, apart from the dense ones.
  std::int64_t expert_params = 0;
  /// Parameters its kernels read (a tied head reads the embedding table): what
  /// a sharded plan must gather before running it.
  std::int64_t weight_params = 0;
  /// The dense parameters as the tensors a framework holds them in (one TP
  /// rank's sizes, summing to `params`): what a stack that gathers and
  /// reduces per parameter issues one collective for.
  std::vector<std::int64_t> tensors{};
  std::vector<GraphOp> forward;
  std::vector<GraphOp> backward;  // in execution order; recomputation first
  /// Activation bytes stored between this unit's forward and backward.
  core::Bytes activations{};
  /// Bytes that recomputation brings back to life for the duration of this
  /// unit's backward: what no recomputation would have stored, minus what was kept.
  core::Bytes recomputed{};
  /// Bytes its backward allocates beyond those and frees before it ends (an
  /// unfused PyTorch cross-entropy's fp32 gradients of the logits).
  core::Bytes backward_working{};
};

struct StepGraph {
  std::vector<Unit> units;  // forward order
  std::int64_t tokens = 0;  // per micro-batch
};

[[nodiscard]] StepGraph build_step_graph(const ModelSpec& m, const GraphOptions& o);

/// Unfused attention: whether the scale-mask-softmax of `attn_batches`
/// (micro-batch × heads on the rank) causal s×s score matrices runs as
/// Megatron's one fused kernel; otherwise as its eager fp32 fallback, five
/// kernels each way.
[[nodiscard]] bool fused_softmax_available(std::int64_t attn_batches, std::int64_t seq_len);

/// Activation bytes a transformer layer keeps for backward (per micro-batch).
/// For GPT-3 with dropout, LayerNorm and unfused attention this reproduces
/// Korthikanti et al. 2022, eq. (1)-(2): s·b·h·(34 + 5·a·s/h) without
/// recomputation, s·b·h·34 with selective recomputation.
[[nodiscard]] core::Bytes layer_activation_bytes(const ModelSpec& m, int layer, const GraphOptions& o);

}  // namespace hzp::models
