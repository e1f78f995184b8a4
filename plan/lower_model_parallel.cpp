// Model parallelism inside a unit: its kernels with the tensor-parallel
// (optionally chunked and overlapped) and expert-parallel collectives, and
// context parallelism's ring attention.
#include "plan/stage_lowering.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

namespace hzp::plan::detail {

using core::Bytes;
using core::Dtype;

void ModelParallel::add_streams(int thread) {
  if (c_.opt.tp_comm_overlap && c_.stage.tp_group >= 0) {
    tp_comm_ = c_.b.add_stream("tp_comm", core::StreamKind::Comm, thread);
  }
  if (c_.stage.cp > 1) {
    // Ring attention: K/V blocks go round on their own send and receive
    // streams, overlapped with the attention chunks on the compute stream.
    cp_send_ = c_.b.add_stream("cp_send", core::StreamKind::Comm, thread);
    cp_recv_ = c_.b.add_stream("cp_recv", core::StreamKind::Comm, thread);
  }
}

// The compute ops of a unit's forward or backward, with tensor- and
// expert-parallel collectives on the compute stream (on the critical path),
// scaled by this rank class's workload draw for the micro-batch.
void ModelParallel::unit_ops(const std::vector<models::GraphOp>& ops, std::int64_t mb) {
  const Workload& w = c_.stage.workload;
  const auto i = static_cast<std::size_t>(mb);
  const double compute = w.compute.empty() ? 1.0 : w.compute[i];
  const double attention = w.attention.empty() ? 1.0 : w.attention[i];
  // The op as this rank class runs it in this micro-batch.
  auto scaled = [&](const models::GraphOp& op) { return scale_op(op, compute, attention, w.experts); };
  auto is_tp = [](const models::GraphOp& op, core::CollectiveKind kind) {
    return op.collective == kind && op.comm_group == models::CommGroup::Tp;
  };
  auto is_gemm = [&](std::size_t k, models::Phase phase) {
    return k < ops.size() && ops[k].gemm && !ops[k].collective && ops[k].phase == phase;
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto& op = ops[k];
    const bool next_is_gemm = k + 1 < ops.size() && ops[k + 1].gemm && !ops[k + 1].collective;
    // A column-parallel linear's backward: the reduce-scatter is of the input
    // gradient; the weight gradient runs beside it.
    if (tp_comm_ >= 0 && is_gemm(k, models::Phase::BackwardInput) && is_gemm(k + 1, models::Phase::BackwardWeight) &&
        k + 2 < ops.size() && is_tp(ops[k + 2], core::CollectiveKind::ReduceScatter)) {
      if (c_.stack.overlap.tp_bulk_backward) {
        bulk_backward(scaled(op), scaled(ops[k + 1]), ops[k + 2]);
      } else {
        const models::GraphOp wgrad = scaled(ops[k + 1]);
        overlapped_gemm_scatter(scaled(op), ops[k + 2], &wgrad);
      }
      k += 2;
      continue;
    }
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
      const int group = op.comm_group == models::CommGroup::Tp        ? c_.stage.tp_group
                        : op.comm_group == models::CommGroup::Etp     ? c_.stage.etp_group
                        : op.comm_group == models::CommGroup::Ulysses ? c_.stage.ulysses_group
                                                                      : c_.stage.ep_group;
      // all_to_allv: a rank whose experts draw more tokens receives more than it sends.
      core::Bytes bytes =
          op.comm_group == models::CommGroup::Ep && w.experts > 1.0
              ? Bytes(static_cast<std::int64_t>(std::ceil(static_cast<double>(op.bytes.count()) * w.experts)))
              : op.bytes;
      c_.b.collective(c_.comp, op.name, *op.collective, group, bytes, Dtype::Bf16, core::OpRole::ModelParallel,
                      op.param_class);
      continue;
    }
    if (op.kind == core::ComputeKind::Attention && c_.stage.cp > 1) {
      ring_attention(op, compute * attention);
      continue;
    }
    // Most ops run as the graph has them: no copy.
    if (scale_factor(op, compute, attention, w.experts) == 1.0) {
      c_.b.compute(c_.comp, op, op.dtype);
    } else {
      c_.b.compute(c_.comp, scaled(op), op.dtype);
    }
  }
}

// Steps of an overlapped tensor-parallel pair cut `cut`: kTpOverlapChunks,
// or one per tensor-parallel rank (a ring exchange passes one shard a step).
int ModelParallel::steps(stacks::TpOverlapCut cut) const {
  return cut == stacks::TpOverlapCut::RingExchange ? std::max(2, c_.opt.tp) : kTpOverlapChunks;
}

