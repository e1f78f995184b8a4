// Lowering data-parallel plans to a Schedule: every strategy is one
// hierarchical ZeRO plan (g_p, g_g, g_o), generated — never hand-written.
//
// One rank class (every data-parallel rank runs the same list). Per
// micro-batch: units run forward in order, then backward in reverse.
//  - g_p > 1: each unit's bf16 parameters are all-gathered inside its g_p
//    group before forward and again before backward (unless kept gathered),
//    at most prefetch_depth uses ahead of compute, and freed after use.
//  - g_g > 1: after each unit's backward its bf16 gradients are
//    reduce-scattered inside the g_g group and accumulated into a 1/g_g shard
//    (accumulation dtype an option); g_g = 1 accumulates locally (fused into
//    the weight-gradient GEMMs, as Megatron's gradient-accumulation fusion).
//  - after the last micro-batch, per unit as soon as its gradients are final:
//    reduce-scatter 1/g_g -> 1/g_o over the g_o/g_g ranks holding the same
//    1/g_g shard (stride g_g), all-reduce across the DP/g_o optimizer replicas
//    (stride g_o), Adam on the 1/g_o shard, all-gather 1/g_o -> 1/g_p over the
//    g_o/g_p ranks holding pieces of the same 1/g_p shard (stride g_p).
// Groups are contiguous rank blocks (strided sets inside them), so with ranks
// numbered node by node the smallest groups fill scale-up domains first and
// strided groups run along rails.
//
// async on: a "param" thread issues the all-gathers and a "grad" thread the
// reduce-scatters, each onto its own stream; the compute thread only waits on
// events; gathered and gradient buffers come from pools of prefetch_depth + 1
// slots allocated at start. async off: the compute thread issues everything
// inline and blocks (host sync) until a buffer's last user has finished before
// reusing it; buffers come from the caching allocator (alloc/free per use).
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/schedule_check.hpp"
#include "plan/program_builder.hpp"

