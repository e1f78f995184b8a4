// Step graph construction (see step_graph.hpp).
// The layer's forward kernels (attention, FFN, MoE, FP8 linears, Ulysses)
// are built in layer_ops.cpp with the same Builder (step_graph_builder.hpp).
//
// Conventions, stated once:
//  - A GEMM C[m×n] = A[m×k]·B[k×n] costs 2·m·n·k·batch FLOPs and moves
//    e·batch·(m·k + k·n + m·n) bytes (e = bytes per element of the dtype).
//  - Its backward is two GEMMs of equal FLOPs: dA = dC·Bᵀ (m, k, n) and
//    dB = Aᵀ·dC (k, n, m); for a linear layer, A is the activation (input
//    gradient, "dgrad") and B the weight (weight gradient, "wgrad").
//  - Attention scores and context: 2·b·H·s²·(d_qk + d_v) FLOPs forward when
//    the whole s×s matrix is computed. A fused (flash) kernel skips the masked
//    half of a causal mask, so it executes half of that; its backward
//    recomputes the scores and executes 2.5× its forward (FlashAttention-2's
//    accounting). Unfused, scores and context are batched GEMMs of full size
//    and their backward is 2× forward.
//  - Element-wise and norm kernels are bandwidth-bound: their bytes are what
//    they read plus write; their FLOPs are a few per element and never matter.
#include "models/step_graph.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "models/step_graph_builder.hpp"

namespace hzp::models {
namespace detail {

std::int64_t tokens_per_expert(const MoeSpec& e, std::int64_t T) {
  double t = e.capacity_factor * static_cast<double>(T) * e.top_k / e.experts;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(t)));
}

Dims dims(const ModelSpec& m, const GraphOptions& o) {
  Dims d{};
  d.e = core::dtype_bytes(o.dtype);
  d.s = o.seq_len;
  d.bs = o.micro_batch;
  d.s_local = d.s / (std::max(o.cp, 1) * std::max(o.ulysses, 1));
  d.T = d.s_local * d.bs;
  d.h = m.hidden;
  d.t = o.tp;
  d.sp = o.tp > 1 && o.sequence_parallel;
  d.Th = d.sp ? d.T / d.t : d.T;
  d.H = m.heads / d.t;
  const std::int64_t G = m.mla ? m.heads : m.kv_heads;
  d.G = std::max<std::int64_t>(1, G / d.t);
  d.dqk = m.qk_head_dim();
  d.dv = m.v_head_dim();
  return d;
}

}  // namespace detail

