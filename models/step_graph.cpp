// Step graph construction (see step_graph.hpp).
// long-file: one builder for every unit's forward, backward and recomputed ops and the activation
// formulas they share; splitting it would scatter the conventions stated below.
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

namespace hzp::models {
namespace {

using core::Bytes;
using core::ComputeKind;
using core::Flops;
using core::GemmShape;

struct Builder {
  std::int64_t e;  // bytes per element
  std::vector<GraphOp> ops;
  struct Flags {
    bool forward = true;          // runs in the forward pass
    bool backward = true;         // has a backward op
    bool exact = false;           // backward-only op whose bytes are given as they are
    std::int64_t bwd_bytes = -1;  // the backward's bytes when the stack gives them (-1: twice the forward's)
    int bwd_kernels = 1;
  };
  std::vector<Flags> flags;  // per op

  void push(GraphOp op, bool fwd = true, bool bwd = true) {
    ops.push_back(std::move(op));
    flags.push_back(Flags{fwd, bwd, false});
  }
  void comm(const std::string& name, core::CollectiveKind kind, std::int64_t bytes, bool fwd = true, bool bwd = true,
            CommGroup group = CommGroup::Tp) {
    GraphOp op;
    op.name = name;
    op.kind = ComputeKind::Elementwise;
    op.bytes = Bytes(bytes);
    op.collective = kind;
    op.comm_group = group;
    push(std::move(op), fwd, bwd);
  }

  void gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch = 1) {
    GraphOp op;
    op.name = name;
    op.kind = ComputeKind::Gemm;
    op.flops = Flops(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
                     static_cast<double>(batch));
    op.bytes = Bytes(e * batch * (m * k + k * n + m * n));
    op.gemm = GemmShape{m, n, k, batch};
    push(std::move(op));
  }
  void bandwidth(const std::string& name, ComputeKind kind, std::int64_t bytes, std::int64_t elements) {
    GraphOp op;
    op.name = name;
    op.kind = kind;
    op.flops = Flops(4.0 * static_cast<double>(elements));
    op.bytes = Bytes(bytes);
    push(std::move(op));
  }
  /// A non-GEMM op over `elements` as the stack runs it (core::OpKernels),
  /// plus `extra` bytes per element forward (twice that backward): a pass of
  /// no kernels is no op.
  void stack_op(const std::string& name, ComputeKind kind, const core::OpKernels& k, std::int64_t elements,
                double extra = 0) {
    const double n = static_cast<double>(elements), scale = static_cast<double>(e) / 2;
    bandwidth(name, kind, std::llround(n * (k.forward.bytes_per_element * scale + extra)), elements);
    ops.back().kernels = k.forward.kernels;
    Flags& f = flags.back();
    f.forward = k.forward.kernels > 0;
    f.backward = k.backward.kernels > 0;
    f.exact = !f.forward;
    f.bwd_bytes = std::llround(n * (k.backward.bytes_per_element * scale + 2 * extra));
    f.bwd_kernels = k.backward.kernels;
  }
  /// A kernel of the backward pass only, moving exactly `bytes`.
  void backward_bandwidth(const std::string& name, ComputeKind kind, std::int64_t bytes, std::int64_t elements) {
    bandwidth(name, kind, bytes, elements);
    flags.back() = Flags{false, true, true};
  }
  void attention(const std::string& name, double flops, std::int64_t bytes) {
    GraphOp op;
    op.name = name;
    op.kind = ComputeKind::Attention;
    op.flops = Flops(flops);
    op.bytes = Bytes(bytes);
    push(std::move(op));
  }
  [[nodiscard]] std::vector<GraphOp> forward() const {
    std::vector<GraphOp> out;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (flags[i].forward) out.push_back(ops[i]);
    }
    return out;
  }
};

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

std::int64_t tokens_per_expert(const MoeSpec& e, std::int64_t T) {
  double t = e.capacity_factor * static_cast<double>(T) * e.top_k / e.experts;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(t)));
}

// Per-rank dimensions under tensor parallelism over t ranks.
struct Dims {
  std::int64_t e, s, bs, T, h;  // T: tokens of a micro-batch on this rank (s · bs / cp)
  std::int64_t s_local;         // sequence tokens on this rank (s / cp)
  std::int64_t t;               // tensor-parallel size
  std::int64_t Th;              // tokens of h-sized tensors on this rank (T / t with sequence parallelism)
  std::int64_t H, G;            // attention and K/V heads on this rank (K/V replicated when fewer than t)
  std::int64_t dqk, dv;
  bool sp;
};

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
void linear(Builder& b, const GraphOptions& o, const std::string& name, std::int64_t m, std::int64_t n,
            std::int64_t k, std::int64_t batch = 1, core::ParamClass pc = core::ParamClass::Dense) {
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
    b.ops.back().attention_kernel = core::to_string(o.attention_kernel);
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

// Whether the experts are folded over the stage's ranks independently of
// attention's tensor parallelism (GraphOptions::etp).
bool folded(const GraphOptions& o) { return o.etp > 0 && o.etp != o.tp; }

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
    const auto fp8 = std::count_if(b.ops.begin(), b.ops.end(), [](const GraphOp& x) { return x.dtype == core::Dtype::Fp8; });
    b.comm(p + "fp8_amax_allreduce", core::CollectiveKind::AllReduce, 4 * 2 * fp8, true, true);
  }
  return b;
}

// Matmul parameters of one routed expert.
std::int64_t ffn_expert_matmul(const ModelSpec& m) {
  return (m.ffn_activation == FfnActivation::SwiGlu ? 3 : 2) * m.hidden * m.moe->expert_ffn_hidden;
}

// The forward ops selective recomputation runs again before the backward:
// the attention core (unfused: its s×s parts up to the context GEMM; fused:
// the kernel), or every non-GEMM kernel and every second GEMM of the layer.
std::vector<GraphOp> selectively_recomputed(const std::vector<GraphOp>& forward, core::SelectivePolicy policy) {
  std::vector<GraphOp> out;
  int gemms = 0;
  for (const auto& op : forward) {
    if (op.collective) continue;
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

core::Bytes layer_activation_bytes(const ModelSpec& m, int layer, const GraphOptions& o) {
  const Dims d = dims(m, o);
  const std::int64_t e = d.e, s = d.s, bs = d.bs, T = d.T, h = d.h, Th = d.Th, H = d.H, G = d.G;
  const std::int64_t dqk = d.dqk, dv = d.dv;
  if (o.recompute == Recompute::Full) return Bytes(e * Th * h);  // the layer's input only
  const std::int64_t mask = m.dropout ? Th * h : 0;              // 1-byte dropout masks on h-sized outputs

  // Attention block: norm input and QKV-projection input (h-sized: split by
  // sequence parallelism only), Q, K, V (split by heads), then either the
  // fused kernel's output and log-sum-exp, or the output-projection input plus
  // (unless recomputed) the s×s softmax output, dropout mask and dropout output.
  std::int64_t attn = 2 * e * Th * h + e * T * (H * dqk + G * dqk + G * dv) + mask;
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
  std::int64_t ffn = 2 * e * Th * h + mask;
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
    ffn += e * T * m.ffn_hidden / d.t * per_f;
    // An op-level policy recomputes the activation (it is a non-GEMM op), so
    // its output, the down projection's input, is not kept.
    if (o.recompute == Recompute::Selective && o.selective == core::SelectivePolicy::EveryOtherMatmul)
      ffn -= e * T * m.ffn_hidden / d.t;
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
