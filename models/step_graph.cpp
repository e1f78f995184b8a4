// Step graph construction (see step_graph.hpp).
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

  void gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch = 1) {
    GraphOp op;
    op.name = name;
    op.kind = ComputeKind::Gemm;
    op.flops = Flops(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
                     static_cast<double>(batch));
    op.bytes = Bytes(e * batch * (m * k + k * n + m * n));
    op.gemm = GemmShape{m, n, k, batch};
    ops.push_back(std::move(op));
  }
  void bandwidth(const std::string& name, ComputeKind kind, std::int64_t bytes, std::int64_t elements) {
    GraphOp op;
    op.name = name;
    op.kind = kind;
    op.flops = Flops(4.0 * static_cast<double>(elements));
    op.bytes = Bytes(bytes);
    ops.push_back(std::move(op));
  }
  void attention(const std::string& name, double flops, std::int64_t bytes) {
    GraphOp op;
    op.name = name;
    op.kind = ComputeKind::Attention;
    op.flops = Flops(flops);
    op.bytes = Bytes(bytes);
    ops.push_back(std::move(op));
  }
};

// Backward of a forward op list: reverse order, GEMMs split into input and
// weight gradients, bandwidth kernels read and write twice as much.
std::vector<GraphOp> backward_of(const std::vector<GraphOp>& fwd, double flash_bwd_ratio) {
  std::vector<GraphOp> out;
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    const GraphOp& f = *it;
    if (f.gemm) {
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
      if (f.kind == ComputeKind::Gemm && g.batch > 1 && (f.name.ends_with("scores") || f.name.ends_with("context"))) {
        wg.phase = Phase::BackwardInput;
        wg.name = f.name + ".dgrad2";
      }
      dg.bytes = Bytes(e * g.batch * (g.m * g.n + g.n * g.k + g.m * g.k));
      wg.bytes = dg.bytes;
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
      GraphOp b = f;
      b.name = f.name + ".bwd";
      b.phase = Phase::BackwardInput;
      b.bytes = Bytes(f.bytes.count() * 2);
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::int64_t tokens_per_expert(const MoeSpec& e, std::int64_t T) {
  double t = e.capacity_factor * static_cast<double>(T) * e.top_k / e.experts;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(t)));
}

void ffn_ops(Builder& b, const ModelSpec& m, std::int64_t T, const std::string& p, std::int64_t f, std::int64_t rows,
             std::int64_t batch, const std::string& tag) {
  const std::int64_t e = b.e, h = m.hidden;
  const bool glu = m.ffn_activation == FfnActivation::SwiGlu;
  (void)T;
  b.gemm(p + tag + "up", rows, glu ? 2 * f : f, h, batch);
  b.bandwidth(p + tag + (glu ? "swiglu" : "gelu"), ComputeKind::Elementwise, e * batch * rows * f * (glu ? 3 : 2),
              batch * rows * f);
  b.gemm(p + tag + "down", rows, h, f, batch);
}

