// Model parallelism inside a unit: its kernels with the tensor-parallel
// (optionally chunked and overlapped) and expert-parallel collectives, and
// context parallelism's ring attention.
#include "plan/lowering.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

namespace hzp::plan::detail {

using core::Bytes;
using core::Dtype;

// The compute ops of a unit's forward or backward, with tensor- and
// expert-parallel collectives on the compute stream (on the critical path),
// scaled by this rank class's workload draw for the micro-batch.
void Lowering::unit_ops(const std::vector<models::GraphOp>& ops, std::int64_t mb) {
  const Workload& w = stage_.workload;
  const auto i = static_cast<std::size_t>(mb);
  const double compute = w.compute.empty() ? 1.0 : w.compute[i];
  const double attention = w.attention.empty() ? 1.0 : w.attention[i];
  // The op as this rank class runs it in this micro-batch.
  auto scaled = [&](const models::GraphOp& op) { return scale_op(op, compute, attention, w.experts); };
  auto is_tp = [](const models::GraphOp& op, core::CollectiveKind kind) {
    return op.collective == kind && op.comm_group == models::CommGroup::Tp;
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto& op = ops[k];
    const bool next_is_gemm = k + 1 < ops.size() && ops[k + 1].gemm && !ops[k + 1].collective;
    if (tp_comm_ >= 0 && is_tp(op, core::CollectiveKind::AllGather) && next_is_gemm) {
      overlapped_gather_gemm(op, scaled(ops[k + 1]));
      ++k;
      continue;
    }
    if (tp_comm_ >= 0 && op.gemm && !op.collective && k + 1 < ops.size() &&
        is_tp(ops[k + 1], core::CollectiveKind::ReduceScatter)) {
      overlapped_gemm_scatter(scaled(op), ops[k + 1]);
      ++k;
      continue;
    }
    if (op.collective) {
      const int group = op.comm_group == models::CommGroup::Tp        ? stage_.tp_group
                        : op.comm_group == models::CommGroup::Etp     ? stage_.etp_group
                        : op.comm_group == models::CommGroup::Ulysses ? stage_.ulysses_group
                                                                      : stage_.ep_group;
      // all_to_allv: a rank whose experts draw more tokens receives more than it sends.
      core::Bytes bytes =
          op.comm_group == models::CommGroup::Ep && w.experts > 1.0
              ? Bytes(static_cast<std::int64_t>(std::ceil(static_cast<double>(op.bytes.count()) * w.experts)))
              : op.bytes;
      b_.collective(comp_, op.name, *op.collective, group, bytes, Dtype::Bf16, core::OpRole::ModelParallel,
                    op.param_class);
      continue;
    }
    if (op.kind == core::ComputeKind::Attention && stage_.cp > 1) {
      ring_attention(op, compute * attention);
      continue;
    }
    b_.compute(comp_, scaled(op), op.dtype);
  }
}

// A GEMM cut into kTpOverlapChunks pieces along its first dimension. Where
// the stack runs the chunks on several compute streams at once, a chunk's
// shape (what its efficiency is judged by) is that many chunks together.
models::GraphOp Lowering::chunk_of(const models::GraphOp& op, int k) const {
  models::GraphOp c = op;
  c.name = fmt::format("{}.chunk{}", op.name, k);
  c.flops = op.flops * (1.0 / kTpOverlapChunks);
  c.bytes = Bytes(op.bytes.count() / kTpOverlapChunks);
  const int together = std::clamp(stack_.overlap.tp_gemm_streams, 1, kTpOverlapChunks);
  if (c.gemm) c.gemm->m = std::max<std::int64_t>(1, c.gemm->m / kTpOverlapChunks) * together;
  return c;
}

// Tensor-parallel overlap: all-gather chunk k on the tp stream while the
// GEMM works on chunk k - 1.
void Lowering::overlapped_gather_gemm(const models::GraphOp& gather, const models::GraphOp& gemm) {
  int input = b_.record(comp_, gather.name + ".input_ready");
  b_.wait(tp_comm_, input, "wait input");
  std::vector<int> arrived;
  for (int k = 0; k < kTpOverlapChunks; ++k) {
    b_.collective(tp_comm_, fmt::format("{}.chunk{}", gather.name, k), core::CollectiveKind::AllGather, stage_.tp_group,
                  Bytes(gather.bytes.count() / kTpOverlapChunks), Dtype::Bf16, core::OpRole::ModelParallel,
                  gather.param_class);
    arrived.push_back(b_.record(tp_comm_, fmt::format("{}.chunk{}.done", gather.name, k)));
  }
  for (int k = 0; k < kTpOverlapChunks; ++k) {
    b_.wait(comp_, arrived[static_cast<std::size_t>(k)], "wait gathered chunk");
    b_.compute(comp_, chunk_of(gemm, k), gemm.dtype);
  }
}

// And the mirror: reduce-scatter chunk k while the GEMM computes chunk k + 1.
void Lowering::overlapped_gemm_scatter(const models::GraphOp& gemm, const models::GraphOp& scatter) {
  for (int k = 0; k < kTpOverlapChunks; ++k) {
    b_.compute(comp_, chunk_of(gemm, k), gemm.dtype);
    int done = b_.record(comp_, fmt::format("{}.chunk{}.done", gemm.name, k));
    b_.wait(tp_comm_, done, "wait gemm chunk");
    b_.collective(tp_comm_, fmt::format("{}.chunk{}", scatter.name, k), core::CollectiveKind::ReduceScatter,
                  stage_.tp_group, Bytes(scatter.bytes.count() / kTpOverlapChunks), Dtype::Bf16,
                  core::OpRole::ModelParallel, scatter.param_class);
  }
  int reduced = b_.record(tp_comm_, scatter.name + ".done");
  b_.wait(comp_, reduced, "wait reduce-scatter");
}

// Attention of this rank's queries against every rank's keys, in cp chunks:
// chunk 0 on the local K/V while that block starts round the ring; chunk i
// once block i has arrived (forwarded on to the next rank as it comes).
// Backward circulates K/V and their gradients: twice the bytes.
void Lowering::ring_attention(const models::GraphOp& op, double factor) {
  const int cp = stage_.cp;
  const bool backward = op.phase == models::Phase::BackwardInput;
  const Bytes block(stage_.kv_block_bytes * (backward ? 2 : 1));
  models::GraphOp chunk = op;
  chunk.flops = op.flops * (factor / cp);
  chunk.bytes = Bytes(op.bytes.count() / cp);
  int ready = b_.record(comp_, op.name + ".kv_ready");
  b_.wait(cp_send_, ready, "wait kv ready");
  b_.send(cp_send_, op.name + ".kv_send1", stage_.cp_next_rep, send_seq_[stage_.cp_next_rep]++, block,
          core::OpRole::ModelParallel);
  chunk.name = op.name + ".cp0";
  b_.compute(comp_, chunk, Dtype::Bf16);
  for (int i = 1; i < cp; ++i) {
    b_.recv(cp_recv_, fmt::format("{}.kv_recv{}", op.name, i), stage_.cp_prev_rep, recv_seq_[stage_.cp_prev_rep]++,
            block, core::OpRole::ModelParallel);
    int arrived = b_.record(cp_recv_, fmt::format("{}.kv{}", op.name, i));
    if (i + 1 < cp) {
      b_.wait(cp_send_, arrived, "wait kv block");
      b_.send(cp_send_, fmt::format("{}.kv_send{}", op.name, i + 1), stage_.cp_next_rep,
              send_seq_[stage_.cp_next_rep]++, block, core::OpRole::ModelParallel);
    }
    b_.wait(comp_, arrived, fmt::format("wait kv block {}", i));
    chunk.name = fmt::format("{}.cp{}", op.name, i);
    b_.compute(comp_, chunk, Dtype::Bf16);
  }
}

}  // namespace hzp::plan::detail