namespace {

using core::Bytes;
using core::ComputeKind;
using core::Flops;
using core::GemmShape;
using detail::Builder;
using detail::dims;
using detail::Dims;
using detail::folded;
using detail::layer_forward;
using detail::tokens_per_expert;
using detail::tp_enter;

// Backward of a forward op list: reverse order, GEMMs split into input and
// weight gradients, bandwidth kernels read and write twice as much.
std::vector<GraphOp> backward_of(const Builder& fwd, double flash_bwd_ratio) {
  std::vector<GraphOp> out;
  for (std::size_t idx = fwd.ops.size(); idx-- > 0;) {
    const GraphOp& f = fwd.ops[idx];
    if (!fwd.flags[idx].backward) continue;
    if (f.collective) {
      // The dual of a tensor-parallel collective: all-gather <-> reduce-scatter, all-reduce stays.
      GraphOp c = f;
      c.name = f.name + ".bwd";
      c.phase = Phase::BackwardInput;
      if (*f.collective == core::CollectiveKind::AllGather) c.collective = core::CollectiveKind::ReduceScatter;
      if (*f.collective == core::CollectiveKind::ReduceScatter) c.collective = core::CollectiveKind::AllGather;
      out.push_back(std::move(c));
    } else if (f.gemm) {
      const GemmShape g = *f.gemm;
      std::int64_t e = f.bytes.count() / (g.batch * (g.m * g.k + g.k * g.n + g.m * g.n));
      GraphOp dg = f, wg = f;
      dg.name = f.name + ".dgrad";
      dg.phase = Phase::BackwardInput;
      dg.gemm = GemmShape{g.m, g.k, g.n, g.batch};
      wg.name = f.name + ".wgrad";
      wg.phase = Phase::BackwardWeight;
      wg.gemm = GemmShape{g.k, g.n, g.m, g.batch};
      // Both operands of attention's batched GEMMs are activations.
      if (f.kind == ComputeKind::Gemm && g.batch > 1 &&
          (f.attention == AttentionPart::Scores || f.attention == AttentionPart::Context)) {
        wg.phase = Phase::BackwardInput;
        wg.name = f.name + ".dgrad2";
      }
      dg.bytes = Bytes(e * g.batch * (g.m * g.n + g.n * g.k + g.m * g.k));
      wg.bytes = dg.bytes;
      if (f.dtype == core::Dtype::Fp8) {
        // FP8 operands (the output gradient, the weight or input transposed), a bf16 result.
        constexpr std::int64_t result = 2;  // bytes per element of the bf16 result
        dg.bytes = Bytes(g.batch * (g.m * g.n + g.n * g.k + result * g.m * g.k));
        wg.bytes = Bytes(g.batch * (g.k * g.m + g.m * g.n + result * g.k * g.n));
      }
      out.push_back(std::move(dg));
      out.push_back(std::move(wg));
    } else if (f.kind == ComputeKind::Attention) {
      GraphOp b = f;
      b.name = f.name + ".bwd";
      b.phase = Phase::BackwardInput;
      b.flops = f.flops * flash_bwd_ratio;
      b.bytes = Bytes(f.bytes.count() * 2);
      out.push_back(std::move(b));
    } else {
      const Builder::Flags& fl = fwd.flags[idx];
      GraphOp b = f;
      b.name = fl.exact ? f.name : f.name + ".bwd";
      b.phase = Phase::BackwardInput;
      if (fl.bwd_bytes >= 0) {
        b.bytes = Bytes(fl.bwd_bytes);
        b.kernels = fl.bwd_kernels;
      } else if (!fl.exact) {
        b.bytes = Bytes(f.bytes.count() * 2);
      }
      out.push_back(std::move(b));
    }
  }
  return out;
}

// Matmul parameters of one routed expert.
std::int64_t ffn_expert_matmul(const ModelSpec& m) {
  return (m.ffn_activation == FfnActivation::SwiGlu ? 3 : 2) * m.hidden * m.moe->expert_ffn_hidden;
}

// The forward ops selective recomputation runs again before the backward:
// the attention core (unfused: its s×s parts up to the context GEMM; fused:
// the kernel), or every non-GEMM kernel and every second GEMM of the layer.
// An op-level policy also runs the sequence-parallel all-gathers again:
// torchtitan's keeps the reduce-scatters' outputs but not the all-gathers',
// which the recomputed K and up projections read, and PyTorch recomputes
// collectives inside a user-annotated checkpoint region (eager, and
// torch.compile's partitioner: force_save_collectives exempts them).
std::vector<GraphOp> selectively_recomputed(const std::vector<GraphOp>& forward, core::SelectivePolicy policy) {
  std::vector<GraphOp> out;
  int gemms = 0;
  for (const auto& op : forward) {
    if (op.collective) {
      if (policy == core::SelectivePolicy::EveryOtherMatmul && op.comm_group == CommGroup::Tp &&
          *op.collective == core::CollectiveKind::AllGather)
        out.push_back(op);
      continue;
    }
    bool again = false;
    if (policy == core::SelectivePolicy::CoreAttention) {
      again = op.attention == AttentionPart::Scores || op.attention == AttentionPart::Softmax ||
              op.attention == AttentionPart::Dropout || op.kind == ComputeKind::Attention;
    } else if (op.kind == ComputeKind::Gemm) {
      again = ++gemms % 2 == 0;
    } else {
      again = op.kind != ComputeKind::Attention;
    }
    if (again) out.push_back(op);
  }
  return out;
}

std::vector<GraphOp> with_phase(std::vector<GraphOp> ops, Phase ph, const std::string& suffix) {
  for (auto& op : ops) {
    op.phase = ph;
    op.name += suffix;
  }
  return ops;
}

}  // namespace