namespace hzp::plan {

using core::Bytes;
using core::CollectiveKind;
using core::ComputeKind;
using core::Dtype;
using core::Flops;
using core::StreamKind;

BatchSplit split_batch(const models::ModelSpec& m, int world, const PlanOptions& o) {
  BatchSplit b;
  b.seq_len = o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
  if (b.seq_len > m.max_seq_len) {
    throw core::InputError(
        "command line", "--seq-len",
        fmt::format("expected at most {} (max_seq_len of {}), got {}", m.max_seq_len, m.name, b.seq_len));
  }
  if (o.global_batch_tokens.has_value() == o.global_batch_sequences.has_value()) {
    throw core::InputError("command line", "--global-batch-tokens",
                           "expected exactly one of --global-batch-tokens and --global-batch-seqs");
  }
  if (o.micro_batch < 1)
    throw core::InputError("command line", "--micro-batch", "expected a positive number of sequences");
  std::string key = o.global_batch_tokens ? "--global-batch-tokens" : "--global-batch-seqs";
  if (o.global_batch_tokens) {
    if (*o.global_batch_tokens <= 0 || *o.global_batch_tokens % b.seq_len != 0) {
      throw core::InputError("command line", key,
                             fmt::format("expected a positive multiple of the sequence length {}, got {}", b.seq_len,
                                         *o.global_batch_tokens));
    }
    b.sequences = *o.global_batch_tokens / b.seq_len;
  } else {
    b.sequences = *o.global_batch_sequences;
    if (b.sequences <= 0) throw core::InputError("command line", key, "expected a positive number of sequences");
  }
  if (o.tp < 1 || world % o.tp != 0) {
    throw core::InputError("command line", "--tp",
                           fmt::format("expected a divisor of the {} GPUs, got {}", world, o.tp));
  }
  if (o.pp < 1 || (world / o.tp) % o.pp != 0) {
    throw core::InputError(
        "command line", "--pp",
        fmt::format("expected a divisor of GPUs / tp = {}, got {}", world / std::max(o.tp, 1), o.pp));
  }
  b.data_parallel = world / (o.tp * o.pp);
  const std::int64_t per_step = static_cast<std::int64_t>(b.data_parallel) * o.micro_batch;
  if (b.sequences % per_step != 0) {
    throw core::InputError("command line", key,
                           fmt::format("{} sequences do not split over {} data-parallel ranks x micro-batch {}: "
                                       "expected a multiple of {} sequences",
                                       b.sequences, b.data_parallel, o.micro_batch, per_step));
  }
  b.micro_batches = b.sequences / per_step;
  return b;
}

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

namespace {

struct Unit {
  const models::Unit* u;
  int chunk;
  std::int64_t padded;  // weight parameters padded to a multiple of g_o
  std::int64_t owned;   // owned parameters padded likewise (0 for a tied head)
};

struct GroupIds {
  int param = -1, grad = -1, optim = -1, replica = -1, regather = -1, tp = -1;
};

struct Layout {
  int tp = 1, dp = 1, pp = 1, vpp = 1;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Adds the data-parallel groups of one kind: within every (tensor rank,
// stage) slice, blocks of `block` consecutive data-parallel ranks, split into
// `block / stride` groups of ranks `stride` apart. Returns the id of the group
// holding the stage's representative (t = 0, d = 0), or -1 for one-rank groups.
std::vector<int> add_dp_groups(core::Schedule& s, core::GroupKind kind, const Layout& l, int block, int stride) {
  std::vector<int> first(static_cast<std::size_t>(l.pp), -1);
  if (block / stride <= 1) return first;
  for (int p = 0; p < l.pp; ++p) {
    for (int t = 0; t < l.tp; ++t) {
      for (int b = 0; b < l.dp; b += block) {
        for (int off = 0; off < stride; ++off) {
          core::Group g;
          g.id = static_cast<int>(s.groups.size());
          g.kind = kind;
          for (int d = b + off; d < b + block; d += stride) g.ranks.push_back(rank_of(t, d, p, l.tp, l.dp));
          if (t == 0 && b == 0 && off == 0) first[static_cast<std::size_t>(p)] = g.id;
          s.groups.push_back(std::move(g));
        }
      }
    }
  }
  return first;
}

std::vector<int> add_tp_groups(core::Schedule& s, const Layout& l) {
  std::vector<int> first(static_cast<std::size_t>(l.pp), -1);
  if (l.tp <= 1) return first;
  for (int p = 0; p < l.pp; ++p) {
    for (int d = 0; d < l.dp; ++d) {
      core::Group g;
      g.id = static_cast<int>(s.groups.size());
      g.kind = core::GroupKind::Tp;
      for (int t = 0; t < l.tp; ++t) g.ranks.push_back(rank_of(t, d, p, l.tp, l.dp));
      if (d == 0) first[static_cast<std::size_t>(p)] = g.id;
      s.groups.push_back(std::move(g));
    }
  }
  return first;
}

class Lowering {
 public:
  struct Stage {
    int index = 0;
    std::vector<int> ranks;
    int prev_rep = -1, next_rep = -1;  // representatives of the neighbouring stages
    std::vector<PipelineSlot> order;
    std::int64_t boundary_bytes = 0;  // activation or gradient between stages
  };

  Lowering(std::vector<std::pair<const models::Unit*, int>> units, const BatchSplit& batch, const PlanOptions& opt,
           ShardSizes shards, bool async, GroupIds groups, Layout layout, Stage stage, const topologies::Topology& topo)
      : batch_(batch),
        opt_(opt),
        sh_(shards),
        async_(async),
        groups_(groups),
        layout_(layout),
        stage_(std::move(stage)),
        topo_(topo),
        b_(stage_.index, layout.pp > 1 ? fmt::format("stage{}", stage_.index) : "dp", stage_.ranks) {
    for (auto [u, chunk] : units) {
      std::int64_t o = shards.optim;
      units_.push_back(Unit{u, chunk, ceil_div(u->weight_params, o) * o, ceil_div(u->params, o) * o});
    }
    acc_ = core::dtype_bytes(opt.grad_dtype);
  }

  core::Program run() {
    setup();
    for (std::size_t j = 0; j < uses_.size(); ++j) {
      prefetch_through(j);
      if (uses_[j].first_of_slot) receive(j);
      if (uses_[j].backward) {
        backward(j);
      } else {
        forward(j);
      }
      if (uses_[j].last_of_slot) send(j);
    }
    step_end();
    return b_.take();
  }

 private:
  struct Use {
    std::size_t unit;
    std::int64_t mb;
    bool backward;
    bool gathers;  // this use all-gathers parameters (else it has them)
    bool first_of_slot = false, last_of_slot = false;
    int chunk = 0;
  };

  bool gathers() const { return sh_.param > 1; }
  // Gathered buffers come from the pool when async and each is freed before
  // the next use of its slot (reshard after forward); otherwise they are
  // allocated per use.
  bool pooled() const { return async_ && opt_.reshard_after_forward; }
  bool reduces_per_micro_batch() const { return sh_.grad > 1; }
  Bytes gathered_bytes(std::size_t u) const { return Bytes(2 * units_[u].padded); }
  Bytes full_grad_bytes(std::size_t u) const { return Bytes(2 * units_[u].padded); }
  std::string buf(const char* what, std::size_t j) const { return fmt::format("{}.{}", what, j); }
  // The first and last virtual pipeline stage hold the embedding and the head.
  bool first_virtual(int chunk) const { return stage_.index == 0 && chunk == 0; }
  bool last_virtual(int chunk) const { return stage_.index == layout_.pp - 1 && chunk == layout_.vpp - 1; }

  void setup() {
    const core::Duration launch = core::Duration::us(topo_.spec().device.launch_latency_us);
    int main = b_.add_thread("main", launch);
    int param_thread = async_ ? b_.add_thread("param", launch) : main;
    int grad_thread = async_ ? b_.add_thread("grad", launch) : main;
    comp_ = b_.add_stream("compute", StreamKind::Compute, main);
    ag_ = b_.add_stream("param_allgather", StreamKind::ParamGather, param_thread);
    rs_ = b_.add_stream("grad_reduce", StreamKind::GradReduce, grad_thread);
    if (layout_.pp > 1) {
      // Sends run on their own streams so that a stage can send and receive at
      // once (Megatron batches isend/irecv); receives sit on the compute stream.
      send_fwd_ = b_.add_stream("pp_send_fwd", StreamKind::Comm, main);
      send_bwd_ = b_.add_stream("pp_send_bwd", StreamKind::Comm, main);
    }

    // Model state, per rank: bf16 parameters over g_p, accumulated gradients
    // over g_g, fp32 master weights and Adam moments over g_o.
    std::int64_t owned = 0;
    for (const auto& u : units_) owned += u.owned;
    b_.alloc(comp_, "params", Bytes(2 * owned / sh_.param));
    b_.alloc(comp_, "grads", Bytes(acc_ * owned / sh_.grad));
    b_.alloc(comp_, "optimizer_states", Bytes(kOptimizerStateBytesPerParam * owned / sh_.optim));
    if (async_) {
      // Pools of prefetch_depth + 1 slots sized for the largest unit: allocated
      // once, so per-use buffers never fragment the heap.
      const auto slots = static_cast<std::int64_t>(opt_.prefetch_depth) + 1;
      Bytes largest{};
      for (std::size_t u = 0; u < units_.size(); ++u) largest = std::max(largest, gathered_bytes(u));
      if (gathers() && pooled()) b_.alloc(comp_, "pool.gathered", Bytes(slots * largest.count()));
      if (reduces_per_micro_batch()) b_.alloc(comp_, "pool.grad", Bytes(slots * largest.count()));
    }

    for (const PipelineSlot& slot : stage_.order) {
      std::vector<std::size_t> in_chunk;
      for (std::size_t u = 0; u < units_.size(); ++u) {
        if (units_[u].chunk == slot.chunk) in_chunk.push_back(u);
      }
      if (slot.backward) std::reverse(in_chunk.begin(), in_chunk.end());
      for (std::size_t i = 0; i < in_chunk.size(); ++i) {
        Use use{in_chunk[i], slot.micro_batch, slot.backward,
                gathers() && (!slot.backward || opt_.reshard_after_forward)};
        use.first_of_slot = i == 0;
        use.last_of_slot = i + 1 == in_chunk.size();
        use.chunk = slot.chunk;
        uses_.push_back(use);
      }
    }
    for (std::size_t j = 0; j < uses_.size(); ++j) {
      if (uses_[j].gathers) gather_uses_.push_back(j);
      if (uses_[j].backward) bwd_uses_.push_back(j);
    }
    ag_done_.assign(uses_.size(), -1);
    use_done_.assign(uses_.size(), -1);
    rs_done_.assign(uses_.size(), -1);
    forward_gather_.assign(units_.size() * static_cast<std::size_t>(batch_.micro_batches), -1);
  }

  // Pipeline boundary: receive the activation (forward) or its gradient
  // (backward) from the neighbouring virtual stage before the slot's first unit.
  void receive(std::size_t j) {
    const Use& use = uses_[j];
    if (layout_.pp <= 1) return;
    if (!use.backward && !first_virtual(use.chunk)) {
      int from = stage_.prev_rep;  // the stage before (stage 0 chunk c: the last stage, chunk c - 1)
      b_.recv(comp_, fmt::format("recv act mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from),
              Bytes(stage_.boundary_bytes));
    } else if (use.backward && !last_virtual(use.chunk)) {
      int from = stage_.next_rep;
      b_.recv(comp_, fmt::format("recv grad mb{} chunk{}", use.mb, use.chunk), from, next_seq(recv_seq_, from),
              Bytes(stage_.boundary_bytes));
    }
  }

  void send(std::size_t j) {
    const Use& use = uses_[j];
    if (layout_.pp <= 1) return;
    if (!use.backward && !last_virtual(use.chunk)) {
      int ready = b_.record(comp_, fmt::format("act ready mb{} chunk{}", use.mb, use.chunk));
      b_.wait(send_fwd_, ready, "wait act ready");
      b_.send(send_fwd_, fmt::format("send act mb{} chunk{}", use.mb, use.chunk), stage_.next_rep,
              next_seq(send_seq_, stage_.next_rep), Bytes(stage_.boundary_bytes));
    } else if (use.backward && !first_virtual(use.chunk)) {
      int ready = b_.record(comp_, fmt::format("grad ready mb{} chunk{}", use.mb, use.chunk));
      b_.wait(send_bwd_, ready, "wait grad ready");
      b_.send(send_bwd_, fmt::format("send grad mb{} chunk{}", use.mb, use.chunk), stage_.prev_rep,
              next_seq(send_seq_, stage_.prev_rep), Bytes(stage_.boundary_bytes));
    }
  }

  static int next_seq(std::map<int, int>& counters, int peer) { return counters[peer]++; }

  // The compute ops of a unit's forward or backward, with tensor-parallel
  // collectives on the compute stream (they sit on the critical path).
  void unit_ops(const std::vector<models::GraphOp>& ops) {
    for (const auto& op : ops) {
      if (op.collective) {
        b_.collective(comp_, op.name, *op.collective, groups_.tp, op.bytes, Dtype::Bf16);
      } else {
        b_.compute(comp_, op, Dtype::Bf16);
      }
    }
  }

  // Issues all-gathers ahead of compute: those of the next prefetch_depth
  // gathering uses after use j.
  void prefetch_through(std::size_t j) {
    const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
    const std::size_t current =
        static_cast<std::size_t>(std::lower_bound(gather_uses_.begin(), gather_uses_.end(), j) - gather_uses_.begin());
    while (next_gather_ < gather_uses_.size() && next_gather_ <= current + depth) {
      issue_gather(next_gather_, gather_uses_[next_gather_]);
      ++next_gather_;
    }
  }

  void issue_gather(std::size_t g, std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
    // The slot this gather reuses was last used by gathering use g - depth - 1.
    if (g >= depth + 1) {
      int freed = use_done_[gather_uses_[g - depth - 1]];
      if (async_) {
        b_.wait(ag_, freed, fmt::format("wait slot for {}", unit.name));
      } else {
        b_.sync(ag_, freed, fmt::format("host waits slot for {}", unit.name));
      }
    }
    if (!pooled()) b_.alloc(ag_, buf("gathered", j), gathered_bytes(use.unit));
    b_.collective(ag_, fmt::format("{}.allgather.{}", unit.name, use.backward ? "bwd" : "fwd"),
                  CollectiveKind::AllGather, groups_.param, gathered_bytes(use.unit), Dtype::Bf16);
    ag_done_[j] = b_.record(ag_, fmt::format("{}.gathered", unit.name));
    if (!use.backward) forward_gather_[slot(use)] = static_cast<int>(j);
  }

  std::size_t slot(const Use& use) const { return static_cast<std::size_t>(use.mb) * units_.size() + use.unit; }

  // The use whose gathered buffer this use computes with.
  std::size_t gathered_by(std::size_t j) const {
    const Use& use = uses_[j];
    if (use.gathers) return j;
    return static_cast<std::size_t>(forward_gather_[slot(use)]);
  }

  void forward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    if (gathers()) b_.wait(comp_, ag_done_[j], fmt::format("wait {}.gathered", unit.name));
    b_.alloc(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);
    unit_ops(unit.forward);
    use_done_[j] = b_.record(comp_, fmt::format("{}.fwd_done", unit.name));
    if (gathers() && opt_.reshard_after_forward && !pooled()) {
      b_.free(comp_, buf("gathered", j), gathered_bytes(use.unit));
    }
  }

  void backward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    const bool last_mb = use.mb + 1 == batch_.micro_batches;
    if (gathers()) b_.wait(comp_, ag_done_[gathered_by(j)], fmt::format("wait {}.gathered", unit.name));
    if (reduces_per_micro_batch()) {
      // The full-gradient buffer: a pool slot (free once the reduce-scatter
      // that used it depth + 1 backward uses ago is done) or a fresh allocation.
      std::size_t k = bwd_index_++;
      const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
      if (async_) {
        if (k >= depth + 1) b_.wait(comp_, rs_done_[bwd_uses_[k - depth - 1]], "wait grad slot");
      } else {
        b_.alloc(comp_, buf("grad", j), full_grad_bytes(use.unit));
      }
    }
    const std::string recomputed = fmt::format("recomputed.u{}.mb{}", use.unit, use.mb);
    if (unit.recomputed.count() > 0) b_.alloc(comp_, recomputed, unit.recomputed);
    unit_ops(unit.backward);
    if (unit.recomputed.count() > 0) b_.free(comp_, recomputed, unit.recomputed);
    use_done_[j] = b_.record(comp_, fmt::format("{}.bwd_done", unit.name));
    if (gathers() && !pooled()) b_.free(comp_, buf("gathered", gathered_by(j)), gathered_bytes(use.unit));
    b_.free(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);

    if (reduces_per_micro_batch()) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
      b_.collective(rs_, unit.name + ".grad_reducescatter", CollectiveKind::ReduceScatter, groups_.grad,
                    full_grad_bytes(use.unit), Dtype::Bf16);
      const std::int64_t shard = units_[use.unit].padded / sh_.grad;
      b_.compute(rs_, unit.name + ".grad_accumulate", ComputeKind::Elementwise, Flops(static_cast<double>(shard)),
                 Bytes((2 + 2 * acc_) * shard), opt_.grad_dtype);
      rs_done_[j] = b_.record(rs_, fmt::format("{}.grad_reduced", unit.name));
      if (!async_) b_.free(rs_, buf("grad", j), full_grad_bytes(use.unit));
    } else if (last_mb && needs_step_reduction()) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
    }
    if (last_mb) reduce_for_optimizer(use.unit);
  }

