// Internal to models/: the builder a unit's forward ops are pushed into (with
// what the backward and the recomputation derive from them), the per-rank
// dimensions of a layer, and the layer's forward (layer_ops.cpp), shared by
// step_graph.cpp and layer_ops.cpp. Not part of the library's API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/step_graph.hpp"

namespace hzp::models::detail {

using core::Bytes;
using core::ComputeKind;
using core::Flops;
using core::GemmShape;

/// A unit's forward ops in order, with per op what its backward is (step_graph.cpp's
/// backward_of derives the backward pass from them).
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

/// Rows each expert receives from T routed tokens: ceil(capacity factor · T · top_k / experts), at least one.
[[nodiscard]] std::int64_t tokens_per_expert(const MoeSpec& e, std::int64_t T);

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

[[nodiscard]] Dims dims(const ModelSpec& m, const GraphOptions& o);

// Whether the experts are folded over the stage's ranks independently of
// attention's tensor parallelism (GraphOptions::etp).
[[nodiscard]] inline bool folded(const GraphOptions& o) { return o.etp > 0 && o.etp != o.tp; }

/// A tensor-parallel region's entry (sequence-parallel all-gather, or the f
/// operator) and exit (reduce-scatter, or the g operator); layer_ops.cpp.
void tp_enter(Builder& b, const Dims& d, const std::string& name);
void tp_leave(Builder& b, const Dims& d, const std::string& name);

/// One transformer layer's forward ops for a micro-batch (layer_ops.cpp).
[[nodiscard]] Builder layer_forward(const ModelSpec& m, int layer, const GraphOptions& o);

}  // namespace hzp::models::detail