bool fused_softmax_available(std::int64_t attn_batches, std::int64_t seq_len) {
  // Megatron's FusedScaleMaskSoftmax.is_kernel_available for the causal
  // (upper-triangular) kernel: 16 < s <= 4096, s a multiple of 4, and the
  // micro-batch × heads-per-rank a multiple of the kernel's batches per block
  // (4 warps of one row each above 128 keys, of two rows each up to 128).
  const std::int64_t per_block = seq_len > 128 ? 4 : 8;
  return seq_len > 16 && seq_len <= 4096 && seq_len % 4 == 0 && attn_batches % per_block == 0;
}

namespace {

// What an op-level selective policy keeps of a dense layer (torchtitan's
// per-op SAC, torchtitan/models/llama/parallelize_llama.py: every output of
// aten.mm except every second one, the attention kernel's, and the tensor-
// parallel reduce-scatters'), as PyTorch runs the layer: separate linear
// layers in the order q, k, v, o, then gate, up, down (GLU) or fc1, fc2.
// Kept: the layer's input (what the checkpoint replays), q and v, the
// attention output and its fp32 log-sum-exp, the gate (fc1), the down
// projection's output (GLU: the seventh), and with sequence parallelism the
// two reduce-scattered outputs. Everything else the backward recomputes.
std::int64_t op_policy_kept(const ModelSpec& m, const Dims& d) {
  const std::int64_t e = d.e, T = d.T, h = d.h, Th = d.Th;
  const bool glu = m.ffn_activation == FfnActivation::SwiGlu;
  std::int64_t kept = e * Th * h + e * T * (d.H * d.dqk + d.G * d.dv + d.H * d.dv) + 4 * d.bs * d.H * d.s_local;
  kept += e * T * (m.ffn_hidden / d.t + (glu ? h : 0));
  if (d.sp) kept += 2 * e * Th * h;
  return kept;
}

}  // namespace