  bool needs_step_reduction() const { return sh_.optim / sh_.grad > 1 || layout_.dp / sh_.optim > 1; }

  // Once the unit's gradients are final: 1/g_g -> 1/g_o, then across replicas.
  void reduce_for_optimizer(std::size_t u) {
    const auto& unit = *units_[u].u;
    if (units_[u].owned == 0) return;
    if (sh_.optim / sh_.grad > 1) {
      b_.collective(rs_, unit.name + ".grad_reducescatter.optim", CollectiveKind::ReduceScatter, groups_.optim,
                    Bytes(acc_ * units_[u].padded / sh_.grad), opt_.grad_dtype);
    }
    if (layout_.dp / sh_.optim > 1) {
      b_.collective(rs_, unit.name + ".grad_allreduce", CollectiveKind::AllReduce, groups_.replica,
                    Bytes(acc_ * units_[u].padded / sh_.optim), opt_.grad_dtype);
    }
    reduced_.emplace_back(u, needs_step_reduction() || reduces_per_micro_batch()
                                 ? b_.record(rs_, fmt::format("{}.grads_final", unit.name))
                                 : -1);
  }

  void step_end() {
    // Adam per unit on the compute stream as each unit's reduction lands
    // (units arrive in backward order), then the regather of its parameters.
    for (auto [u, ev] : reduced_) {
      const auto& unit = *units_[u].u;
      if (ev >= 0) b_.wait(comp_, ev, fmt::format("wait {}.grads_final", unit.name));
      const std::int64_t shard = units_[u].owned / sh_.optim;
      b_.compute(comp_, unit.name + ".adam", ComputeKind::Optimizer, Flops(12.0 * static_cast<double>(shard)),
                 Bytes(kAdamBytesPerParam * shard), Dtype::Fp32);
      if (sh_.optim / sh_.param > 1) {
        int done = b_.record(comp_, fmt::format("{}.updated", unit.name));
        b_.wait(ag_, done, fmt::format("wait {}.updated", unit.name));
        b_.collective(ag_, unit.name + ".param_allgather.optim", CollectiveKind::AllGather, groups_.regather,
                      Bytes(2 * units_[u].owned / sh_.param), Dtype::Bf16);
      }
    }
    std::int64_t owned = 0;
    for (const auto& u : units_) owned += u.owned;
    b_.compute(comp_, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(acc_ * owned / sh_.grad),
               opt_.grad_dtype);
  }

