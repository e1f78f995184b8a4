// Pipeline parallelism: the order of a stage's slots (1F1B, interleaved 1F1B)
// and the activation and gradient transfers between virtual stages.
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "plan/lowering.hpp"

namespace hzp::plan {

std::vector<PipelineSlot> pipeline_order(int stage, int pp, int vpp, std::int64_t m, PipelineSchedule schedule) {
  if (schedule != PipelineSchedule::OneFOneB) {
    return pipeline_orders(pp, vpp, m, schedule)[static_cast<std::size_t>(stage)];  // plan/zero_bubble.cpp
  }
  std::vector<PipelineSlot> out;
  if (vpp <= 1) {
    const std::int64_t warm = std::min<std::int64_t>(pp - stage - 1, m);
    for (std::int64_t i = 0; i < warm; ++i) out.push_back({i, 0, false});
    for (std::int64_t i = 0; i < m - warm; ++i) {
      out.push_back({warm + i, 0, false});
      out.push_back({i, 0, true});
    }
    for (std::int64_t i = m - warm; i < m; ++i) out.push_back({i, 0, true});
    return out;
  }
  // Interleaved (Narayanan et al. 2021; Megatron-LM's schedules.py): virtual
  // micro-batch k runs chunk (k / pp) mod vpp forward (reversed for backward)
  // on micro-batch (k / (pp·vpp))·pp + k mod pp.
  const std::int64_t total = m * vpp, P = pp, V = vpp;
  auto slot = [&](std::int64_t k, bool backward) {
    std::int64_t chunk = (k / P) % V;
    if (backward) chunk = V - 1 - chunk;
    return PipelineSlot{(k / (P * V)) * P + k % P, static_cast<int>(chunk), backward};
  };
  const std::int64_t warm = std::min<std::int64_t>((P - stage - 1) * 2 + (V - 1) * P, total);
  for (std::int64_t k = 0; k < warm; ++k) out.push_back(slot(k, false));
  for (std::int64_t i = 0; i < total - warm; ++i) {
    out.push_back(slot(warm + i, false));
    out.push_back(slot(i, true));
  }
  for (std::int64_t i = total - warm; i < total; ++i) out.push_back(slot(i, true));
  return out;
}

namespace detail {

using core::Bytes;
using core::CollectiveKind;
using core::Dtype;

// The first and last virtual pipeline stage hold the embedding and the head
// (under ZB-V both on stage 0: chunk 1 ends where chunk 0 began). Under
// DualPipe each chunk is a whole pipeline: chunk 0 from the first stage to
// the last, chunk 1 (the copies) from the last back to the first.
bool Lowering::first_virtual(int chunk) const {
  if (stage_.dual) return stage_.index == (chunk == 0 ? 0 : layout_.pp - 1);
  return stage_.index == 0 && chunk == 0;
}
bool Lowering::last_virtual(int chunk) const {
  if (stage_.dual) return stage_.index == (chunk == 0 ? layout_.pp - 1 : 0);
  return stage_.index == (stage_.v_shape ? 0 : layout_.pp - 1) && chunk == layout_.vpp - 1;
}

// The stage a chunk's activations come from and the one they go to: the
// previous and the next (stage 0 chunk c: the last stage, chunk c - 1),
// swapped for chunk 1 of ZB-V and DualPipe, which runs back up the stages.
int Lowering::upstream(int chunk) const { return stage_.two_way() && chunk == 1 ? stage_.next_rep : stage_.prev_rep; }
int Lowering::downstream(int chunk) const { return stage_.two_way() && chunk == 1 ? stage_.prev_rep : stage_.next_rep; }

// ZB-V's turn on the last stage: chunk 0's activations go on to chunk 1 of
// the same stage (and chunk 1's gradients back to chunk 0), with no transfer.
bool Lowering::turns(const Use& use, bool sending) const {
  if (!stage_.v_shape || stage_.index != layout_.pp - 1) return false;
  return use.chunk == ((use.backward == sending) ? 1 : 0);
}

// The sequence number of the next transfer with `peer`. Under ZB-V and
// DualPipe a pair of stages exchanges activations and gradients both ways, in
// orders the two sides need not share, so each kind keeps its own numbers
// (even and odd).
int Lowering::next_seq(std::map<int, int>& seqs, int peer, bool grad) {
  if (!stage_.two_way()) return seqs[peer]++;
  const int kind = grad ? 1 : 0;
  return 2 * seqs[2 * peer + kind]++ + kind;
}

// Pipeline boundary: receive the activation (forward) or its gradient
// (backward: a B, not a W) from the neighbouring virtual stage before the
// slot's first unit.
void Lowering::receive(std::size_t j) {
  const Use& use = uses_[j];
  if (layout_.pp <= 1 || use.part == BackwardPart::Weight || turns(use, false)) return;
  if (!use.backward && !first_virtual(use.chunk)) {
    int from = upstream(use.chunk);
    b_.recv(comp_, fmt::format("recv act mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from, false),
            Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
    after_receive(fmt::format("act mb{} chunk{}", use.mb, use.chunk));
  } else if (use.backward && !last_virtual(use.chunk)) {
    int from = downstream(use.chunk);
    b_.recv(comp_, fmt::format("recv grad mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from, true),
            Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
    after_receive(fmt::format("grad mb{} chunk{}", use.mb, use.chunk));
  }
}

// After a receive: the tp all-gather of a scattered boundary, and with
// pipeline_p2p_sync the host's wait for it.
void Lowering::after_receive(const std::string& name) {
  if (stage_.boundary_gather_bytes > 0) {
    b_.collective(comp_, "gather " + name, CollectiveKind::AllGather, stage_.tp_group,
                  Bytes(stage_.boundary_gather_bytes), Dtype::Bf16, core::OpRole::Pipeline, core::ParamClass::None);
  }
  if (opt_.pipeline_p2p_sync) {
    const int received = b_.record(comp_, name + " received");
    b_.sync(comp_, received, "host waits " + name);
  }
}

void Lowering::send(std::size_t j) {
  const Use& use = uses_[j];
  if (layout_.pp <= 1 || use.part == BackwardPart::Weight || turns(use, true)) return;
  if (!use.backward && !last_virtual(use.chunk)) {
    int ready = b_.record(comp_, fmt::format("act ready mb{} chunk{}", use.mb, use.chunk));
    const int stream = stage_.two_way() && use.chunk == 1 ? send_fwd_v_ : send_fwd_;
    b_.wait(stream, ready, "wait act ready");
    const int to = downstream(use.chunk);
    b_.send(stream, fmt::format("send act mb{} chunk{}", use.mb, use.chunk), to, next_seq(send_seq_, to, false),
            Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
  } else if (use.backward && !first_virtual(use.chunk)) {
    int ready = b_.record(comp_, fmt::format("grad ready mb{} chunk{}", use.mb, use.chunk));
    const int stream = stage_.two_way() && use.chunk == 1 ? send_bwd_v_ : send_bwd_;
    b_.wait(stream, ready, "wait grad ready");
    const int to = upstream(use.chunk);
    b_.send(stream, fmt::format("send grad mb{} chunk{}", use.mb, use.chunk), to, next_seq(send_seq_, to, true),
            Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
  }
}

// A unit's activations from its forward on. Under a zero-bubble schedule they
// are two buffers: what only B reads, freed after B, and what W still reads
// (weight_held), freed after W.
void Lowering::alloc_activations(std::size_t j) {
  const Use& use = uses_[j];
  const auto& unit = *units_[use.unit].u;
  if (!split_backward()) {
    b_.alloc(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations, core::BufferClass::Activations);
    return;
  }
  const Bytes held = weight_held(use.unit).first;
  b_.alloc(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations - held,
           core::BufferClass::Activations);
  b_.alloc(comp_, fmt::format("act_w.u{}.mb{}", use.unit, use.mb), held, core::BufferClass::Activations);
}

// What a backward allocates and frees again beside its activations (the
// unfused loss's gradients), for the duration of its kernels.
void Lowering::alloc_working(std::size_t j) {
  const Use& use = uses_[j];
  const Bytes working = units_[use.unit].u->backward_working;
  if (working.count() > 0) {
    b_.alloc(comp_, fmt::format("working.u{}.mb{}", use.unit, use.mb), working, core::BufferClass::Activations);
  }
}
void Lowering::free_working(std::size_t j) {
  const Use& use = uses_[j];
  const Bytes working = units_[use.unit].u->backward_working;
  if (working.count() > 0) b_.free(comp_, fmt::format("working.u{}.mb{}", use.unit, use.mb), working);
}

bool Lowering::split_backward() const { return traits(opt_.pipeline_schedule).split_backward; }

// What a unit's W reads after its B (per micro-batch, M_W in Qi et al.'s
// Table 1): the operands of its weight-gradient GEMMs, the layer inputs and
// the output gradients B leaves behind. Held from the stored activations,
// then from what recomputation brought back (full recomputation stores
// little: W keeps most of what B recomputed); the pair (stored, recomputed).
std::pair<Bytes, Bytes> Lowering::weight_held(std::size_t u) const {
  const auto& unit = *units_[u].u;
  std::int64_t n = 0;
  for (const auto& op : unit.backward) {
    if (op.phase != models::Phase::BackwardWeight || !op.gemm) continue;
    const core::GemmShape g = *op.gemm;  // the m x n weight gradient of (m x k) · (k x n)
    const std::int64_t elements = g.batch * (g.m * g.k + g.k * g.n + g.m * g.n);
    if (elements > 0) n += op.bytes.count() / elements * g.batch * (g.m * g.k + g.k * g.n);
  }
  const std::int64_t stored = std::min(n, unit.activations.count());
  return {Bytes(stored), Bytes(std::min(n - stored, unit.recomputed.count()))};
}

// B of a zero-bubble schedule: recomputation and the input gradients, with
// the unit's gathered parameters; what only B reads is freed, what W reads stays.
void Lowering::backward_input(std::size_t j) {
  const Use& use = uses_[j];
  const auto& unit = *units_[use.unit].u;
  const int gathered = gathered_by(j);
  if (gathered >= 0) {
    b_.wait(comp_, ag_done_[static_cast<std::size_t>(gathered)], fmt::format("wait {}.gathered", unit.name));
    if (use.gathers) after_gather(j);
  }
  const auto [held, held_recomputed] = weight_held(use.unit);
  const std::string recomputed = fmt::format("recomputed.u{}.mb{}", use.unit, use.mb);
  if (unit.recomputed.count() > 0) {
    b_.alloc(comp_, recomputed, unit.recomputed - held_recomputed, core::BufferClass::Recomputed);
    b_.alloc(comp_, fmt::format("recomputed_w.u{}.mb{}", use.unit, use.mb), held_recomputed,
             core::BufferClass::Recomputed);
  }
  std::vector<models::GraphOp> ops;
  for (const auto& op : unit.backward) {
    if (op.phase != models::Phase::BackwardWeight) ops.push_back(op);
  }
  alloc_working(j);  // the loss's gradients belong to B
  unit_ops(ops, use.mb);
  free_working(j);
  use_done_[j] = b_.record(comp_, fmt::format("{}.input_grad_done", unit.name));
  if (gathered >= 0 && !pooled()) {
    b_.free(comp_, buf("gathered", static_cast<std::size_t>(gathered)), gathered_bytes(use.unit));
  }
  if (unit.recomputed.count() > 0) b_.free(comp_, recomputed, unit.recomputed - held_recomputed);
  b_.free(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations - held);
}

// W of a zero-bubble schedule: the weight gradients into the unit's gradient
// buffer; then the rest of its activations go, and its gradients are reduced
// as after a whole backward (the reduction waits for W, not B).
void Lowering::backward_weight(std::size_t j) {
  const Use& use = uses_[j];
  const auto& unit = *units_[use.unit].u;
  take_grad_buffer(j);
  std::vector<models::GraphOp> ops;
  for (const auto& op : unit.backward) {
    if (op.phase == models::Phase::BackwardWeight) ops.push_back(op);
  }
  unit_ops(ops, use.mb);
  use_done_[j] = b_.record(comp_, fmt::format("{}.bwd_done", unit.name));
  const auto [held, held_recomputed] = weight_held(use.unit);
  b_.free(comp_, fmt::format("act_w.u{}.mb{}", use.unit, use.mb), held);
  if (unit.recomputed.count() > 0) {
    b_.free(comp_, fmt::format("recomputed_w.u{}.mb{}", use.unit, use.mb), held_recomputed);
  }
  const bool waited = reduce_gradients(j);
  if (j != last_backward_of_[use.unit]) return;
  if (opt_.overlap_grad_reduce) {
    reduce_for_optimizer(use.unit, j, waited);
  } else {
    deferred_.push_back(use.unit);
    last_backward_ = j;
  }
}

}  // namespace detail
}  // namespace hzp::plan
