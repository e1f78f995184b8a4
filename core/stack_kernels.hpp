// What a software stack's kernels are, in the terms the step graph needs: how
// many kernels each non-GEMM op launches and the HBM bytes they move, which
// fused attention kernel runs, and what selective recomputation recomputes.
// `stacks/` reads them from a stack file; `models/` builds the step graph with
// them. The defaults are one fused kernel per op.
#pragma once

#include <optional>
#include <string_view>

#include "core/names.hpp"

namespace hzp::core {

/// One pass of a non-GEMM op: the kernels it launches and the HBM bytes they
/// move (reads + writes) per element of the op's tensor, with 2-byte
/// (bf16/fp16) activations.
struct KernelCost {
  int kernels = 1;
  double bytes_per_element = 0;
};
struct OpKernels {
  KernelCost forward, backward;
};

/// The element-wise and normalisation ops of a transformer, each per element
/// of the tensor it touches: norms and residual adds of the hidden state,
/// rotary of Q and K, SwiGLU and GELU of the FFN's hidden width (one output
/// element), the loss of the logits, the embedding lookup of its output. The
/// defaults are one fused kernel reading its inputs and writing its output
/// once, its backward twice that.
struct NonGemmKernels {
  OpKernels norm{{1, 4}, {1, 8}};
  OpKernels rope{{1, 4}, {1, 8}};
  OpKernels swiglu{{1, 6}, {1, 12}};
  OpKernels gelu{{1, 4}, {1, 8}};
  OpKernels residual{{1, 6}, {1, 12}};
  OpKernels loss{{1, 6}, {1, 12}};
  OpKernels embedding{{1, 4}, {1, 8}};
  /// Grouped-query attention: K and V copied out to every query head before
  /// the attention kernel, their gradients summed back after it.
  bool repeat_kv = false;
};

/// The fused attention kernel family (the device profile gives each one's efficiency).
enum class AttentionKernel { Flash2, Flash3, Cudnn };
/// Its names, the one table every reader and writer uses (stack files, device
/// profiles, the Schedule).
inline constexpr Names<AttentionKernel, 3> kAttentionKernels{
    {{AttentionKernel::Flash2, "flash2"}, {AttentionKernel::Flash3, "flash3"}, {AttentionKernel::Cudnn, "cudnn"}}};
[[nodiscard]] constexpr std::string_view to_string(AttentionKernel k) { return name_of(kAttentionKernels, k); }
[[nodiscard]] constexpr std::optional<AttentionKernel> parse_attention_kernel(std::string_view s) {
  return parse_name(kAttentionKernels, s);
}

/// What `recompute: selective` recomputes.
///  - CoreAttention: the attention core (unfused: scores, softmax, dropout;
///    fused: the attention kernel's forward) — Megatron-LM's policy.
///  - EveryOtherMatmul: every non-GEMM op of a layer and every second GEMM,
///    keeping the others' outputs — an op-level policy of PyTorch's selective
///    activation checkpointing.
enum class SelectivePolicy { CoreAttention, EveryOtherMatmul };
inline constexpr Names<SelectivePolicy, 2> kSelectivePolicies{
    {{SelectivePolicy::CoreAttention, "core_attention"}, {SelectivePolicy::EveryOtherMatmul, "every_other_matmul"}}};

/// How a stack runs the cross-entropy when it is not one fused kernel
/// (`fused_loss` off), which decides what its backward holds beside the fp32
/// probabilities it saved:
///  - MegatronVocabParallel: Megatron's vocab-parallel cross-entropy
///    (megatron/core/tensor_parallel/cross_entropy.py) turns the fp32 logits
///    into the softmax in place, saves it, and its backward turns that into
///    the gradient in place: nothing more.
///  - TorchCrossEntropy: F.cross_entropy over the logits cast to fp32
///    (log_softmax, then nll_loss; PyTorch stacks). Its backward holds the
///    saved log-probabilities, nll_loss's dense fp32 gradient and
///    log_softmax's fp32 gradient of the logits: two fp32 copies more. Under
///    DTensor loss parallelism (tensor parallelism; torch/distributed/tensor/
///    parallel/loss.py) the two backward steps are one decomposed expression,
///    (zeros scattered with the target + exp(log-probabilities)) x grad,
///    whose zeros, exp and sum are three fp32 copies more.
enum class UnfusedLoss { MegatronVocabParallel, TorchCrossEntropy };
inline constexpr Names<UnfusedLoss, 2> kUnfusedLosses{{{UnfusedLoss::MegatronVocabParallel, "megatron_vocab_parallel"},
                                                       {UnfusedLoss::TorchCrossEntropy, "torch_cross_entropy"}}};

/// What an FP8 linear layer saves of its input for the weight gradient.
/// HighPrecision: the bf16 input, cast again in the backward (torchao's
/// Float8Linear: matmul_with_hp_or_float8_args saves input_hp and
/// weight_hp, torchao/float8/float8_linear.py). Fp8: the FP8 copy the weight
/// gradient reads, one byte an element, beside the bf16 tensor only where
/// that is kept anyway (Transformer Engine on Hopper: "1 MB (input in FP8
/// saved for backward)" for a 1024 x 1024 bf16 input, docs/features/
/// low_precision_training/performance_considerations, "Memory usage").
enum class Fp8SavedInputs { HighPrecision, Fp8 };
inline constexpr Names<Fp8SavedInputs, 2> kFp8SavedInputs{
    {{Fp8SavedInputs::HighPrecision, "high_precision"}, {Fp8SavedInputs::Fp8, "fp8"}}};

}  // namespace hzp::core