  const BatchSplit& batch_;
  const PlanOptions& opt_;
  ShardSizes sh_;
  bool async_;
  GroupIds groups_;
  Layout layout_;
  Stage stage_;
  const topologies::Topology& topo_;
  ProgramBuilder b_;
  std::vector<Unit> units_;
  std::int64_t acc_ = 4;
  int comp_ = 0, ag_ = 0, rs_ = 0, send_fwd_ = -1, send_bwd_ = -1;
  std::vector<Use> uses_;
  std::vector<std::size_t> gather_uses_, bwd_uses_;
  std::vector<int> ag_done_, use_done_, rs_done_, forward_gather_;
  std::size_t next_gather_ = 0, bwd_index_ = 0;
  std::vector<std::pair<std::size_t, int>> reduced_;
  std::map<int, int> send_seq_, recv_seq_;
};

std::string recompute_name(models::Recompute r) {
  return r == models::Recompute::None ? "none" : r == models::Recompute::Selective ? "selective" : "full";
}

}  // namespace

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::Ddp: return "ddp";
    case Strategy::Zero1: return "zero1";
    case Strategy::Zero2: return "zero2";
    case Strategy::Fsdp: return "fsdp";
    case Strategy::Hsdp: return "hsdp";
    case Strategy::Hpz: return "hpz";
    case Strategy::Hzp: return "hzp";
  }
  return "?";
}