// Chunk k of a GEMM cut into n pieces along its first dimension. Where the
// stack runs the chunks on several compute streams at once, a chunk's shape
// (what its efficiency is judged by) is that many chunks together.
models::GraphOp ModelParallel::chunk_of(const models::GraphOp& op, int k, int n) const {
  models::GraphOp c = op;
  c.name = fmt::format("{}.chunk{}", op.name, k);
  c.flops = op.flops * (1.0 / n);
  c.bytes = Bytes(op.bytes.count() / n);
  const int together = std::clamp(c_.stack.overlap.tp_gemm_streams, 1, n);
  if (c.gemm) c.gemm->m = std::max<std::int64_t>(1, c.gemm->m / n) * together;
  return c;
}

// One piece of an overlapped tensor-parallel collective on the tp stream.
// Split: the collective itself on 1/n of its buffer. Ring exchange: one of
// the n - 1 transfers, in which every rank copies one shard (1/n of the
// buffer) from or to a tensor-parallel peer over the scale-up links (copy
// engines: Transformer Engine's userbuffers, PyTorch's symmetric memory), no
// NCCL ring; it is issued as an all-to-all of 1/(n - 1) of the buffer, of
// which each rank moves 1/n through its port: one shard, at the
// point-to-point cost.
void ModelParallel::piece(const std::string& name, const models::GraphOp& collective, bool ring, int n) {
  c_.b.collective(tp_comm_, name, ring ? core::CollectiveKind::AllToAll : *collective.collective, c_.stage.tp_group,
                  Bytes(collective.bytes.count() / (ring ? n - 1 : n)), Dtype::Bf16, core::OpRole::ModelParallel,
                  collective.param_class);
}

// Tensor-parallel overlap of an all-gather and the GEMM that reads it. Split:
// all-gather chunk k on the tp stream while the GEMM works on chunk k - 1.
// Ring exchange: the GEMM starts on the rank's own shard while the first
// peer's shard arrives, then works on each shard as it comes.
void ModelParallel::overlapped_gather_gemm(const models::GraphOp& gather, const models::GraphOp& gemm) {
  const bool ring = c_.stack.overlap.tp_gather_cut == stacks::TpOverlapCut::RingExchange;
  const int n = steps(c_.stack.overlap.tp_gather_cut);
  int input = c_.b.record(c_.comp, gather.name + ".input_ready");
  c_.b.wait(tp_comm_, input, "wait input");
  std::vector<int> arrived;
  if (ring) arrived.push_back(-1);  // the rank's own shard: here already
  for (int k = ring ? 1 : 0; k < n; ++k) {
    const std::string name = fmt::format("{}.chunk{}", gather.name, k);
    piece(name, gather, ring, n);
    arrived.push_back(c_.b.record(tp_comm_, name + ".done"));
  }
  for (int k = 0; k < n; ++k) {
    const int ready = arrived[static_cast<std::size_t>(k)];
    if (ready >= 0) c_.b.wait(c_.comp, ready, "wait gathered chunk");
    c_.b.compute(c_.comp, chunk_of(gemm, k, n), gemm.dtype);
  }
}

// And the mirror: reduce-scatter chunk k while the GEMM computes chunk k + 1,
// and `beside` (a GEMM that does not read the result) after the last chunk.
// Ring exchange: each peer's partial result is copied to it as soon as its
// chunk is computed, the rank's own chunk last; then one kernel sums the tp
// partials it received (reads tp shards, writes one).
void ModelParallel::overlapped_gemm_scatter(const models::GraphOp& gemm, const models::GraphOp& scatter,
                                            const models::GraphOp* beside) {
  const bool ring = c_.stack.overlap.tp_scatter_cut == stacks::TpOverlapCut::RingExchange;
  const int n = steps(c_.stack.overlap.tp_scatter_cut);
  for (int k = 0; k < n; ++k) {
    c_.b.compute(c_.comp, chunk_of(gemm, k, n), gemm.dtype);
    if (ring && k == n - 1) break;  // the own chunk stays
    int done = c_.b.record(c_.comp, fmt::format("{}.chunk{}.done", gemm.name, k));
    c_.b.wait(tp_comm_, done, "wait gemm chunk");
    piece(fmt::format("{}.chunk{}", scatter.name, k), scatter, ring, n);
  }
  int reduced = c_.b.record(tp_comm_, scatter.name + ".done");
  if (beside != nullptr) c_.b.compute(c_.comp, *beside, beside->dtype);
  c_.b.wait(c_.comp, reduced, "wait reduce-scatter");
  if (ring) {
    models::GraphOp sum;
    sum.name = scatter.name + ".sum_partials";
    sum.kind = core::ComputeKind::Elementwise;
    sum.phase = gemm.phase;
    sum.param_class = scatter.param_class;
    sum.bytes = Bytes(scatter.bytes.count() + scatter.bytes.count() / n);
    c_.b.compute(c_.comp, sum, Dtype::Bf16);
  }
}