std::vector<GraphOp> layer_forward(const ModelSpec& m, int layer, const GraphOptions& o) {
  Builder b{core::dtype_bytes(o.dtype), {}};
  const std::int64_t e = b.e, s = o.seq_len, bs = o.micro_batch, T = s * bs, h = m.hidden;
  const std::int64_t H = m.heads, G = m.mla ? m.heads : m.kv_heads;
  const std::int64_t dqk = m.qk_head_dim(), dv = m.v_head_dim();
  const std::string p = fmt::format("l{}.", layer);

  b.bandwidth(p + "attn_norm", ComputeKind::Norm, 2 * e * T * h, T * h);
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    if (a.q_lora_rank > 0) {
      b.gemm(p + "q_a", T, a.q_lora_rank, h);
      b.bandwidth(p + "q_a_norm", ComputeKind::Norm, 2 * e * T * a.q_lora_rank, T * a.q_lora_rank);
      b.gemm(p + "q_b", T, H * dqk, a.q_lora_rank);
    } else {
      b.gemm(p + "q", T, H * dqk, h);
    }
    b.gemm(p + "kv_a", T, a.kv_lora_rank + a.qk_rope_head_dim, h);
    b.bandwidth(p + "kv_a_norm", ComputeKind::Norm, 2 * e * T * a.kv_lora_rank, T * a.kv_lora_rank);
    b.gemm(p + "kv_b", T, H * (a.qk_nope_head_dim + dv), a.kv_lora_rank);
  } else {
    b.gemm(p + "qkv", T, (H + 2 * G) * dqk, h);
  }
  if (m.qk_norm) b.bandwidth(p + "qk_norm", ComputeKind::Norm, 2 * e * T * (H + G) * dqk, T * (H + G) * dqk);
  if (m.position_embedding == PositionEmbedding::Rope) {
    std::int64_t rope = m.mla ? m.mla->qk_rope_head_dim : dqk;
    b.bandwidth(p + "rope", ComputeKind::Elementwise, 2 * e * T * (H + G) * rope, T * (H + G) * rope);
  }
  const double full_core =
      2.0 * static_cast<double>(bs * H) * static_cast<double>(s * s) * static_cast<double>(dqk + dv);
  if (o.flash_attention) {
    b.attention(p + "attn_core", 0.5 * full_core, e * T * (H * dqk + G * dqk + G * dv + H * dv));
  } else {
    b.gemm(p + "attn_scores", s, s, dqk, bs * H);
    b.bandwidth(p + "attn_softmax", ComputeKind::Elementwise, 2 * e * bs * H * s * s, bs * H * s * s);
    if (m.dropout)
      b.bandwidth(p + "attn_dropout", ComputeKind::Elementwise, (2 * e + 1) * bs * H * s * s, bs * H * s * s);
    b.gemm(p + "attn_context", s, dv, s, bs * H);
  }
  b.gemm(p + "attn_out", T, h, H * dv);
  b.bandwidth(p + "attn_residual", ComputeKind::Elementwise, (m.dropout ? 3 * e + 1 : 3 * e) * T * h, T * h);
  b.bandwidth(p + "ffn_norm", ComputeKind::Norm, 2 * e * T * h, T * h);
  if (m.is_moe_layer(layer)) {
    const MoeSpec& x = *m.moe;
    b.gemm(p + "router", T, x.experts, h);
    b.bandwidth(p + "router_topk", ComputeKind::Elementwise, 2 * 4 * T * x.experts, T * x.experts);
    b.bandwidth(p + "moe_dispatch", ComputeKind::Elementwise, 2 * e * T * x.top_k * h, T * x.top_k * h);
    ffn_ops(b, m, T, p, x.expert_ffn_hidden, tokens_per_expert(x, T), x.experts, "experts.");
    b.bandwidth(p + "moe_combine", ComputeKind::Elementwise, 2 * e * T * x.top_k * h, T * x.top_k * h);
    if (x.shared_experts > 0) ffn_ops(b, m, T, p, x.shared_experts * x.shared_expert_ffn_hidden, T, 1, "shared.");
  } else {
    ffn_ops(b, m, T, p, m.ffn_hidden, T, 1, "ffn.");
  }
  b.bandwidth(p + "ffn_residual", ComputeKind::Elementwise, (m.dropout ? 3 * e + 1 : 3 * e) * T * h, T * h);
  return b.ops;
}

bool is_core_attention(const GraphOp& op) {
  return op.name.ends_with("attn_scores") || op.name.ends_with("attn_softmax") || op.name.ends_with("attn_dropout");
}

std::vector<GraphOp> with_phase(std::vector<GraphOp> ops, Phase ph, const std::string& suffix) {
  for (auto& op : ops) {
    op.phase = ph;
    op.name += suffix;
  }
  return ops;
}

}  // namespace