Strategy parse_strategy(const std::string& s) {
  if (s == "zero3") return Strategy::Fsdp;
  for (Strategy x : all_strategies()) {
    if (s == to_string(x)) return x;
  }
  throw core::InputError("command line", "--strategy",
                         fmt::format("expected ddp|zero1|zero2|zero3|fsdp|hsdp|hpz|hzp|all, got '{}'", s));
}

std::vector<Strategy> all_strategies() {
  return {Strategy::Ddp,  Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp,
          Strategy::Hsdp, Strategy::Hpz,   Strategy::Hzp};
}

bool resolve_async(const PlanOptions& o) { return o.async.value_or(o.strategy == Strategy::Hzp); }

ShardSizes resolve_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c) {
  const int node = std::min(c.devices_per_node, dp);
  const int domain = std::min(c.scale_up.domain_devices, dp);
  ShardSizes s;
  switch (o.strategy) {
    case Strategy::Ddp: s = {1, 1, 1}; break;
    case Strategy::Zero1: s = {1, 1, dp}; break;
    case Strategy::Zero2: s = {1, dp, dp}; break;
    case Strategy::Fsdp: s = {dp, dp, dp}; break;
    case Strategy::Hsdp: {
      int S = o.param_shard > 0 ? o.param_shard : node;
      s = {S, S, S};
      break;
    }
    case Strategy::Hpz: s = {node, dp, dp}; break;
    case Strategy::Hzp:
      s = {o.param_shard > 0 ? o.param_shard : domain, o.grad_shard > 0 ? o.grad_shard : node,
           o.optim_shard > 0 ? o.optim_shard : dp};
      break;
  }
  if (o.strategy != Strategy::Hzp && o.strategy != Strategy::Hsdp && (o.param_shard || o.grad_shard || o.optim_shard)) {
    throw core::InputError(
        "command line", "--param-shard",
        fmt::format("expected no group sizes for the {} preset (use --strategy hzp)", to_string(o.strategy)));
  }
  if (o.strategy == Strategy::Hsdp && (o.grad_shard || o.optim_shard)) {
    throw core::InputError("command line", "--grad-shard", "expected only --param-shard (the shard size S) for hsdp");
  }
  auto check = [&](const char* key, int v, int of, const char* what) {
    if (v < 1 || of % v != 0) {
      throw core::InputError("command line", key, fmt::format("expected a divisor of {} ({}), got {}", what, of, v));
    }
  };
  check("--optim-shard", s.optim, dp, "the data-parallel size");
  check("--param-shard", s.param, s.optim, "the optimizer shard group g_o");
  check("--grad-shard", s.grad, s.optim, "the optimizer shard group g_o");
  return s;
}