core::Bytes layer_activation_bytes(const ModelSpec& m, int layer, const GraphOptions& o) {
  const Dims d = dims(m, o);
  const std::int64_t e = d.e, s = d.s, bs = d.bs, T = d.T, h = d.h, Th = d.Th, H = d.H, G = d.G;
  const std::int64_t dqk = d.dqk, dv = d.dv;
  if (o.recompute == Recompute::Full) return Bytes(e * Th * h);  // the layer's input only
  if (o.recompute == Recompute::Selective && o.selective == core::SelectivePolicy::EveryOtherMatmul && !m.mla &&
      !m.is_moe_layer(layer) && o.flash_attention) {
    return Bytes(op_policy_kept(m, d));
  }
  const std::int64_t mask = m.dropout ? Th * h : 0;  // 1-byte dropout masks on h-sized outputs
  // FP8 linear layers that save their inputs in FP8 (Transformer Engine):
  // the QKV, FC1 and FC2 (down) projections' inputs at one byte an element
  // instead of e, and the output projection's FP8 copy of its input beside
  // the attention kernel's bf16 output, which that kernel's backward keeps
  // anyway. MoE experts and MLA's projections are counted in bf16.
  const bool fp8_saved = o.precision != Precision::Bf16 && o.fp8_saved_inputs == core::Fp8SavedInputs::Fp8 && !m.mla &&
                         !m.is_moe_layer(layer);
  const std::int64_t gemm_in = fp8_saved ? 1 : e;  // bytes an element of a saved projection input

  // Attention block: norm input and QKV-projection input (h-sized: split by
  // sequence parallelism only), Q, K, V (split by heads), then either the
  // fused kernel's output and log-sum-exp, or the output-projection input plus
  // (unless recomputed) the s×s softmax output, dropout mask and dropout output.
  std::int64_t attn = (e + gemm_in) * Th * h + e * T * (H * dqk + G * dqk + G * dv) + mask;
  if (fp8_saved) attn += T * H * dv;
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    attn += 2 * e * T * (a.q_lora_rank + a.kv_lora_rank) + e * T * a.qk_rope_head_dim;
  }
  if (m.qk_norm) attn += e * T * (H + G) * dqk;
  if (o.flash_attention) {
    // The kernel's output (the output projection keeps it as its input
    // either way) and its log-sum-exp, unless the core is recomputed.
    const bool core_recomputed =
        o.recompute == Recompute::Selective && o.selective == core::SelectivePolicy::CoreAttention;
    attn += e * T * H * dv + (core_recomputed ? 0 : 4 * bs * H * d.s_local);
  } else {
    attn += e * T * H * dv;
    // The softmax output is kept in fp32 on Megatron's eager fallback; under
    // Ulysses each rank holds the s×s scores of H / ulysses heads.
    const std::int64_t Hu = H / std::max(o.ulysses, 1);
    const std::int64_t probs = fused_softmax_available(bs * Hu, s) ? e : 4;
    if (o.recompute == Recompute::None) attn += (probs + (m.dropout ? 1 + e : 0)) * bs * Hu * s * s;
  }

  // FFN block: norm input and FFN input, then what each activation needs.
  const bool glu = m.ffn_activation == FfnActivation::SwiGlu;
  const std::int64_t per_f = glu ? 3 : 2;  // SwiGLU: gate, up, down input; GELU: its input and output
  std::int64_t ffn = (e + gemm_in) * Th * h + mask;
  if (m.is_moe_layer(layer) && folded(o)) {
    // Folded: the router and the combine on this rank's Th tokens; the
    // experts' inputs as gathered over etp, their hidden split etp ways.
    const MoeSpec& x = *m.moe;
    const std::int64_t rows = tokens_per_expert(x, Th) * x.experts * o.etp;
    ffn += 4 * Th * x.experts + e * rows * h + e * rows * x.expert_ffn_hidden / o.etp * per_f + e * Th * x.top_k * h +
           e * T * x.shared_experts * x.shared_expert_ffn_hidden / d.t * per_f;
  } else if (m.is_moe_layer(layer)) {
    const MoeSpec& x = *m.moe;
    std::int64_t rows = tokens_per_expert(x, T) * x.experts;
    ffn += 4 * T * x.experts                               // router probabilities (fp32)
           + e * rows * h                                  // permuted expert inputs
           + e * rows * x.expert_ffn_hidden / d.t * per_f  // expert activations
           + e * T * x.top_k * h                           // expert outputs, for the gate-weighted combine
           + e * T * x.shared_experts * x.shared_expert_ffn_hidden / d.t * per_f;
  } else {
    ffn += (e * (per_f - 1) + gemm_in) * T * m.ffn_hidden / d.t;
    // Elsewhere (MLA, unfused attention) an op-level policy is counted from
    // the kept-everything sum: the activation is a non-GEMM op it
    // recomputes, so its output, the down projection's input, is not kept.
    if (o.recompute == Recompute::Selective && o.selective == core::SelectivePolicy::EveryOtherMatmul)
      ffn -= gemm_in * T * m.ffn_hidden / d.t;  // the down projection input, as counted above
  }
  return Bytes(attn + ffn);
}