// The backward of a column-parallel linear, bulk-overlapped: the input's
// sequence shards are all-gathered again (sequence parallelism keeps only
// the shard) while the input-gradient GEMM runs; that gradient is
// reduce-scattered whole while the weight-gradient GEMM, which reads the
// gathered input, runs.
void ModelParallel::bulk_backward(const models::GraphOp& dgrad, const models::GraphOp& wgrad,
                                  const models::GraphOp& scatter) {
  int start = c_.b.record(c_.comp, dgrad.name + ".start");
  c_.b.wait(tp_comm_, start, "wait backward start");
  c_.b.collective(tp_comm_, scatter.name + ".input_regather", core::CollectiveKind::AllGather, c_.stage.tp_group,
                  scatter.bytes, Dtype::Bf16, core::OpRole::ModelParallel, scatter.param_class);
  int gathered = c_.b.record(tp_comm_, scatter.name + ".input_regathered");
  c_.b.compute(c_.comp, dgrad, dgrad.dtype);
  int input_grad = c_.b.record(c_.comp, dgrad.name + ".done");
  c_.b.wait(tp_comm_, input_grad, "wait input gradient");
  c_.b.collective(tp_comm_, scatter.name, core::CollectiveKind::ReduceScatter, c_.stage.tp_group, scatter.bytes,
                  Dtype::Bf16, core::OpRole::ModelParallel, scatter.param_class);
  int reduced = c_.b.record(tp_comm_, scatter.name + ".done");
  c_.b.wait(c_.comp, gathered, "wait gathered input");
  c_.b.compute(c_.comp, wgrad, wgrad.dtype);
  c_.b.wait(c_.comp, reduced, "wait reduce-scatter");
}

// Attention of this rank's queries against every rank's keys, in cp chunks:
// chunk 0 on the local K/V while that block starts round the ring; chunk i
// once block i has arrived (forwarded on to the next rank as it comes).
// Backward circulates K/V and their gradients: twice the bytes.
void ModelParallel::ring_attention(const models::GraphOp& op, double factor) {
  const int cp = c_.stage.cp;
  const bool backward = op.phase == models::Phase::BackwardInput;
  const Bytes block(c_.stage.kv_block_bytes * (backward ? 2 : 1));
  models::GraphOp chunk = op;
  chunk.flops = op.flops * (factor / cp);
  chunk.bytes = Bytes(op.bytes.count() / cp);
  int ready = c_.b.record(c_.comp, op.name + ".kv_ready");
  c_.b.wait(cp_send_, ready, "wait kv ready");
  c_.b.send(cp_send_, op.name + ".kv_send1", c_.stage.cp_next_rep, kv_sent_++, block, core::OpRole::ModelParallel);
  chunk.name = op.name + ".cp0";
  c_.b.compute(c_.comp, chunk, Dtype::Bf16);
  for (int i = 1; i < cp; ++i) {
    c_.b.recv(cp_recv_, c_.b.op_name("{}.kv_recv{}", op.name, i), c_.stage.cp_prev_rep, kv_received_++, block,
              core::OpRole::ModelParallel);
    int arrived = c_.b.record(cp_recv_, c_.b.op_name("{}.kv{}", op.name, i));
    if (i + 1 < cp) {
      c_.b.wait(cp_send_, arrived, "wait kv block");
      c_.b.send(cp_send_, c_.b.op_name("{}.kv_send{}", op.name, i + 1), c_.stage.cp_next_rep, kv_sent_++, block,
                core::OpRole::ModelParallel);
    }
    c_.b.wait(c_.comp, arrived, c_.b.op_name("wait kv block {}", i));
    chunk.name = fmt::format("{}.cp{}", op.name, i);
    c_.b.compute(c_.comp, chunk, Dtype::Bf16);
  }
}

}  // namespace hzp::plan::detail
