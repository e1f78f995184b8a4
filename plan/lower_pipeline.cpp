// Pipeline parallelism: the order of a stage's slots (1F1B, interleaved 1F1B)
// and the activation and gradient transfers between virtual stages.
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "plan/lowering.hpp"

namespace hzp::plan {

std::vector<PipelineSlot> pipeline_order(int stage, int pp, int vpp, std::int64_t m) {
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

// The first and last virtual pipeline stage hold the embedding and the head.
bool Lowering::first_virtual(int chunk) const { return stage_.index == 0 && chunk == 0; }
bool Lowering::last_virtual(int chunk) const { return stage_.index == layout_.pp - 1 && chunk == layout_.vpp - 1; }

// Pipeline boundary: receive the activation (forward) or its gradient
// (backward) from the neighbouring virtual stage before the slot's first unit.
void Lowering::receive(std::size_t j) {
  const Use& use = uses_[j];
  if (layout_.pp <= 1) return;
  if (!use.backward && !first_virtual(use.chunk)) {
    int from = stage_.prev_rep;  // the stage before (stage 0 chunk c: the last stage, chunk c - 1)
    b_.recv(comp_, fmt::format("recv act mb{} chunk{}", use.mb, use.chunk), from, recv_seq_[from]++,
            Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
    after_receive(fmt::format("act mb{} chunk{}", use.mb, use.chunk));
  } else if (use.backward && !last_virtual(use.chunk)) {
    int from = stage_.next_rep;
    b_.recv(comp_, fmt::format("recv grad mb{} chunk{}", use.mb, use.chunk), from, recv_seq_[from]++,
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
  if (layout_.pp <= 1) return;
  if (!use.backward && !last_virtual(use.chunk)) {
    int ready = b_.record(comp_, fmt::format("act ready mb{} chunk{}", use.mb, use.chunk));
    b_.wait(send_fwd_, ready, "wait act ready");
    b_.send(send_fwd_, fmt::format("send act mb{} chunk{}", use.mb, use.chunk), stage_.next_rep,
            send_seq_[stage_.next_rep]++, Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
  } else if (use.backward && !first_virtual(use.chunk)) {
    int ready = b_.record(comp_, fmt::format("grad ready mb{} chunk{}", use.mb, use.chunk));
    b_.wait(send_bwd_, ready, "wait grad ready");
    b_.send(send_bwd_, fmt::format("send grad mb{} chunk{}", use.mb, use.chunk), stage_.prev_rep,
            send_seq_[stage_.prev_rep]++, Bytes(stage_.boundary_bytes), core::OpRole::Pipeline);
  }
}

}  // namespace detail
}  // namespace hzp::plan