core::Bytes layer_activation_bytes(const ModelSpec& m, int layer, const GraphOptions& o) {
  const std::int64_t e = core::dtype_bytes(o.dtype), s = o.seq_len, bs = o.micro_batch, T = s * bs, h = m.hidden;
  if (o.recompute == Recompute::Full) return Bytes(e * T * h);  // the layer's input only
  const std::int64_t H = m.heads, G = m.mla ? m.heads : m.kv_heads;
  const std::int64_t dqk = m.qk_head_dim(), dv = m.v_head_dim();
  const std::int64_t mask = m.dropout ? T * h : 0;  // 1-byte dropout masks

  // Attention block: norm input, QKV-projection input, Q, K, V, then either the
  // fused kernel's output and log-sum-exp, or the output-projection input plus
  // (unless recomputed) the s×s softmax output, dropout mask and dropout output.
  std::int64_t attn = 2 * e * T * h + e * T * (H * dqk + G * dqk + G * dv) + mask;
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    attn += 2 * e * T * (a.q_lora_rank + a.kv_lora_rank) + e * T * a.qk_rope_head_dim;
  }
  if (m.qk_norm) attn += e * T * (H + G) * dqk;
  if (o.flash_attention) {
    attn += e * T * H * dv + 4 * bs * H * s;
  } else {
    attn += e * T * H * dv;
    if (o.recompute == Recompute::None) attn += (e + (m.dropout ? 1 + e : 0)) * bs * H * s * s;
  }

  // FFN block: norm input and FFN input, then what each activation needs.
  const bool glu = m.ffn_activation == FfnActivation::SwiGlu;
  const std::int64_t per_f = glu ? 3 : 2;  // SwiGLU: gate, up, down input; GELU: its input and output
  std::int64_t ffn = 2 * e * T * h + mask;
  if (m.is_moe_layer(layer)) {
    const MoeSpec& x = *m.moe;
    std::int64_t rows = tokens_per_expert(x, T) * x.experts;
    ffn += 4 * T * x.experts  // router probabilities (fp32)
           + e * rows * h     // permuted expert inputs
           + e * rows * x.expert_ffn_hidden * per_f +
           e * T * x.top_k * h  // expert outputs, for the gate-weighted combine
           + e * T * x.shared_experts * x.shared_expert_ffn_hidden * per_f;
  } else {
    ffn += e * T * m.ffn_hidden * per_f;
  }
  return Bytes(attn + ffn);
}

StepGraph build_step_graph(const ModelSpec& m, const GraphOptions& o) {
  StepGraph g;
  const std::int64_t e = core::dtype_bytes(o.dtype), T = o.seq_len * o.micro_batch, h = m.hidden;
  g.tokens = T;
  const double flash_bwd = o.flash_attention ? 2.5 : 2.0;

  {
    Unit u;
    u.name = "embedding";
    u.kind = UnitKind::Embedding;
    u.params = u.weight_params = embedding_params(m);
    Builder b{e, {}};
    b.bandwidth("embedding.lookup", ComputeKind::Embedding, 2 * e * T * h, T * h);
    if (m.position_embedding == PositionEmbedding::Learned) {
      b.bandwidth("embedding.position", ComputeKind::Elementwise, 3 * e * T * h, T * h);
    }
    u.forward = b.ops;
    u.backward = backward_of(u.forward, flash_bwd);
    u.activations = Bytes(4 * T);  // token ids
    g.units.push_back(std::move(u));
  }
  for (int l = 0; l < m.layers; ++l) {
    Unit u;
    u.name = fmt::format("layer{}", l);
    u.kind = UnitKind::Layer;
    u.layer = l;
    u.params = u.weight_params = layer_params(m, l);
    u.forward = layer_forward(m, l, o);
    std::vector<GraphOp> bwd = backward_of(u.forward, flash_bwd);
    if (o.recompute == Recompute::Full) {
      u.backward = with_phase(u.forward, Phase::Recompute, ".recompute");
    } else if (o.recompute == Recompute::Selective && !o.flash_attention) {
      for (const auto& op : u.forward) {
        if (is_core_attention(op)) u.backward.push_back(with_phase({op}, Phase::Recompute, ".recompute")[0]);
      }
    }
    u.backward.insert(u.backward.end(), bwd.begin(), bwd.end());
    u.activations = layer_activation_bytes(m, l, o);
    GraphOptions keep_all = o;
    keep_all.recompute = Recompute::None;
    u.recomputed = layer_activation_bytes(m, l, keep_all) - u.activations;
    g.units.push_back(std::move(u));
  }
  {
    Unit u;
    u.name = "head";
    u.kind = UnitKind::Head;
    u.params = head_params(m);
    u.weight_params = u.params + (m.tied_embeddings ? m.vocab * h : 0);
    Builder b{e, {}};
    b.bandwidth("head.final_norm", ComputeKind::Norm, 2 * e * T * h, T * h);
    b.gemm("head.lm_head", T, m.vocab, h);
    // Softmax cross-entropy in fp32: read the logits, write fp32 probabilities.
    b.bandwidth("head.loss", ComputeKind::Loss, (e + 4) * T * m.vocab, T * m.vocab);
    u.forward = b.ops;
    u.backward = backward_of(u.forward, flash_bwd);
    u.activations = Bytes(2 * e * T * h + 4 * T * m.vocab);  // norm and GEMM inputs, fp32 probabilities
    g.units.push_back(std::move(u));
  }
  return g;
}

}  // namespace hzp::models