namespace {

// Parameters on one tensor-parallel rank of t: matrices split t ways, norms replicated.
std::int64_t per_tp_rank(std::int64_t total, std::int64_t replicated, std::int64_t t) {
  return (total - replicated) / t + replicated;
}

std::int64_t norm_params(const ModelSpec& m) { return m.norm == NormKind::LayerNorm ? 2 * m.hidden : m.hidden; }

// Backward over forward FLOPs of attention: a fused kernel recomputes the scores (2.5), unfused 2.
double flash_backward_ratio(const GraphOptions& o) { return o.flash_attention ? 2.5 : 2.0; }

Unit embedding_unit(const ModelSpec& m, const GraphOptions& o) {
  const Dims d = dims(m, o);
  const std::int64_t e = d.e, T = d.T, h = d.h, t = d.t, Th = d.Th;
  Unit u;
  u.name = "embedding";
  u.kind = UnitKind::Embedding;
  u.params = u.weight_params = per_tp_rank(embedding_params(m), 0, t);
  u.tensors = {u.params};
  Builder b{e, {}, {}};
  // Vocabulary-parallel lookup, then all-reduce (or reduce-scatter to sequence shards).
  b.stack_op("embedding.lookup", ComputeKind::Embedding, o.kernels.embedding, T * h);
  if (t > 1) {
    if (d.sp) {
      b.comm("embedding.tp_reducescatter", core::CollectiveKind::ReduceScatter, e * T * h);
    } else {
      b.comm("embedding.tp_allreduce", core::CollectiveKind::AllReduce, e * T * h, true, false);
    }
  }
  if (m.position_embedding == PositionEmbedding::Learned) {
    b.bandwidth("embedding.position", ComputeKind::Elementwise, 3 * e * Th * h, Th * h);
  }
  u.forward = b.forward();
  u.backward = backward_of(b, flash_backward_ratio(o));
  u.activations = Bytes(4 * T);  // token ids
  return u;
}

// A layer's dense parameter tensors on one TP rank: the two norms, Q, K, V
// and the output projection, the FFN's (or the router's and shared experts')
// matrices, and whatever else the layer holds (biases, QK and latent norms)
// as one more.
std::vector<std::int64_t> layer_tensors(const ModelSpec& m, int l, std::int64_t params, std::int64_t t) {
  const std::int64_t h = m.hidden, dqk = m.qk_head_dim(), dv = m.v_head_dim();
  const std::int64_t G = m.mla ? m.heads : m.kv_heads;
  std::vector<std::int64_t> v{norm_params(m), norm_params(m)};
  if (m.mla) {
    v.push_back((attention_params(m) - norm_params(m)) / t);
  } else {
    for (std::int64_t x : {h * m.heads * dqk, h * G * dqk, h * G * dv, m.heads * dv * h}) v.push_back(x / t);
  }
  const int per_ffn = m.ffn_activation == FfnActivation::SwiGlu ? 3 : 2;
  auto ffn = [&](std::int64_t f, std::int64_t count) {
    for (std::int64_t i = 0; i < count * per_ffn; ++i) v.push_back(h * f / t);
  };
  if (!m.is_moe_layer(l)) {
    ffn(m.ffn_hidden, 1);
  } else {
    v.push_back(m.moe->experts * h);  // the router, replicated
    ffn(m.moe->shared_expert_ffn_hidden, m.moe->shared_experts);
  }
  std::int64_t sum = 0;
  for (auto x : v) sum += x;
  if (params > sum) v.push_back(params - sum);
  return v;
}

Unit layer_unit(const ModelSpec& m, int l, const GraphOptions& o) {
  const std::int64_t t = o.tp;
  Unit u;
  u.name = fmt::format("layer{}", l);
  u.kind = UnitKind::Layer;
  u.layer = l;
  const std::int64_t experts = m.is_moe_layer(l) ? m.moe->experts * ffn_expert_matmul(m) : 0;
  u.expert_params = experts / (folded(o) ? o.etp : t) / o.ep;
  u.params = u.weight_params = per_tp_rank(layer_params(m, l) - experts, 2 * norm_params(m), t);
  u.tensors = layer_tensors(m, l, u.params, t);
  Builder b = layer_forward(m, l, o);
  u.forward = b.forward();
  std::vector<GraphOp> bwd = backward_of(b, flash_backward_ratio(o));
  if (o.recompute == Recompute::Full) {
    u.backward = with_phase(u.forward, Phase::Recompute, ".recompute");
  } else if (o.recompute == Recompute::Selective) {
    u.backward = with_phase(selectively_recomputed(u.forward, o.selective), Phase::Recompute, ".recompute");
  }
  u.backward.insert(u.backward.end(), bwd.begin(), bwd.end());
  u.activations = layer_activation_bytes(m, l, o);
  GraphOptions keep_all = o;
  keep_all.recompute = Recompute::None;
  u.recomputed = layer_activation_bytes(m, l, keep_all) - u.activations;
  return u;
}

// The loss over the vocabulary shard: one fused kernel, or Megatron's eager
// vocab-parallel cross-entropy kernel by kernel.
void loss_ops(Builder& b, const GraphOptions& o, std::int64_t logits) {
  const std::int64_t e = b.e;
  if (o.fused_loss) {
    // Softmax cross-entropy over the vocabulary shard as the stack runs it
    // (by default one kernel: read the logits, write fp32 probabilities).
    b.stack_op("head.loss", ComputeKind::Loss, o.kernels.loss, logits);
    return;
  }
  // Megatron's vocab-parallel cross-entropy in eager PyTorch, a kernel per
  // step over the logits: cast to fp32 (e + 4 bytes a logit), max (4),
  // subtract it (8), exp (8), sum (4), divide (8); backward scales the
  // saved probabilities by the loss gradient (8) and casts them back (4 + e).
  b.bandwidth("head.loss.cast", ComputeKind::Loss, (e + 4) * logits, logits);
  b.flags.back().backward = false;
  for (const auto& [step, bytes] : {std::pair{"max", 4}, {"sub", 8}, {"exp", 8}, {"sum", 4}, {"div", 8}}) {
    b.bandwidth(fmt::format("head.loss.{}", step), ComputeKind::Loss, bytes * logits, logits);
    b.flags.back().backward = false;
  }
  b.backward_bandwidth("head.loss.grad_scale", ComputeKind::Loss, 8 * logits, logits);
  b.backward_bandwidth("head.loss.grad_cast", ComputeKind::Loss, (4 + e) * logits, logits);
}

Unit head_unit(const ModelSpec& m, const GraphOptions& o) {
  const Dims d = dims(m, o);
  const std::int64_t e = d.e, T = d.T, h = d.h, t = d.t, Th = d.Th;
  Unit u;
  u.name = "head";
  u.kind = UnitKind::Head;
  u.params = per_tp_rank(head_params(m), norm_params(m), t);
  u.weight_params = u.params + (m.tied_embeddings ? m.vocab * h / t : 0);
  u.tensors = {norm_params(m)};
  if (u.params > norm_params(m)) u.tensors.push_back(u.params - norm_params(m));
  Builder b{e, {}, {}};
  b.stack_op("head.final_norm", ComputeKind::Norm, o.kernels.norm, Th * h);
  tp_enter(b, d, "head");
  b.gemm("head.lm_head", T, m.vocab / t, h);
  loss_ops(b, o, T * (m.vocab / t));
  // With tensor parallelism the max and the sum of exponentials are
  // all-reduced (two fp32 values per token).
  if (t > 1) b.comm("head.loss_allreduce", core::CollectiveKind::AllReduce, 8 * T, true, false);
  u.forward = b.forward();
  u.backward = backward_of(b, flash_backward_ratio(o));
  u.activations = Bytes(e * Th * h + e * T * h + 4 * T * (m.vocab / t));  // norm and GEMM inputs, fp32 probabilities
  if (!o.fused_loss && o.unfused_loss == core::UnfusedLoss::TorchCrossEntropy) {
    // Beside the saved fp32 log-probabilities: two fp32 gradients of the
    // logits, or three more under loss parallelism (core/stack_kernels.hpp).
    u.backward_working = Bytes((t > 1 ? 12 : 8) * T * (m.vocab / t));
  }
  return u;
}

}  // namespace

StepGraph build_step_graph(const ModelSpec& m, const GraphOptions& o) {
  StepGraph g;
  g.tokens = dims(m, o).T;
  g.units.push_back(embedding_unit(m, o));
  for (int l = 0; l < m.layers; ++l) g.units.push_back(layer_unit(m, l, o));
  g.units.push_back(head_unit(m, o));
  return g;
}

}  // namespace hzp::models
