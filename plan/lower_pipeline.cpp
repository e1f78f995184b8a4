// Pipeline parallelism: the order of a stage's slots (1F1B, interleaved 1F1B)
// and the activation and gradient transfers between virtual stages.
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "plan/stage_lowering.hpp"

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

// Sends run on their own streams so that a stage can send and receive at
// once (Megatron batches isend/irecv); receives sit on the compute stream.
void PipelineBoundaries::add_streams(int thread) {
  if (c_.layout.pp <= 1) return;
  send_fwd_ = c_.b.add_stream("pp_send_fwd", core::StreamKind::Comm, thread);
  send_bwd_ = c_.b.add_stream("pp_send_bwd", core::StreamKind::Comm, thread);
  if (c_.stage.two_way()) {
    // A send waits for its receive: chunk 1 (ZB-V, DualPipe) sends the other way, each on its own stream.
    send_fwd_v_ = c_.b.add_stream("pp_send_fwd_v", core::StreamKind::Comm, thread);
    send_bwd_v_ = c_.b.add_stream("pp_send_bwd_v", core::StreamKind::Comm, thread);
  }
}

// The first and last virtual pipeline stage hold the embedding and the head
// (under ZB-V both on stage 0: chunk 1 ends where chunk 0 began). Under
// DualPipe each chunk is a whole pipeline: chunk 0 from the first stage to
// the last, chunk 1 (the copies) from the last back to the first.
bool PipelineBoundaries::first_virtual(int chunk) const {
  if (c_.stage.dual) return c_.stage.index == (chunk == 0 ? 0 : c_.layout.pp - 1);
  return c_.stage.index == 0 && chunk == 0;
}
bool PipelineBoundaries::last_virtual(int chunk) const {
  if (c_.stage.dual) return c_.stage.index == (chunk == 0 ? c_.layout.pp - 1 : 0);
  return c_.stage.index == (c_.stage.v_shape ? 0 : c_.layout.pp - 1) && chunk == c_.layout.vpp - 1;
}

// The stage a chunk's activations come from and the one they go to: the
// previous and the next (stage 0 chunk c: the last stage, chunk c - 1),
// swapped for chunk 1 of ZB-V and DualPipe, which runs back up the stages.
int PipelineBoundaries::upstream(int chunk) const {
  return c_.stage.two_way() && chunk == 1 ? c_.stage.next_rep : c_.stage.prev_rep;
}
int PipelineBoundaries::downstream(int chunk) const {
  return c_.stage.two_way() && chunk == 1 ? c_.stage.prev_rep : c_.stage.next_rep;
}

// ZB-V's turn on the last stage: chunk 0's activations go on to chunk 1 of
// the same stage (and chunk 1's gradients back to chunk 0), with no transfer.
bool PipelineBoundaries::turns(const Use& use, bool sending) const {
  if (!c_.stage.v_shape || c_.stage.index != c_.layout.pp - 1) return false;
  return use.chunk == ((use.backward == sending) ? 1 : 0);
}

// The sequence number of the next transfer with `peer`. Under ZB-V and
// DualPipe a pair of stages exchanges activations and gradients both ways, in
// orders the two sides need not share, so each kind keeps its own numbers
// (even and odd).
int PipelineBoundaries::next_seq(std::map<int, int>& seqs, int peer, bool grad) {
  if (!c_.stage.two_way()) return seqs[peer]++;
  const int kind = grad ? 1 : 0;
  return 2 * seqs[2 * peer + kind]++ + kind;
}

// Pipeline boundary: receive the activation (forward) or its gradient
// (backward: a B, not a W) from the neighbouring virtual stage before the
// slot's first unit.
void PipelineBoundaries::receive(std::size_t j) {
  const Use& use = c_.uses[j];
  if (c_.layout.pp <= 1 || use.part == BackwardPart::Weight || turns(use, false)) return;
  if (!use.backward && !first_virtual(use.chunk)) {
    int from = upstream(use.chunk);
    c_.b.recv(c_.comp, c_.b.op_name("recv act mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from, false),
              Bytes(c_.stage.boundary_bytes), core::OpRole::Pipeline);
    after_receive(c_.b.op_name("act mb{} chunk{}", use.mb, use.chunk));
  } else if (use.backward && !last_virtual(use.chunk)) {
    int from = downstream(use.chunk);
    c_.b.recv(c_.comp, c_.b.op_name("recv grad mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from, true),
              Bytes(c_.stage.boundary_bytes), core::OpRole::Pipeline);
    after_receive(c_.b.op_name("grad mb{} chunk{}", use.mb, use.chunk));
  }
}

// After a receive: the tp all-gather of a scattered boundary, and with
// pipeline_p2p_sync the host's wait for it.
void PipelineBoundaries::after_receive(const std::string& name) {
  if (c_.stage.boundary_gather_bytes > 0) {
    c_.b.collective(c_.comp, "gather " + name, CollectiveKind::AllGather, c_.stage.tp_group,
                    Bytes(c_.stage.boundary_gather_bytes), Dtype::Bf16, core::OpRole::Pipeline, core::ParamClass::None);
  }
  if (c_.opt.pipeline_p2p_sync) {
    const int received = c_.b.record(c_.comp, name + " received");
    c_.b.sync(c_.comp, received, "host waits " + name);
  }
}

void PipelineBoundaries::send(std::size_t j) {
  const Use& use = c_.uses[j];
  if (c_.layout.pp <= 1 || use.part == BackwardPart::Weight || turns(use, true)) return;
  if (!use.backward && !last_virtual(use.chunk)) {
    int ready = c_.b.record(c_.comp, c_.b.op_name("act ready mb{} chunk{}", use.mb, use.chunk));
    const int stream = c_.stage.two_way() && use.chunk == 1 ? send_fwd_v_ : send_fwd_;
    c_.b.wait(stream, ready, "wait act ready");
    const int to = downstream(use.chunk);
    c_.b.send(stream, c_.b.op_name("send act mb{} chunk{}", use.mb, use.chunk), to, next_seq(send_seq_, to, false),
              Bytes(c_.stage.boundary_bytes), core::OpRole::Pipeline);
  } else if (use.backward && !first_virtual(use.chunk)) {
    int ready = c_.b.record(c_.comp, c_.b.op_name("grad ready mb{} chunk{}", use.mb, use.chunk));
    const int stream = c_.stage.two_way() && use.chunk == 1 ? send_bwd_v_ : send_bwd_;
    c_.b.wait(stream, ready, "wait grad ready");
    const int to = upstream(use.chunk);
    c_.b.send(stream, c_.b.op_name("send grad mb{} chunk{}", use.mb, use.chunk), to, next_seq(send_seq_, to, true),
              Bytes(c_.stage.boundary_bytes), core::OpRole::Pipeline);
  }
}

}  // namespace detail
}  // namespace hzp::plan