core::Schedule lower(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o) {
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    throw core::InputError("command line", "--prefetch-depth", fmt::format("expected 0..64, got {}", o.prefetch_depth));
  }
  BatchSplit batch = split_batch(m, topo.devices(), o);
  const ShardSizes sh = resolve_shards(o, batch.data_parallel, topo.spec());
  const bool async = resolve_async(o);
  Layout layout{o.tp, batch.data_parallel, o.pp, o.vpp};
  if (m.heads % o.tp != 0) {
    throw core::InputError(
        "command line", "--tp",
        fmt::format("expected a divisor of the {} attention heads of {}, got {}", m.heads, m.name, o.tp));
  }
  if (o.vpp < 1 || m.layers % (o.pp * o.vpp) != 0) {
    throw core::InputError(
        "command line", o.vpp > 1 ? "--vpp" : "--pp",
        fmt::format("expected pp x vpp to divide the {} layers of {}, got {} x {}", m.layers, m.name, o.pp, o.vpp));
  }
  if (o.vpp > 1 && batch.micro_batches % o.pp != 0) {
    throw core::InputError(
        "command line", "--vpp",
        fmt::format("interleaved pipelining needs micro-batches per rank ({}) to be a multiple of pp ({})",
                    batch.micro_batches, o.pp));
  }
  models::GraphOptions go;
  go.seq_len = batch.seq_len;
  go.micro_batch = o.micro_batch;
  go.recompute = o.recompute;
  go.flash_attention = o.flash_attention;
  go.tp = o.tp;
  go.sequence_parallel = o.sequence_parallel;
  models::StepGraph graph = models::build_step_graph(m, go);

  core::Schedule s;
  s.name = fmt::format("{}/{}x{}/{}", m.name, topo.spec().name, topo.devices(), to_string(o.strategy));
  s.step.model = m.name;
  s.step.cluster = topo.spec().name;
  s.step.strategy = std::string(to_string(o.strategy));
  s.step.world_size = topo.devices();
  s.step.seq_len = batch.seq_len;
  s.step.global_batch_sequences = batch.sequences;
  s.step.micro_batches = batch.micro_batches;
  s.step.model_flops = models::model_flops_per_sequence(m, batch.seq_len) * static_cast<double>(batch.sequences);

  const int dp = batch.data_parallel;
  std::vector<int> tp_groups = add_tp_groups(s, layout);
  std::vector<int> param = add_dp_groups(s, core::GroupKind::DpShard, layout, sh.param, 1);
  std::vector<int> grad = add_dp_groups(s, core::GroupKind::DpGrad, layout, sh.grad, 1);
  std::vector<int> optim = add_dp_groups(s, core::GroupKind::DpOptim, layout, sh.optim, sh.grad);
  std::vector<int> replica = add_dp_groups(s, core::GroupKind::DpReplica, layout, dp, sh.optim);
  std::vector<int> regather = add_dp_groups(s, core::GroupKind::DpRegather, layout, sh.optim, sh.param);

  // Virtual stage c·pp + p holds layers [(c·pp + p)·Lc, (c·pp + p + 1)·Lc); the
  // embedding rides with the first, the head with the last.
  const int per_chunk = m.layers / (o.pp * o.vpp);
  const std::int64_t boundary = core::dtype_bytes(Dtype::Bf16) * batch.seq_len * o.micro_batch * m.hidden /
                                (o.tp > 1 && o.sequence_parallel ? o.tp : 1);
  auto rep = [&](int p) { return rank_of(0, 0, p, o.tp, dp); };
  for (int p = 0; p < o.pp; ++p) {
    std::vector<std::pair<const models::Unit*, int>> units;
    for (const auto& u : graph.units) {
      int chunk = -1;
      if (u.kind == models::UnitKind::Embedding && p == 0) chunk = 0;
      if (u.kind == models::UnitKind::Head && p == o.pp - 1) chunk = o.vpp - 1;
      if (u.kind == models::UnitKind::Layer) {
        int virtual_stage = u.layer / per_chunk;
        if (virtual_stage % o.pp == p) chunk = virtual_stage / o.pp;
      }
      if (chunk >= 0) units.emplace_back(&u, chunk);
    }
    std::sort(units.begin(), units.end(), [](const auto& a, const auto& b) {
      auto order = [](const models::Unit* u) {
        return u->kind == models::UnitKind::Embedding ? -1 : u->kind == models::UnitKind::Head ? INT32_MAX : u->layer;
      };
      return std::pair{a.second, order(a.first)} < std::pair{b.second, order(b.first)};
    });
    Lowering::Stage stage;
    stage.index = p;
    for (int r = rep(p); r < rep(p) + o.tp * dp; ++r) stage.ranks.push_back(r);
    stage.prev_rep = rep((p + o.pp - 1) % o.pp);
    stage.next_rep = rep((p + 1) % o.pp);
    stage.order = pipeline_order(p, o.pp, o.vpp, batch.micro_batches);
    stage.boundary_bytes = boundary;
    const auto at = static_cast<std::size_t>(p);
    GroupIds g{param[at], grad[at], optim[at], replica[at], regather[at], tp_groups[at]};
    Lowering lowering(std::move(units), batch, o, sh, async, g, layout, std::move(stage), topo);
    s.programs.push_back(lowering.run());
  }

  nlohmann::json prov{{"plan",
                       {{"strategy", to_string(o.strategy)},
                        {"param_shard", sh.param},
                        {"grad_shard", sh.grad},
                        {"optim_shard", sh.optim},
                        {"async", async},
                        {"reshard_after_forward", o.reshard_after_forward},
                        {"tp", o.tp},
                        {"sequence_parallel", o.tp > 1 && o.sequence_parallel},
                        {"pp", o.pp},
                        {"vpp", o.vpp},
                        {"seq_len", batch.seq_len},
                        {"global_batch_sequences", batch.sequences},
                        {"micro_batch", o.micro_batch},
                        {"micro_batches", batch.micro_batches},
                        {"data_parallel", batch.data_parallel},
                        {"recompute", recompute_name(o.recompute)},
                        {"flash_attention", o.flash_attention},
                        {"prefetch_depth", o.prefetch_depth},
                        {"grad_dtype", core::to_string(o.grad_dtype)}}},
                      {"model", m.name},
                      {"cluster", topo.spec().name},
                      {"gpus", topo.devices()}};
  s.provenance_json = prov.dump();
  core::check_schedule(s);
  return s;
}

}  // namespace hzp::plan
