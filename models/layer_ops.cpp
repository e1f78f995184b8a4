// A transformer layer's forward kernels (see step_graph_builder.hpp), under
// the conventions step_graph.cpp states: attention (projections, the core
// and its Ulysses all-to-alls), the FFN and MoE layers (folded or not),
// tensor-parallel regions, and the linear layers' bf16 or FP8 GEMMs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "models/step_graph_builder.hpp"

namespace hzp::models::detail {

// Enter a tensor-parallel region: with sequence parallelism all-gather the
// sequence-sharded input; without, the f operator (identity forward,
// all-reduce of the input gradient backward).
void tp_enter(Builder& b, const Dims& d, const std::string& name) {
  if (d.t <= 1) return;
  if (d.sp) {
    b.comm(name + ".tp_allgather", core::CollectiveKind::AllGather, d.e * d.T * d.h);
  } else {
    b.comm(name + ".tp_f", core::CollectiveKind::AllReduce, d.e * d.T * d.h, false, true);
  }
}

// Leave it: reduce-scatter to sequence shards, or the g operator (all-reduce forward, identity backward).
void tp_leave(Builder& b, const Dims& d, const std::string& name) {
  if (d.t <= 1) return;
  if (d.sp) {
    b.comm(name + ".tp_reducescatter", core::CollectiveKind::ReduceScatter, d.e * d.T * d.h);
  } else {
    b.comm(name + ".tp_g", core::CollectiveKind::AllReduce, d.e * d.T * d.h, true, false);
  }
}

namespace {

// Bytes per element of an FP8 cast-transpose (read bf16, write the FP8
// tensor and its FP8 transpose), and its kernels: current scaling reads the
// tensor once more for its amax first; block scaling adds one fp32 scale per
// 128 elements to each of its two outputs.
double fp8_cast_bytes_per_element(Precision p, std::int64_t e) {
  const double cast = static_cast<double>(e) + 2;
  if (p == Precision::Fp8Current) return cast + static_cast<double>(e);
  if (p == Precision::Fp8Block) return cast + 2.0 * 4 / 128;
  return cast;
}
int fp8_cast_kernels(Precision p) { return p == Precision::Fp8Current ? 2 : 1; }

// A linear layer's GEMM (m x k input, k x n weight), in bf16, or under an FP8
// recipe: the input's cast-transpose, the weight's (unless it arrived as FP8
// from the all-gather), the GEMM on FP8 operands with a bf16 output, and in
// backward the output gradient's cast-transpose before the input- and
// weight-gradient GEMMs. Current scaling with tensor parallelism all-reduces
// each cast tensor's amax (4 bytes) over the tensor-parallel group first.
// Every kernel it pushes carries `pc` (the routed experts' follow their load).
void linear(Builder& b, const GraphOptions& o, const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k,
            std::int64_t batch = 1, core::ParamClass pc = core::ParamClass::Dense) {
  if (o.precision == Precision::Bf16) {
    b.gemm(name, m, n, k, batch);
    b.ops.back().param_class = pc;
    return;
  }
  const std::int64_t e = b.e;
  const double per = fp8_cast_bytes_per_element(o.precision, e);
  auto cast = [&](const std::string& what, std::int64_t elements, bool backward) {
    const auto bytes = static_cast<std::int64_t>(std::llround(per * static_cast<double>(elements)));
    if (backward) {
      b.backward_bandwidth(name + "." + what, ComputeKind::Elementwise, bytes, elements);
      b.flags.back().bwd_kernels = fp8_cast_kernels(o.precision);
    } else {
      b.bandwidth(name + "." + what, ComputeKind::Elementwise, bytes, elements);
      b.flags.back().backward = false;
    }
    b.ops.back().kernels = fp8_cast_kernels(o.precision);
    b.ops.back().param_class = pc;
  };
  const bool amax_reduce = o.precision == Precision::Fp8Current && o.tp > 1;
  if (amax_reduce) b.comm(name + ".fp8_amax_allreduce", core::CollectiveKind::AllReduce, 4, true, false);
  cast("fp8_cast", batch * m * k, false);
  if (!o.fp8_gathered_weights) cast("fp8_weight_cast", batch * k * n, false);
  b.gemm(name, m, n, k, batch);
  GraphOp& g = b.ops.back();
  g.param_class = pc;
  g.dtype = core::Dtype::Fp8;
  g.bytes = Bytes(batch * (m * k + k * n + e * m * n));
  cast("fp8_grad_cast", batch * m * n, true);
  if (amax_reduce) b.comm(name + ".fp8_grad_amax_allreduce", core::CollectiveKind::AllReduce, 4, false, true);
}

void ffn_ops(Builder& b, const ModelSpec& m, const GraphOptions& o, const std::string& p, std::int64_t f,
             std::int64_t rows, std::int64_t batch, const std::string& tag,
             core::ParamClass pc = core::ParamClass::Dense) {
  const std::int64_t h = m.hidden;
  const bool glu = m.ffn_activation == FfnActivation::SwiGlu;
  linear(b, o, p + tag + "up", rows, glu ? 2 * f : f, h, batch, pc);
  b.stack_op(p + tag + (glu ? "swiglu" : "gelu"), ComputeKind::Elementwise, glu ? o.kernels.swiglu : o.kernels.gelu,
             batch * rows * f);
  b.ops.back().param_class = pc;
  linear(b, o, p + tag + "down", rows, h, f, batch, pc);
}

// Q, K and V: MLA's low-rank projections or one fused QKV GEMM, then the
// optional QK norm and rotary embedding.
void attention_projections(Builder& b, const ModelSpec& m, const GraphOptions& o, const Dims& d, const std::string& p) {
  const std::int64_t T = d.T, h = d.h, H = d.H, G = d.G, dqk = d.dqk, dv = d.dv;
  const core::OpKernels& norm = o.kernels.norm;
  if (m.mla) {
    // Down-projections replicated across tensor-parallel ranks, up-projections split by heads.
    const MlaSpec& a = *m.mla;
    if (a.q_lora_rank > 0) {
      linear(b, o, p + "q_a", T, a.q_lora_rank, h);
      b.stack_op(p + "q_a_norm", ComputeKind::Norm, norm, T * a.q_lora_rank);
      linear(b, o, p + "q_b", T, H * dqk, a.q_lora_rank);
    } else {
      linear(b, o, p + "q", T, H * dqk, h);
    }
    linear(b, o, p + "kv_a", T, a.kv_lora_rank + a.qk_rope_head_dim, h);
    b.stack_op(p + "kv_a_norm", ComputeKind::Norm, norm, T * a.kv_lora_rank);
    linear(b, o, p + "kv_b", T, H * (a.qk_nope_head_dim + dv), a.kv_lora_rank);
  } else {
    linear(b, o, p + "qkv", T, (H + 2 * G) * dqk, h);
  }
  if (m.qk_norm) b.stack_op(p + "qk_norm", ComputeKind::Norm, norm, T * (H + G) * dqk);
  if (m.position_embedding == PositionEmbedding::Rope) {
    std::int64_t rope = m.mla ? m.mla->qk_rope_head_dim : dqk;
    b.stack_op(p + "rope", ComputeKind::Elementwise, o.kernels.rope, T * (H + G) * rope);
  }
}

// The softmax of unfused attention: one fused kernel when Megatron has one
// for this shape, else its eager fallback kernel by kernel.
void attention_softmax(Builder& b, const Dims& d, const std::string& p) {
  const std::int64_t e = d.e, s = d.s, bs = d.bs, H = d.H;
  const std::int64_t scores = bs * H * s * s;
  if (fused_softmax_available(bs * H, s)) {
    b.bandwidth(p + "attn_softmax", ComputeKind::Elementwise, 2 * e * scores, scores);
    b.ops.back().attention = AttentionPart::Softmax;
    return;
  }
  // Megatron's fallback in eager PyTorch, softmax in fp32: cast up (e + 4
  // bytes an element), scale (8), mask in place (8), softmax (8), cast back
  // (4 + e); backward, kernel for kernel in reverse: cast the gradient up
  // (e + 4), softmax backward (reads output and gradient, 12), mask (8),
  // scale (8), cast back (4 + e). Pushed backward-only in reverse so that
  // the backward pass runs them in that order.
  for (const auto& [step, bytes] :
       {std::pair{"cast", e + 4}, {"scale", 8}, {"mask", 8}, {"softmax", 8}, {"cast_back", 4 + e}}) {
    b.bandwidth(fmt::format("{}attn_softmax.{}", p, step), ComputeKind::Elementwise, bytes * scores, scores);
    b.ops.back().attention = AttentionPart::Softmax;
    b.flags.back().backward = false;
  }
  for (const auto& [step, bytes] :
       {std::pair{"cast", 4 + e}, {"scale", 8}, {"mask", 8}, {"softmax", 12}, {"cast_back", e + 4}}) {
    b.backward_bandwidth(fmt::format("{}attn_softmax.{}.bwd", p, step), ComputeKind::Elementwise, bytes * scores,
                         scores);
    b.ops.back().attention = AttentionPart::Softmax;
  }
}

// Scores and context of this rank's s / cp queries against all s keys: one
// fused (flash) kernel, or batched GEMMs around softmax and dropout.
void attention_core(Builder& b, const ModelSpec& m, const GraphOptions& o, const Dims& d, const std::string& p) {
  const std::int64_t e = d.e, s = d.s, bs = d.bs, T = d.T, H = d.H, G = d.G, dqk = d.dqk, dv = d.dv;
  const double full_core =
      2.0 * static_cast<double>(bs * H) * static_cast<double>(s * d.s_local) * static_cast<double>(dqk + dv);
  if (o.flash_attention) {
    // A stack that expands grouped K/V heads to every query head first (and
    // sums their gradients back): K and V read, H heads of each written.
    if (o.kernels.repeat_kv && G < H) {
      const std::int64_t bytes = e * T * (G + H) * (dqk + dv);
      b.stack_op(p + "repeat_kv", ComputeKind::Elementwise, {{2, 0}, {2, 0}}, 0);
      b.ops.back().bytes = Bytes(bytes);
      b.flags.back().bwd_bytes = bytes;
    }
    b.attention(p + "attn_core", 0.5 * full_core, e * T * (H * dqk + G * dqk + G * dv + H * dv));
    b.ops.back().attention_kernel = o.attention_kernel;
    return;
  }
  b.gemm(p + "attn_scores", s, s, dqk, bs * H);
  b.ops.back().attention = AttentionPart::Scores;
  attention_softmax(b, d, p);
  if (m.dropout) {
    b.bandwidth(p + "attn_dropout", ComputeKind::Elementwise, (2 * e + 1) * bs * H * s * s, bs * H * s * s);
    b.ops.back().attention = AttentionPart::Dropout;
  }
  b.gemm(p + "attn_context", s, dv, s, bs * H);
  b.ops.back().attention = AttentionPart::Context;
}

// The core attention, under Ulysses between its two all-to-alls: Q, K and V
// of this rank's T tokens and every head go out, every token of the cp chunk
// for H / u heads comes in (K/V heads replicated to u when fewer than u); the
// context goes back the same way. Each all-to-all's buffer is what a rank
// holds on either side (nccl-tests' size); backward mirrors both.
void ulysses_attention(Builder& b, const ModelSpec& m, const GraphOptions& o, const Dims& d, const std::string& p) {
  const std::int64_t u = std::max(o.ulysses, 1);
  if (u == 1) {
    attention_core(b, m, o, d, p);
    return;
  }
  const std::int64_t kv = std::max(d.G, u);  // K/V heads sent: replicated up to u
  b.comm(p + "attn.ulysses_qkv_alltoall", core::CollectiveKind::AllToAll,
         d.e * d.T * (d.H * d.dqk + kv * (d.dqk + d.dv)), true, true, CommGroup::Ulysses);
  Dims heads = d;
  heads.H = d.H / u;
  heads.G = kv / u;
  heads.s_local = d.s_local * u;
  heads.T = heads.s_local * d.bs;
  attention_core(b, m, o, heads, p);
  b.comm(p + "attn.ulysses_context_alltoall", core::CollectiveKind::AllToAll, d.e * d.T * d.H * d.dv, true, true,
         CommGroup::Ulysses);
}

// Experts split like a dense FFN across tensor-parallel ranks (expert TP =
// TP) and, with expert parallelism, ep ways across ranks: each rank runs
// experts / ep experts on the tokens every rank of its ep group routed to
// them (uniform routing: ceil(cf · T · top_k / E) rows per expert per rank).
void moe_ffn(Builder& b, const ModelSpec& m, const GraphOptions& o, const Dims& d, const std::string& p) {
  const std::int64_t e = d.e, T = d.T, h = d.h;
  const MoeSpec& x = *m.moe;
  const std::int64_t ep = o.ep, rows = tokens_per_expert(x, T);
  b.gemm(p + "router", T, x.experts, h);
  b.bandwidth(p + "router_topk", ComputeKind::Elementwise, 2 * 4 * T * x.experts, T * x.experts);
  b.bandwidth(p + "moe_dispatch", ComputeKind::Elementwise, 2 * e * T * x.top_k * h, T * x.top_k * h);
  if (ep > 1) {
    b.comm(p + "moe_dispatch_alltoall", core::CollectiveKind::AllToAll, e * rows * x.experts * h, true, true,
           CommGroup::Ep);
    b.ops.back().param_class = core::ParamClass::Expert;
  }
  ffn_ops(b, m, o, p, x.expert_ffn_hidden / d.t, rows * ep, x.experts / ep, "experts.", core::ParamClass::Expert);
  if (ep > 1) {
    b.comm(p + "moe_combine_alltoall", core::CollectiveKind::AllToAll, e * rows * x.experts * h, true, true,
           CommGroup::Ep);
    b.ops.back().param_class = core::ParamClass::Expert;
  }
  b.bandwidth(p + "moe_combine", ComputeKind::Elementwise, 2 * e * T * x.top_k * h, T * x.top_k * h);
  if (x.shared_experts > 0) {
    ffn_ops(b, m, o, p, x.shared_experts * x.shared_expert_ffn_hidden / d.t, T, 1, "shared.");
  }
}

// MoE parallel folding (Megatron-Core): the layer keeps this rank's Th
// sequence-parallel tokens; the router and the dispatch run on them, the
// all-to-all sends ceil(cf · Th · top_k / E) rows per expert to the ep group,
// the etp ranks that share an expert slice gather what their group received
// (etp times the rows) and reduce-scatter the outputs; experts / ep experts of
// expert_ffn_hidden / etp each. Shared experts are dense FFNs on tp, inside
// the usual all-gather and reduce-scatter.
void folded_moe_ffn(Builder& b, const ModelSpec& m, const GraphOptions& o, const Dims& d, const std::string& p) {
  const std::int64_t e = d.e, Ts = d.Th, h = d.h, etp = o.etp;
  const MoeSpec& x = *m.moe;
  const std::int64_t ep = o.ep, rows = tokens_per_expert(x, Ts);
  b.gemm(p + "router", Ts, x.experts, h);
  b.bandwidth(p + "router_topk", ComputeKind::Elementwise, 2 * 4 * Ts * x.experts, Ts * x.experts);
  b.bandwidth(p + "moe_dispatch", ComputeKind::Elementwise, 2 * e * Ts * x.top_k * h, Ts * x.top_k * h);
  auto expert_comm = [&](const std::string& name, core::CollectiveKind kind, std::int64_t bytes, CommGroup g) {
    b.comm(p + name, kind, bytes, true, true, g);
    b.ops.back().param_class = core::ParamClass::Expert;
  };
  const std::int64_t received = e * rows * x.experts * h;  // ep sources x experts / ep experts x rows
  if (ep > 1) expert_comm("moe_dispatch_alltoall", core::CollectiveKind::AllToAll, received, CommGroup::Ep);
  if (etp > 1) expert_comm("moe_etp_allgather", core::CollectiveKind::AllGather, etp * received, CommGroup::Etp);
  ffn_ops(b, m, o, p, x.expert_ffn_hidden / etp, rows * ep * etp, x.experts / ep, "experts.", core::ParamClass::Expert);
  if (etp > 1)
    expert_comm("moe_etp_reducescatter", core::CollectiveKind::ReduceScatter, etp * received, CommGroup::Etp);
  if (ep > 1) expert_comm("moe_combine_alltoall", core::CollectiveKind::AllToAll, received, CommGroup::Ep);
  b.bandwidth(p + "moe_combine", ComputeKind::Elementwise, 2 * e * Ts * x.top_k * h, Ts * x.top_k * h);
  if (x.shared_experts > 0) {
    tp_enter(b, d, p + "shared");
    ffn_ops(b, m, o, p, x.shared_experts * x.shared_expert_ffn_hidden / d.t, d.T, 1, "shared.");
    tp_leave(b, d, p + "shared");
  }
}

}  // namespace

Builder layer_forward(const ModelSpec& m, int layer, const GraphOptions& o) {
  const Dims d = dims(m, o);
  Builder b{d.e, {}, {}};
  const std::int64_t T = d.T, h = d.h, Th = d.Th, H = d.H, dv = d.dv;
  const std::string p = fmt::format("l{}.", layer);
  const double mask = m.dropout ? 1 : 0;  // the dropout mask's byte per element

  b.stack_op(p + "attn_norm", ComputeKind::Norm, o.kernels.norm, Th * h);
  tp_enter(b, d, p + "attn");
  attention_projections(b, m, o, d, p);
  ulysses_attention(b, m, o, d, p);
  linear(b, o, p + "attn_out", T, h, H * dv);
  tp_leave(b, d, p + "attn");
  b.stack_op(p + "attn_residual", ComputeKind::Elementwise, o.kernels.residual, Th * h, mask);
  b.stack_op(p + "ffn_norm", ComputeKind::Norm, o.kernels.norm, Th * h);
  if (m.is_moe_layer(layer) && folded(o)) {
    folded_moe_ffn(b, m, o, d, p);
  } else {
    tp_enter(b, d, p + "ffn");
    if (m.is_moe_layer(layer)) {
      moe_ffn(b, m, o, d, p);
    } else {
      ffn_ops(b, m, o, p, m.ffn_hidden / d.t, T, 1, "ffn.");
    }
    tp_leave(b, d, p + "ffn");
  }
  b.stack_op(p + "ffn_residual", ComputeKind::Elementwise, o.kernels.residual, Th * h, mask);
  if (o.precision == Precision::Fp8Delayed && o.tp > 1) {
    // Delayed scaling: the layer's amaxes (input and weight of each FP8 GEMM
    // forward, its output gradient backward; fp32 each) in one fused
    // all-reduce over the tensor-parallel group per pass.
    const auto fp8 =
        std::count_if(b.ops.begin(), b.ops.end(), [](const GraphOp& x) { return x.dtype == core::Dtype::Fp8; });
    b.comm(p + "fp8_amax_allreduce", core::CollectiveKind::AllReduce, 4 * 2 * fp8, true, true);
  }
  return b;
}

}  // namespace hzp::models::detail
