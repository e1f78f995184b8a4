// One program's lowering: the walk over its stage's uses (each unit of each
// pipeline slot, forward in order or backward in reverse), which calls the
// passes of stage_lowering.hpp where their work belongs.
#include <fmt/compile.h>
#include <fmt/format.h>
#include <algorithm>

#include "plan/stage_lowering.hpp"

namespace hzp::plan::detail {

using core::Bytes;
using core::StreamKind;

StageContext::StageContext(std::vector<Unit> units_in, const BatchSplit& batch_in, const PlanOptions& opt_in,
                           bool async_in, Layout layout_in, Stage stage_in, const Inputs& in)
    : batch(batch_in),
      opt(opt_in),
      stack(in.stack->spec),
      topo(in.cluster),
      async(async_in),
      layout(layout_in),
      stage(std::move(stage_in)),
      units(std::move(units_in)),
      b(stage.program, stage.name, stage.ranks, stage.op_names) {}

std::vector<RankParams> rank_params(const StageContext& c, const std::vector<ShardedParams>& classes) {
  std::vector<RankParams> out;
  for (const ShardedParams& p : classes) {
    RankParams k{p.cls, p.tag, p.sh, p.ranks, p.groups_of(c.stage.ranks.front()), {}, {}, c.opt.offload_params};
    // Each unit is flattened and padded to a multiple of g_o.
    const std::int64_t o = p.sh.optim;
    for (const auto& u : c.units) {
      const bool dense = p.cls == core::ParamClass::Dense;
      const std::int64_t weights = dense ? u.u->weight_params : u.u->expert_params;
      const std::int64_t owned = dense ? u.u->params : u.u->expert_params;
      k.padded.push_back(ceil_div(weights, o) * o);
      k.owned.push_back(ceil_div(owned, o) * o);
    }
    out.push_back(std::move(k));
  }
  return out;
}

StageLowering::StageLowering(std::vector<Unit> units, const BatchSplit& batch, const PlanOptions& opt,
                             const std::vector<ShardedParams>& classes, bool async, Layout layout, Stage stage,
                             const Inputs& in)
    : c_(std::move(units), batch, opt, async, layout, std::move(stage), in),
      classes_(rank_params(c_, classes)),
      offload_(c_, classes_),
      zero_(c_, classes_, offload_),
      pipeline_(c_),
      model_parallel_(c_) {}

core::Program StageLowering::run() {
  add_streams();
  zero_.alloc_model_state();
  alloc_nccl_buffers();
  zero_.alloc_pools();
  plan_uses();
  // Sized once: a stream grown op by op moves every op it holds each time it
  // doubles, and may end up with twice the room it needs.
  c_.b.reserve(c_.comp, compute_ops_estimate());
  for (std::size_t j = 0; j < c_.uses.size(); ++j) {
    const Use& use = c_.uses[j];
    zero_.prefetch_through(j);
    if (use.first_of_slot) pipeline_.receive(j);
    if (use.part == BackwardPart::Input) {
      backward_input(j);
    } else if (use.part == BackwardPart::Weight) {
      backward_weight(j);
    } else if (use.backward) {
      backward(j);
    } else {
      forward(j);
    }
    if (use.last_of_slot) pipeline_.send(j);
  }
  zero_.step_end();
  c_.b.set_host_bytes(Bytes(offload_.host_bytes()));
  return c_.b.take();
}

// The host threads and the streams, in the order the passes add them.
void StageLowering::add_streams() {
  // The host's cost to issue each op: a kernel or a collective the stack's
  // (its framework's dispatch and hooks included) where it states one, else
  // the device's launch latency; an event, an allocator call and the return
  // from a blocking wait the stack's.
  const stacks::HostCosts& host = c_.stack.host;
  const auto& dev = c_.topo.spec().device;
  core::Thread costs;
  costs.launch_latency = core::Duration::us(host.kernel_us > 0 ? host.kernel_us : dev.launch_latency_us);
  costs.collective_launch_latency =
      core::Duration::us(host.collective_us > 0 ? host.collective_us : dev.collective_launch_latency_us);
  costs.event_latency = core::Duration::us(host.event_us);
  costs.alloc_latency = core::Duration::us(host.alloc_us);
  costs.sync_latency = core::Duration::us(host.sync_us);
  const int main = c_.b.add_thread("main", costs);
  const int param_thread = c_.async ? c_.b.add_thread("param", costs) : main;
  const int grad_thread = c_.async ? c_.b.add_thread("grad", costs) : main;
  c_.comp = c_.b.add_stream("compute", StreamKind::Compute, main);
  zero_.add_streams(param_thread, grad_thread);
  model_parallel_.add_streams(main);
  pipeline_.add_streams(main);
  offload_.add_streams(main);
}

// NCCL's own buffers: every communicator (and point-to-point peer) this rank
// uses holds kNcclBufferBytes (see plan.hpp).
void StageLowering::alloc_nccl_buffers() {
  std::set<int> comms;
  zero_.add_communicators(comms);
  const Stage& s = c_.stage;
  for (int g : {s.tp_group, s.ep_group, s.etp_group}) {
    if (g >= 0) comms.insert(g);
  }
  const std::int64_t peers = (c_.layout.pp > 1 ? 2 : 0) + (s.cp > 1 ? 2 : 0) + (s.mirror_group >= 0 ? 1 : 0);
  const std::int64_t communicators = static_cast<std::int64_t>(comms.size()) + peers;
  if (communicators > 0) {
    c_.b.alloc(c_.comp, "nccl_buffers", Bytes(communicators * kNcclBufferBytes), core::BufferClass::NcclBuffers);
  }
}

// The uses of the stage in order: every unit of each slot's chunk, forward in
// order or backward in reverse; and which of them gather parameters.
void StageLowering::plan_uses() {
  for (const PipelineSlot& slot : c_.stage.order) {
    std::vector<std::size_t> in_chunk;
    for (std::size_t u = 0; u < c_.units.size(); ++u) {
      if (c_.units[u].chunk == slot.chunk) in_chunk.push_back(u);
    }
    if (slot.backward) std::reverse(in_chunk.begin(), in_chunk.end());
    for (std::size_t i = 0; i < in_chunk.size(); ++i) {
      const std::size_t u = in_chunk[i];
      // A W (zero-bubble schedules) computes without the parameters.
      const bool gathers =
          zero_.any_gathers(u) && (!slot.backward || c_.opt.reshard_after_forward) && slot.part != BackwardPart::Weight;
      Use use{u, slot.micro_batch, slot.backward, gathers};
      use.first_of_slot = i == 0;
      use.last_of_slot = i + 1 == in_chunk.size();
      use.chunk = slot.chunk;
      use.part = slot.backward ? slot.part : BackwardPart::Whole;
      c_.uses.push_back(use);
    }
  }
  c_.use_done.assign(c_.uses.size(), -1);
  zero_.index_uses();
}

std::size_t StageLowering::compute_ops_estimate() const {
  std::vector<std::size_t> weight_ops(c_.units.size(), 0);  // per unit, its backward's W kernels
  for (std::size_t u = 0; u < c_.units.size(); ++u) {
    for (const auto& op : c_.unit(u).backward) weight_ops[u] += op.phase == models::Phase::BackwardWeight ? 1 : 0;
  }
  // Besides its kernels, a use records its end, allocates or frees its
  // activations, recomputed and working buffers and, where it gathers its
  // parameters, waits for them and releases them. These counts hold the plans
  // tried within a few ops or with up to 16 % to spare (FSDP, HZP, ZeRO-3
  // with offload, TP/PP, zero-bubble, DualPipe, MoE); context parallelism
  // adds more (the stream then grows by an eighth).
  std::size_t n = 0;
  for (const Use& use : c_.uses) {
    const models::Unit& unit = c_.unit(use.unit);
    const std::size_t w = weight_ops[use.unit];
    n += !use.backward                      ? unit.forward.size() + (use.gathers ? 5 : 3)
         : use.part == BackwardPart::Weight ? w + 2
         : use.part == BackwardPart::Input  ? unit.backward.size() - w + 3
                                            : unit.backward.size() + (use.gathers ? 8 : 3);
  }
  return n;
}

void StageLowering::forward(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = c_.unit(use.unit);
  zero_.before_forward(j);
  const int gathered = zero_.wait_gathered(j);
  alloc_activations(j);
  model_parallel_.unit_ops(unit.forward, use.mb);
  c_.use_done[j] = c_.b.record(c_.comp, c_.b.op_name("{}.fwd_done", unit.name));
  offload_.offload_activations(j);
  if (c_.opt.reshard_after_forward) zero_.release_gathered(gathered);
}

void StageLowering::backward(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = c_.unit(use.unit);
  const int gathered = zero_.wait_gathered(j);
  zero_.take_grad_buffer(j);
  offload_.fetch_activations(j);
  const std::string recomputed = fmt::format(FMT_COMPILE("recomputed.u{}.mb{}"), use.unit, use.mb);
  if (unit.recomputed.count() > 0) c_.b.alloc(c_.comp, recomputed, unit.recomputed, core::BufferClass::Recomputed);
  alloc_working(j);
  model_parallel_.unit_ops(unit.backward, use.mb);
  free_working(j);
  if (unit.recomputed.count() > 0) c_.b.free(c_.comp, recomputed, unit.recomputed);
  c_.use_done[j] = c_.b.record(c_.comp, c_.b.op_name("{}.bwd_done", unit.name));
  zero_.release_gathered(gathered);
  offload_.release_activations(j);
  zero_.gradients_done(j);
}

// A unit's activations from its forward on. Under a zero-bubble schedule they
// are two buffers: what only B reads, freed after B, and what W still reads
// (weight_held), freed after W.
void StageLowering::alloc_activations(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = c_.unit(use.unit);
  const std::string name = fmt::format(FMT_COMPILE("act.u{}.mb{}"), use.unit, use.mb);
  if (!c_.split_backward()) {
    c_.b.alloc(c_.comp, name, unit.activations, core::BufferClass::Activations);
    return;
  }
  const Bytes held = weight_held(use.unit).first;
  c_.b.alloc(c_.comp, name, unit.activations - held, core::BufferClass::Activations);
  c_.b.alloc(c_.comp, fmt::format(FMT_COMPILE("act_w.u{}.mb{}"), use.unit, use.mb), held,
             core::BufferClass::Activations);
}

// What a backward allocates and frees again beside its activations (the
// unfused loss's gradients), for the duration of its kernels.
void StageLowering::alloc_working(std::size_t j) {
  const Use& use = c_.uses[j];
  const Bytes working = c_.unit(use.unit).backward_working;
  if (working.count() > 0) {
    c_.b.alloc(c_.comp, fmt::format(FMT_COMPILE("working.u{}.mb{}"), use.unit, use.mb), working,
               core::BufferClass::Activations);
  }
}
void StageLowering::free_working(std::size_t j) {
  const Use& use = c_.uses[j];
  const Bytes working = c_.unit(use.unit).backward_working;
  if (working.count() > 0) c_.b.free(c_.comp, fmt::format(FMT_COMPILE("working.u{}.mb{}"), use.unit, use.mb), working);
}

// What a unit's W reads after its B (per micro-batch, M_W in Qi et al.'s
// Table 1): the operands of its weight-gradient GEMMs, the layer inputs and
// the output gradients B leaves behind. Held from the stored activations,
// then from what recomputation brought back (full recomputation stores
// little: W keeps most of what B recomputed); the pair (stored, recomputed).
std::pair<Bytes, Bytes> StageLowering::weight_held(std::size_t u) const {
  const auto& unit = c_.unit(u);
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
void StageLowering::backward_input(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = c_.unit(use.unit);
  const int gathered = zero_.wait_gathered(j);
  const auto [held, held_recomputed] = weight_held(use.unit);
  const std::string recomputed = fmt::format(FMT_COMPILE("recomputed.u{}.mb{}"), use.unit, use.mb);
  if (unit.recomputed.count() > 0) {
    c_.b.alloc(c_.comp, recomputed, unit.recomputed - held_recomputed, core::BufferClass::Recomputed);
    c_.b.alloc(c_.comp, fmt::format(FMT_COMPILE("recomputed_w.u{}.mb{}"), use.unit, use.mb), held_recomputed,
               core::BufferClass::Recomputed);
  }
  std::vector<models::GraphOp> ops;
  for (const auto& op : unit.backward) {
    if (op.phase != models::Phase::BackwardWeight) ops.push_back(op);
  }
  alloc_working(j);  // the loss's gradients belong to B
  model_parallel_.unit_ops(ops, use.mb);
  free_working(j);
  c_.use_done[j] = c_.b.record(c_.comp, c_.b.op_name("{}.input_grad_done", unit.name));
  zero_.release_gathered(gathered);
  if (unit.recomputed.count() > 0) c_.b.free(c_.comp, recomputed, unit.recomputed - held_recomputed);
  c_.b.free(c_.comp, fmt::format(FMT_COMPILE("act.u{}.mb{}"), use.unit, use.mb), unit.activations - held);
}

// W of a zero-bubble schedule: the weight gradients into the unit's gradient
// buffer; then the rest of its activations go, and its gradients are reduced
// as after a whole backward (the reduction waits for W, not B).
void StageLowering::backward_weight(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = c_.unit(use.unit);
  zero_.take_grad_buffer(j);
  std::vector<models::GraphOp> ops;
  for (const auto& op : unit.backward) {
    if (op.phase == models::Phase::BackwardWeight) ops.push_back(op);
  }
  model_parallel_.unit_ops(ops, use.mb);
  c_.use_done[j] = c_.b.record(c_.comp, c_.b.op_name("{}.bwd_done", unit.name));
  const auto [held, held_recomputed] = weight_held(use.unit);
  c_.b.free(c_.comp, fmt::format(FMT_COMPILE("act_w.u{}.mb{}"), use.unit, use.mb), held);
  if (unit.recomputed.count() > 0) {
    c_.b.free(c_.comp, fmt::format(FMT_COMPILE("recomputed_w.u{}.mb{}"), use.unit, use.mb), held_recomputed);
  }
  zero_.gradients_done(j);
}

}  // namespace hzp::plan::detail
