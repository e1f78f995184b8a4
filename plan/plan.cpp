// Lowering plans to a Schedule: every data-parallel strategy is one
// hierarchical ZeRO plan (g_p, g_g, g_o), composed with Megatron TP/SP, CP,
// PP (1F1B, interleaved) and EP — generated, never hand-written.
//
// One program per (pipeline stage, rank class); without workload variability
// or context parallelism every data-parallel rank of a stage is one class.
// Slots of a stage run in pipeline order; within a slot its units run forward
// in order or backward in reverse.
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
// Groups are contiguous blocks of the data-parallel index (strided sets
// inside them), and tensor ranks are innermost, so with ranks numbered node by
// node the smallest groups fill scale-up domains first and strided groups run
// along rails.
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
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/schedule_check.hpp"
#include "plan/options.hpp"
#include "plan/program_builder.hpp"

namespace hzp::plan {

using core::Bytes;
using core::CollectiveKind;
using core::ComputeKind;
using core::Dtype;
using core::Flops;
using core::StreamKind;

std::vector<core::Problem> check_batch(const models::ModelSpec& m, int world, const PlanOptions& o,
                                          BatchSplit& b) {
  std::vector<core::Problem> ps;
  b.seq_len = o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
  if (b.seq_len > m.max_seq_len) {
    ps.push_back({"seq_len", fmt::format("expected at most {} (max_seq_len of {}), got {}", m.max_seq_len, m.name,
                                         b.seq_len)});
    return ps;
  }
  if (o.global_batch_tokens && o.global_batch_sequences) {
    ps.push_back({"global_batch_tokens", "expected at most one of global_batch_tokens and global_batch_sequences"});
    return ps;
  }
  if (o.micro_batch < 1 || o.micro_batch > (1 << 24) / b.seq_len) {
    ps.push_back({"micro_batch", fmt::format("expected 1 to {} sequences ({} tokens per micro-batch at most), got {}",
                                             (1 << 24) / b.seq_len, 1 << 24, o.micro_batch)});
  }
  const std::string key = o.global_batch_sequences ? "global_batch_sequences" : "global_batch_tokens";
  if (o.global_batch_sequences) {
    b.sequences = *o.global_batch_sequences;
    if (b.sequences <= 0) ps.push_back({key, "expected a positive number of sequences"});
  } else {
    const std::int64_t tokens = o.global_batch_tokens.value_or(kDefaultGlobalBatchTokens);
    if (tokens <= 0 || tokens % b.seq_len != 0) {
      ps.push_back({key, fmt::format("expected a positive multiple of the sequence length {}, got {}", b.seq_len,
                                     tokens)});
    }
    b.sequences = tokens / b.seq_len;
  }
  if (o.tp < 1 || world % o.tp != 0) {
    ps.push_back({"tp", fmt::format("expected a divisor of the {} GPUs, got {}", world, o.tp)});
  } else if (o.pp < 1 || (world / o.tp) % o.pp != 0) {
    ps.push_back({"pp", fmt::format("expected a divisor of GPUs / tp = {}, got {}", world / o.tp, o.pp)});
  } else if (o.cp < 1 || (world / (o.tp * o.pp)) % o.cp != 0) {
    ps.push_back(
        {"cp", fmt::format("expected a divisor of GPUs / (tp x pp) = {}, got {}", world / (o.tp * o.pp), o.cp)});
  }
  if (!ps.empty()) return ps;
  b.data_parallel = world / (o.tp * o.pp * o.cp);
  const std::int64_t per_step = static_cast<std::int64_t>(b.data_parallel) * o.micro_batch;
  if (b.sequences % per_step != 0) {
    ps.push_back({key, fmt::format("{} sequences do not split over {} data-parallel ranks x micro-batch {}: "
                                   "expected a multiple of {} sequences",
                                   b.sequences, b.data_parallel, o.micro_batch, per_step)});
    return ps;
  }
  b.micro_batches = b.sequences / per_step;
  // Bounds that keep a Schedule's size and every byte count finite: the
  // Schedule holds every micro-batch's ops.
  if (b.micro_batches > kMaxMicroBatches) {
    ps.push_back({key, fmt::format("{} sequences make {} micro-batches per rank; expected at most {} (raise "
                                   "micro_batch)",
                                   b.sequences, b.micro_batches, kMaxMicroBatches)});
  }
  return ps;
}

BatchSplit split_batch(const models::ModelSpec& m, int world, const PlanOptions& o) {
  BatchSplit b;
  std::vector<core::Problem> ps = check_batch(m, world, o, b);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
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
};

struct Layout {
  int tp = 1, dp = 1, pp = 1, vpp = 1, ep = 1;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Adds the groups of one kind over a data-parallel dimension. Within every
// (tensor rank, stage) slice the dimension's index x in [0, count) is the
// data-parallel rank d = offset + mult·x for each offset in [0, mult) (dense
// parameters: mult 1, count DP; expert parameters: mult ep, count DP / ep).
// Blocks of `block` consecutive x are split into block / stride groups of x
// `stride` apart. Returns the group of every rank (-1 for one-rank groups).
std::vector<int> add_dp_groups(core::Schedule& s, core::GroupKind kind, const Layout& l, int mult, int count, int block,
                               int stride) {
  std::vector<int> of(static_cast<std::size_t>(l.tp * l.dp * l.pp), -1);
  if (block / stride <= 1) return of;
  for (int p = 0; p < l.pp; ++p) {
    for (int t = 0; t < l.tp; ++t) {
      for (int o = 0; o < mult; ++o) {
        for (int b = 0; b < count; b += block) {
          for (int off = 0; off < stride; ++off) {
            core::Group g;
            g.id = static_cast<int>(s.groups.size());
            g.kind = kind;
            for (int x = b + off; x < b + block; x += stride) {
              const int r = rank_of(t, o + mult * x, p, l.tp, l.dp);
              g.ranks.push_back(r);
              of[static_cast<std::size_t>(r)] = g.id;
            }
            std::sort(g.ranks.begin(), g.ranks.end());
            s.groups.push_back(std::move(g));
          }
        }
      }
    }
  }
  return of;
}

std::vector<int> add_tp_groups(core::Schedule& s, const Layout& l) {
  std::vector<int> of(static_cast<std::size_t>(l.tp * l.dp * l.pp), -1);
  if (l.tp <= 1) return of;
  for (int p = 0; p < l.pp; ++p) {
    for (int d = 0; d < l.dp; ++d) {
      core::Group g;
      g.id = static_cast<int>(s.groups.size());
      g.kind = core::GroupKind::Tp;
      for (int t = 0; t < l.tp; ++t) {
        g.ranks.push_back(rank_of(t, d, p, l.tp, l.dp));
        of[static_cast<std::size_t>(g.ranks.back())] = g.id;
      }
      s.groups.push_back(std::move(g));
    }
  }
  return of;
}

/// A class of parameters sharded by one hierarchical ZeRO plan: the dense
/// parameters over DP, or the expert parameters over DP / ep.
struct ParamClass {
  std::string tag;  // "" or ".experts": appended to op names
  ShardSizes sh;
  int ranks = 1;  // data-parallel ranks of this class (DP or DP / ep)
  struct Groups {
    int param = -1, grad = -1, optim = -1, replica = -1, regather = -1;
  };
  std::vector<int> param_of, grad_of, optim_of, replica_of, regather_of;  // group of every rank
  [[nodiscard]] Groups groups_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    return {param_of[r], grad_of[r], optim_of[r], replica_of[r], regather_of[r]};
  }
};

class Lowering {
 public:
  struct Stage {
    int program = 0;  // program id
    std::string name;
    int index = 0;           // pipeline stage
    std::vector<int> ranks;  // ascending; ranks.front() is the representative
    Workload workload;
    int prev_rep = -1, next_rep = -1;  // representatives of the neighbouring stages
    std::vector<PipelineSlot> order;
    std::int64_t boundary_bytes = 0;  // activation or gradient each rank sends between stages
    // Tensor parallel without sequence parallelism: each rank sends 1/tp of
    // the activation and the receivers all-gather it over NVLink (Megatron's
    // scatter/gather optimization, Narayanan et al. 2021 §4.1); the gathered
    // bytes, or 0 when nothing is gathered.
    std::int64_t boundary_gather_bytes = 0;
    int tp_group = -1, ep_group = -1;
    int cp = 1;                              // context-parallel size
    int cp_next_rep = -1, cp_prev_rep = -1;  // ring neighbours
    std::int64_t kv_block_bytes = 0;         // K and V of one rank's tokens
  };

  Lowering(std::vector<Unit> units, const BatchSplit& batch, const PlanOptions& opt,
           const std::vector<ParamClass>& classes, bool async, Layout layout, Stage stage,
           const topologies::Topology& topo)
      : batch_(batch),
        opt_(opt),
        async_(async),
        layout_(layout),
        stage_(std::move(stage)),
        topo_(topo),
        b_(stage_.program, stage_.name, stage_.ranks),
        units_(std::move(units)) {
    for (const ParamClass& c : classes) {
      Class k;
      k.tag = c.tag;
      k.sh = c.sh;
      k.ranks = c.ranks;
      k.groups = c.groups_of(stage_.ranks.front());
      // Each unit is flattened and padded to a multiple of g_o.
      const std::int64_t o = c.sh.optim;
      for (const auto& u : units_) {
        std::int64_t weights = c.tag.empty() ? u.u->weight_params : u.u->expert_params;
        std::int64_t owned = c.tag.empty() ? u.u->params : u.u->expert_params;
        k.padded.push_back(ceil_div(weights, o) * o);
        k.owned.push_back(ceil_div(owned, o) * o);
      }
      classes_.push_back(std::move(k));
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
    reduce_deferred();
    step_end();
    return b_.take();
  }

 private:
  struct Class {
    std::string tag;
    ShardSizes sh;
    int ranks = 1;
    ParamClass::Groups groups;
    std::vector<std::int64_t> padded, owned;  // per unit
    bool gathers(std::size_t u) const { return sh.param > 1 && padded[u] > 0; }
    bool reduces(std::size_t u) const { return sh.grad > 1 && padded[u] > 0; }
    bool step_reduction() const { return sh.optim / sh.grad > 1 || ranks / sh.optim > 1; }
  };

  struct Use {
    std::size_t unit;
    std::int64_t mb;
    bool backward;
    bool gathers;  // this use all-gathers parameters (else it has them)
    bool first_of_slot = false, last_of_slot = false;
    int chunk = 0;
  };

  bool any_gathers(std::size_t u) const {
    return std::any_of(classes_.begin(), classes_.end(), [&](const Class& c) { return c.gathers(u); });
  }
  bool any_reduces(std::size_t u) const {
    return std::any_of(classes_.begin(), classes_.end(), [&](const Class& c) { return c.reduces(u); });
  }
  // Gathered buffers come from the pool when async and each is freed before
  // the next use of its slot (reshard after forward); otherwise they are
  // allocated per use.
  bool pooled() const { return async_ && opt_.reshard_after_forward; }
  // Gathered parameters (and full bf16 gradients) of a unit, all classes.
  Bytes gathered_bytes(std::size_t u) const {
    std::int64_t n = 0;
    for (const auto& c : classes_) n += c.gathers(u) ? 2 * c.padded[u] : 0;
    return Bytes(n);
  }
  Bytes full_grad_bytes(std::size_t u) const {
    std::int64_t n = 0;
    for (const auto& c : classes_) n += c.reduces(u) ? 2 * c.padded[u] : 0;
    return Bytes(n);
  }
  std::string buf(const char* what, std::size_t j) const { return fmt::format("{}.{}", what, j); }
  // The first and last virtual pipeline stage hold the embedding and the head.
  bool first_virtual(int chunk) const { return stage_.index == 0 && chunk == 0; }
  bool last_virtual(int chunk) const { return stage_.index == layout_.pp - 1 && chunk == layout_.vpp - 1; }

  void setup() {
    const core::Duration launch = core::Duration::us(topo_.spec().device.launch_latency_us);
    const core::Duration coll = core::Duration::us(topo_.spec().device.collective_launch_latency_us);
    int main = b_.add_thread("main", launch, coll);
    int param_thread = async_ ? b_.add_thread("param", launch, coll) : main;
    int grad_thread = async_ ? b_.add_thread("grad", launch, coll) : main;
    comp_ = b_.add_stream("compute", StreamKind::Compute, main);
    ag_ = b_.add_stream("param_allgather", StreamKind::ParamGather, param_thread);
    rs_ = b_.add_stream("grad_reduce", StreamKind::GradReduce, grad_thread);
    if (opt_.tp_comm_overlap && stage_.tp_group >= 0) tp_comm_ = b_.add_stream("tp_comm", StreamKind::Comm, main);
    if (stage_.cp > 1) {
      // Ring attention: K/V blocks go round on their own send and receive
      // streams, overlapped with the attention chunks on the compute stream.
      cp_send_ = b_.add_stream("cp_send", StreamKind::Comm, main);
      cp_recv_ = b_.add_stream("cp_recv", StreamKind::Comm, main);
    }
    if (layout_.pp > 1) {
      // Sends run on their own streams so that a stage can send and receive at
      // once (Megatron batches isend/irecv); receives sit on the compute stream.
      send_fwd_ = b_.add_stream("pp_send_fwd", StreamKind::Comm, main);
      send_bwd_ = b_.add_stream("pp_send_bwd", StreamKind::Comm, main);
    }

    // Model state, per rank and class: bf16 parameters over g_p, accumulated
    // gradients over g_g, fp32 master weights and Adam moments over g_o.
    std::int64_t params = 0, grads = 0, states = 0;
    for (const auto& c : classes_) {
      std::int64_t owned = 0;
      for (auto o : c.owned) owned += o;
      params += 2 * owned / c.sh.param;
      grads += acc_ * owned / c.sh.grad;
      states += kOptimizerStateBytesPerParam * owned / c.sh.optim;
    }
    b_.alloc(comp_, "params", Bytes(params));
    b_.alloc(comp_, "grads", Bytes(grads));
    b_.alloc(comp_, "optimizer_states", Bytes(states));
    // NCCL's own buffers: every communicator (and point-to-point peer) this
    // rank uses holds kNcclBufferBytes (see plan.hpp).
    std::set<int> comms;
    for (const auto& c : classes_) {
      for (int g : {c.groups.param, c.groups.grad, c.groups.optim, c.groups.replica, c.groups.regather}) {
        if (g >= 0) comms.insert(g);
      }
    }
    for (int g : {stage_.tp_group, stage_.ep_group}) {
      if (g >= 0) comms.insert(g);
    }
    std::int64_t peers = (layout_.pp > 1 ? 2 : 0) + (stage_.cp > 1 ? 2 : 0);
    const std::int64_t communicators = static_cast<std::int64_t>(comms.size()) + peers;
    if (communicators > 0) b_.alloc(comp_, "nccl_buffers", Bytes(communicators * kNcclBufferBytes));
    if (async_) {
      // Pools of prefetch_depth + 1 slots sized for the largest unit: allocated
      // once, so per-use buffers never fragment the heap.
      const auto slots = static_cast<std::int64_t>(opt_.prefetch_depth) + 1;
      Bytes gathered{}, grad{};
      for (std::size_t u = 0; u < units_.size(); ++u) {
        gathered = std::max(gathered, gathered_bytes(u));
        grad = std::max(grad, full_grad_bytes(u));
      }
      if (gathered.count() > 0 && pooled()) b_.alloc(comp_, "pool.gathered", Bytes(slots * gathered.count()));
      if (grad.count() > 0) b_.alloc(comp_, "pool.grad", Bytes(slots * grad.count()));
    }

    for (const PipelineSlot& slot : stage_.order) {
      std::vector<std::size_t> in_chunk;
      for (std::size_t u = 0; u < units_.size(); ++u) {
        if (units_[u].chunk == slot.chunk) in_chunk.push_back(u);
      }
      if (slot.backward) std::reverse(in_chunk.begin(), in_chunk.end());
      for (std::size_t i = 0; i < in_chunk.size(); ++i) {
        std::size_t u = in_chunk[i];
        Use use{u, slot.micro_batch, slot.backward, any_gathers(u) && (!slot.backward || opt_.reshard_after_forward)};
        use.first_of_slot = i == 0;
        use.last_of_slot = i + 1 == in_chunk.size();
        use.chunk = slot.chunk;
        uses_.push_back(use);
      }
    }
    for (std::size_t j = 0; j < uses_.size(); ++j) {
      if (uses_[j].gathers) gather_uses_.push_back(j);
      if (uses_[j].backward && any_reduces(uses_[j].unit)) reduce_uses_.push_back(j);
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
      b_.recv(comp_, fmt::format("recv act mb{} chunk{}", use.mb, use.chunk), from, recv_seq_[from]++,
              Bytes(stage_.boundary_bytes));
      after_receive(fmt::format("act mb{} chunk{}", use.mb, use.chunk));
    } else if (use.backward && !last_virtual(use.chunk)) {
      int from = stage_.next_rep;
      b_.recv(comp_, fmt::format("recv grad mb{} chunk{}", use.mb, use.chunk), from, recv_seq_[from]++,
              Bytes(stage_.boundary_bytes));
      after_receive(fmt::format("grad mb{} chunk{}", use.mb, use.chunk));
    }
  }

  // After a receive: the tp all-gather of a scattered boundary, and with
  // pipeline_p2p_sync the host's wait for it.
  void after_receive(const std::string& name) {
    if (stage_.boundary_gather_bytes > 0) {
      b_.collective(comp_, "gather " + name, CollectiveKind::AllGather, stage_.tp_group,
                    Bytes(stage_.boundary_gather_bytes), Dtype::Bf16);
    }
    if (opt_.pipeline_p2p_sync) {
      const int received = b_.record(comp_, name + " received");
      b_.sync(comp_, received, "host waits " + name);
    }
  }

  void send(std::size_t j) {
    const Use& use = uses_[j];
    if (layout_.pp <= 1) return;
    if (!use.backward && !last_virtual(use.chunk)) {
      int ready = b_.record(comp_, fmt::format("act ready mb{} chunk{}", use.mb, use.chunk));
      b_.wait(send_fwd_, ready, "wait act ready");
      b_.send(send_fwd_, fmt::format("send act mb{} chunk{}", use.mb, use.chunk), stage_.next_rep,
              send_seq_[stage_.next_rep]++, Bytes(stage_.boundary_bytes));
    } else if (use.backward && !first_virtual(use.chunk)) {
      int ready = b_.record(comp_, fmt::format("grad ready mb{} chunk{}", use.mb, use.chunk));
      b_.wait(send_bwd_, ready, "wait grad ready");
      b_.send(send_bwd_, fmt::format("send grad mb{} chunk{}", use.mb, use.chunk), stage_.prev_rep,
              send_seq_[stage_.prev_rep]++, Bytes(stage_.boundary_bytes));
    }
  }

  // The compute ops of a unit's forward or backward, with tensor- and
  // expert-parallel collectives on the compute stream (on the critical path),
  // scaled by this rank class's workload draw for the micro-batch.
  void unit_ops(const std::vector<models::GraphOp>& ops, std::int64_t mb) {
    const Workload& w = stage_.workload;
    const auto i = static_cast<std::size_t>(mb);
    const double compute = w.compute.empty() ? 1.0 : w.compute[i];
    const double attention = w.attention.empty() ? 1.0 : w.attention[i];
    // The op as this rank class runs it in this micro-batch.
    auto scaled = [&](const models::GraphOp& op) {
      const bool expert = op.name.find(".experts.") != std::string::npos;
      double factor = compute;
      const bool attention_core = op.kind == core::ComputeKind::Attention ||
                                  op.name.find("attn_scores") != std::string::npos ||
                                  op.name.find("attn_context") != std::string::npos;
      if (attention_core) factor *= attention;
      if (expert) factor *= w.experts;
      models::GraphOp out = op;
      if (factor == 1.0) return out;
      out.flops = op.flops * factor;
      if (expert && out.gemm) {
        // More (or fewer) rows per expert: the GEMM's m (or k, for the weight gradient).
        auto rows = [&](std::int64_t v) {
          return std::max<std::int64_t>(1, std::llround(static_cast<double>(v) * w.experts));
        };
        if (out.phase == models::Phase::BackwardWeight) {
          out.gemm->k = rows(out.gemm->k);
        } else {
          out.gemm->m = rows(out.gemm->m);
        }
        out.bytes = Bytes(static_cast<std::int64_t>(static_cast<double>(op.bytes.count()) * w.experts));
      }
      return out;
    };
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
        int group = op.comm_group == models::CommGroup::Tp ? stage_.tp_group : stage_.ep_group;
        // all_to_allv: a rank whose experts draw more tokens receives more than it sends.
        core::Bytes bytes =
            op.comm_group == models::CommGroup::Ep && w.experts > 1.0
                ? Bytes(static_cast<std::int64_t>(std::ceil(static_cast<double>(op.bytes.count()) * w.experts)))
                : op.bytes;
        b_.collective(comp_, op.name, *op.collective, group, bytes, Dtype::Bf16);
        continue;
      }
      if (op.kind == core::ComputeKind::Attention && stage_.cp > 1) {
        ring_attention(op, compute * attention);
        continue;
      }
      b_.compute(comp_, scaled(op), Dtype::Bf16);
    }
  }

  // A GEMM cut into kTpOverlapChunks pieces along its first dimension.
  static models::GraphOp chunk_of(const models::GraphOp& op, int k) {
    models::GraphOp c = op;
    c.name = fmt::format("{}.chunk{}", op.name, k);
    c.flops = op.flops * (1.0 / kTpOverlapChunks);
    c.bytes = Bytes(op.bytes.count() / kTpOverlapChunks);
    if (c.gemm) c.gemm->m = std::max<std::int64_t>(1, c.gemm->m / kTpOverlapChunks);
    return c;
  }

  // Tensor-parallel overlap: all-gather chunk k on the tp stream while the
  // GEMM works on chunk k - 1.
  void overlapped_gather_gemm(const models::GraphOp& gather, const models::GraphOp& gemm) {
    int input = b_.record(comp_, gather.name + ".input_ready");
    b_.wait(tp_comm_, input, "wait input");
    std::vector<int> arrived;
    for (int k = 0; k < kTpOverlapChunks; ++k) {
      b_.collective(tp_comm_, fmt::format("{}.chunk{}", gather.name, k), core::CollectiveKind::AllGather,
                    stage_.tp_group, Bytes(gather.bytes.count() / kTpOverlapChunks), Dtype::Bf16);
      arrived.push_back(b_.record(tp_comm_, fmt::format("{}.chunk{}.done", gather.name, k)));
    }
    for (int k = 0; k < kTpOverlapChunks; ++k) {
      b_.wait(comp_, arrived[static_cast<std::size_t>(k)], "wait gathered chunk");
      b_.compute(comp_, chunk_of(gemm, k), Dtype::Bf16);
    }
  }

  // And the mirror: reduce-scatter chunk k while the GEMM computes chunk k + 1.
  void overlapped_gemm_scatter(const models::GraphOp& gemm, const models::GraphOp& scatter) {
    for (int k = 0; k < kTpOverlapChunks; ++k) {
      b_.compute(comp_, chunk_of(gemm, k), Dtype::Bf16);
      int done = b_.record(comp_, fmt::format("{}.chunk{}.done", gemm.name, k));
      b_.wait(tp_comm_, done, "wait gemm chunk");
      b_.collective(tp_comm_, fmt::format("{}.chunk{}", scatter.name, k), core::CollectiveKind::ReduceScatter,
                    stage_.tp_group, Bytes(scatter.bytes.count() / kTpOverlapChunks), Dtype::Bf16);
    }
    int reduced = b_.record(tp_comm_, scatter.name + ".done");
    b_.wait(comp_, reduced, "wait reduce-scatter");
  }

  // Attention of this rank's queries against every rank's keys, in cp chunks:
  // chunk 0 on the local K/V while that block starts round the ring; chunk i
  // once block i has arrived (forwarded on to the next rank as it comes).
  // Backward circulates K/V and their gradients: twice the bytes.
  void ring_attention(const models::GraphOp& op, double factor) {
    const int cp = stage_.cp;
    const bool backward = op.phase == models::Phase::BackwardInput;
    const Bytes block(stage_.kv_block_bytes * (backward ? 2 : 1));
    models::GraphOp chunk = op;
    chunk.flops = op.flops * (factor / cp);
    chunk.bytes = Bytes(op.bytes.count() / cp);
    int ready = b_.record(comp_, op.name + ".kv_ready");
    b_.wait(cp_send_, ready, "wait kv ready");
    b_.send(cp_send_, op.name + ".kv_send1", stage_.cp_next_rep, send_seq_[stage_.cp_next_rep]++, block);
    chunk.name = op.name + ".cp0";
    b_.compute(comp_, chunk, Dtype::Bf16);
    for (int i = 1; i < cp; ++i) {
      b_.recv(cp_recv_, fmt::format("{}.kv_recv{}", op.name, i), stage_.cp_prev_rep, recv_seq_[stage_.cp_prev_rep]++,
              block);
      int arrived = b_.record(cp_recv_, fmt::format("{}.kv{}", op.name, i));
      if (i + 1 < cp) {
        b_.wait(cp_send_, arrived, "wait kv block");
        b_.send(cp_send_, fmt::format("{}.kv_send{}", op.name, i + 1), stage_.cp_next_rep,
                send_seq_[stage_.cp_next_rep]++, block);
      }
      b_.wait(comp_, arrived, fmt::format("wait kv block {}", i));
      chunk.name = fmt::format("{}.cp{}", op.name, i);
      b_.compute(comp_, chunk, Dtype::Bf16);
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
    ensure_regathered(use.unit);
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
    for (const auto& c : classes_) {
      if (!c.gathers(use.unit)) continue;
      b_.collective(ag_, fmt::format("{}{}.allgather.{}", unit.name, c.tag, use.backward ? "bwd" : "fwd"),
                    CollectiveKind::AllGather, c.groups.param, Bytes(2 * c.padded[use.unit]), Dtype::Bf16);
    }
    ag_done_[j] = b_.record(ag_, fmt::format("{}.gathered", unit.name));
    if (!use.backward) forward_gather_[slot(use)] = static_cast<int>(j);
  }

  std::size_t slot(const Use& use) const { return static_cast<std::size_t>(use.mb) * units_.size() + use.unit; }

  // The use whose gathered buffer this use computes with (-1: none).
  int gathered_by(std::size_t j) const {
    const Use& use = uses_[j];
    if (use.gathers) return static_cast<int>(j);
    return any_gathers(use.unit) ? forward_gather_[slot(use)] : -1;
  }

  bool regathers(std::size_t u) const {
    return std::any_of(classes_.begin(), classes_.end(),
                       [&](const Class& c) { return c.owned[u] > 0 && c.sh.optim / c.sh.param > 1; });
  }

  // The all-gather of the last update's 1/g_o shards back to 1/g_p (on the
  // parameter stream, ahead of this unit's own gather when it has one).
  int regather(std::size_t u) {
    const auto& unit = *units_[u].u;
    for (const auto& c : classes_) {
      if (c.owned[u] == 0 || c.sh.optim / c.sh.param <= 1) continue;
      b_.collective(ag_, fmt::format("{}{}.param_allgather.optim", unit.name, c.tag), CollectiveKind::AllGather,
                    c.groups.regather, Bytes(2 * c.owned[u] / c.sh.param), Dtype::Bf16);
    }
    return b_.record(ag_, fmt::format("{}.regathered", unit.name));
  }

  // With --overlap-param-gather: regather each unit once, before its first use.
  void ensure_regathered(std::size_t u) {
    if (!opt_.overlap_param_gather || !regathers(u) || regathered_.contains(u)) return;
    regathered_[u] = regather(u);
  }

  void forward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    ensure_regathered(use.unit);
    if (auto it = regathered_.find(use.unit); it != regathered_.end() && use.mb == 0) {
      b_.wait(comp_, it->second, fmt::format("wait {}.regathered", unit.name));
    }
    if (use.gathers) b_.wait(comp_, ag_done_[j], fmt::format("wait {}.gathered", unit.name));
    b_.alloc(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);
    unit_ops(unit.forward, use.mb);
    use_done_[j] = b_.record(comp_, fmt::format("{}.fwd_done", unit.name));
    if (use.gathers && opt_.reshard_after_forward && !pooled()) {
      b_.free(comp_, buf("gathered", j), gathered_bytes(use.unit));
    }
  }

  void backward(std::size_t j) {
    const Use& use = uses_[j];
    const auto& unit = *units_[use.unit].u;
    const bool last_mb = use.mb + 1 == batch_.micro_batches;
    const int gathered = gathered_by(j);
    if (gathered >= 0) {
      b_.wait(comp_, ag_done_[static_cast<std::size_t>(gathered)], fmt::format("wait {}.gathered", unit.name));
    }
    const bool reduces = any_reduces(use.unit);
    if (reduces) {
      // The full-gradient buffer: a pool slot (free once the reduce-scatter
      // that used it depth + 1 reducing uses ago is done) or a fresh allocation.
      std::size_t k = reduce_index_++;
      const std::size_t depth = static_cast<std::size_t>(opt_.prefetch_depth);
      if (async_) {
        if (k >= depth + 1) b_.wait(comp_, rs_done_[reduce_uses_[k - depth - 1]], "wait grad slot");
      } else {
        b_.alloc(comp_, buf("grad", j), full_grad_bytes(use.unit));
      }
    }
    const std::string recomputed = fmt::format("recomputed.u{}.mb{}", use.unit, use.mb);
    if (unit.recomputed.count() > 0) b_.alloc(comp_, recomputed, unit.recomputed);
    unit_ops(unit.backward, use.mb);
    if (unit.recomputed.count() > 0) b_.free(comp_, recomputed, unit.recomputed);
    use_done_[j] = b_.record(comp_, fmt::format("{}.bwd_done", unit.name));
    if (gathered >= 0 && !pooled()) {
      b_.free(comp_, buf("gathered", static_cast<std::size_t>(gathered)), gathered_bytes(use.unit));
    }
    b_.free(comp_, fmt::format("act.u{}.mb{}", use.unit, use.mb), unit.activations);

    bool waited = false;
    if (reduces) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
      waited = true;
      for (const auto& c : classes_) {
        if (!c.reduces(use.unit)) continue;
        b_.collective(rs_, fmt::format("{}{}.grad_reducescatter", unit.name, c.tag), CollectiveKind::ReduceScatter,
                      c.groups.grad, Bytes(2 * c.padded[use.unit]), Dtype::Bf16);
        const std::int64_t shard = c.padded[use.unit] / c.sh.grad;
        b_.compute(rs_, fmt::format("{}{}.grad_accumulate", unit.name, c.tag), ComputeKind::Elementwise,
                   Flops(static_cast<double>(shard)), Bytes((2 + 2 * acc_) * shard), opt_.grad_dtype);
      }
      rs_done_[j] = b_.record(rs_, fmt::format("{}.grad_reduced", unit.name));
      if (!async_) b_.free(rs_, buf("grad", j), full_grad_bytes(use.unit));
    }
    if (!last_mb) return;
    if (opt_.overlap_grad_reduce) {
      reduce_for_optimizer(use.unit, j, waited);
    } else {
      deferred_.push_back(use.unit);
      last_backward_ = j;
    }
  }

  // overlap_grad_reduce off: every unit's final reduction, in backward order,
  // once the stage's last backward is done.
  void reduce_deferred() {
    if (deferred_.empty()) return;
    b_.wait(rs_, use_done_[last_backward_], "wait backward_done");
    for (const std::size_t u : deferred_) reduce_for_optimizer(u, last_backward_, true);
  }

  // Once the unit's gradients are final: 1/g_g -> 1/g_o, then across replicas.
  // `waited`: the reduce stream already waits for use j.
  void reduce_for_optimizer(std::size_t u, std::size_t j, bool waited) {
    const auto& unit = *units_[u].u;
    bool any = false;
    for (const auto& c : classes_) {
      if (c.owned[u] == 0) continue;
      if (c.step_reduction() && !waited) {
        b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
        waited = true;
      }
      if (c.sh.optim / c.sh.grad > 1) {
        b_.collective(rs_, fmt::format("{}{}.grad_reducescatter.optim", unit.name, c.tag),
                      CollectiveKind::ReduceScatter, c.groups.optim, Bytes(acc_ * c.padded[u] / c.sh.grad),
                      opt_.grad_dtype);
      }
      if (c.ranks / c.sh.optim > 1) {
        b_.collective(rs_, fmt::format("{}{}.grad_allreduce", unit.name, c.tag), CollectiveKind::AllReduce,
                      c.groups.replica, Bytes(acc_ * c.padded[u] / c.sh.optim), opt_.grad_dtype);
      }
      any = true;
    }
    if (any) reduced_.emplace_back(u, waited ? b_.record(rs_, fmt::format("{}.grads_final", unit.name)) : -1);
  }

  void step_end() {
    // Adam per unit on the compute stream as each unit's reduction lands
    // (units arrive in backward order), then the regather of its parameters.
    std::int64_t grads = 0;
    for (auto [u, ev] : reduced_) {
      const auto& unit = *units_[u].u;
      if (ev >= 0) b_.wait(comp_, ev, fmt::format("wait {}.grads_final", unit.name));
      bool regather = false;
      for (const auto& c : classes_) {
        if (c.owned[u] == 0) continue;
        const std::int64_t shard = c.owned[u] / c.sh.optim;
        b_.compute(comp_, fmt::format("{}{}.adam", unit.name, c.tag), ComputeKind::Optimizer,
                   Flops(12.0 * static_cast<double>(shard)), Bytes(kAdamBytesPerParam * shard), Dtype::Fp32);
        regather = regather || c.sh.optim / c.sh.param > 1;
      }
      if (regather && !opt_.overlap_param_gather) {
        int done = b_.record(comp_, fmt::format("{}.updated", unit.name));
        b_.wait(ag_, done, fmt::format("wait {}.updated", unit.name));
        for (const auto& c : classes_) {
          if (c.owned[u] == 0 || c.sh.optim / c.sh.param <= 1) continue;
          b_.collective(ag_, fmt::format("{}{}.param_allgather.optim", unit.name, c.tag), CollectiveKind::AllGather,
                        c.groups.regather, Bytes(2 * c.owned[u] / c.sh.param), Dtype::Bf16);
        }
      }
    }
    for (const auto& c : classes_) {
      for (auto o : c.owned) grads += acc_ * o / c.sh.grad;
    }
    b_.compute(comp_, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(grads), opt_.grad_dtype);
  }

  const BatchSplit& batch_;
  const PlanOptions& opt_;
  bool async_;
  Layout layout_;
  Stage stage_;
  const topologies::Topology& topo_;
  ProgramBuilder b_;
  std::vector<Unit> units_;
  std::vector<Class> classes_;
  std::int64_t acc_ = 4;
  int comp_ = 0, ag_ = 0, rs_ = 0, send_fwd_ = -1, send_bwd_ = -1, cp_send_ = -1, cp_recv_ = -1, tp_comm_ = -1;
  std::vector<Use> uses_;
  std::vector<std::size_t> gather_uses_, reduce_uses_;
  std::vector<int> ag_done_, use_done_, rs_done_, forward_gather_;
  std::size_t next_gather_ = 0, reduce_index_ = 0;
  std::vector<std::pair<std::size_t, int>> reduced_;
  std::vector<std::size_t> deferred_;  // units whose final reduction waits for the whole backward
  std::size_t last_backward_ = 0;
  std::map<int, int> send_seq_, recv_seq_;
  std::map<std::size_t, int> regathered_;  // unit -> event, with --overlap-param-gather
};

}  // namespace

namespace {

// splitmix64: a seeded, portable stream of 64-bit values (std:: distributions
// differ between standard libraries; these transforms do not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  double normal() {  // Box–Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
  }
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return Rng{a ^ (b * 0x9e3779b97f4a7c15ULL)}.next(); }

}  // namespace

Workload draw_workload(const PlanOptions& o, std::int64_t seq_len, std::int64_t micro_batches, int variability_class,
                       int stage, int expert_rank, int ep, int experts) {
  Workload w;
  const auto m = static_cast<std::size_t>(micro_batches);
  w.attention.assign(m, 1.0);
  w.compute.assign(m, 1.0);
  const auto vc = static_cast<std::uint64_t>(variability_class);
  for (std::size_t mb = 0; mb < m; ++mb) {
    if (o.doc_mean_tokens > 0) {
      // Documents packed into the sequence; the last one is cut at the end.
      // Data belongs to the data-parallel rank: the same on every stage.
      Rng rng{mix(mix(o.seed, vc), mb)};
      const double s = static_cast<double>(seq_len);
      double filled = 0, squares = 0;
      while (filled < s) {
        double len = std::min(std::max(1.0, std::round(rng.exponential(o.doc_mean_tokens))), s - filled);
        filled += len;
        squares += len * len;
      }
      w.attention[mb] = squares / (s * s);
    }
    if (o.compute_jitter > 0) {
      Rng rng{mix(mix(mix(o.seed ^ 0x6a177e5ULL, vc), static_cast<std::uint64_t>(stage)), mb)};
      w.compute[mb] = std::max(0.5, 1.0 + o.compute_jitter * rng.normal());
    }
  }
  if (o.moe_skew > 0 && ep > 1 && experts > 0) {
    // Zipf loads over experts; rank e holds experts [e·E/ep, (e+1)·E/ep).
    double total = 0, mine = 0;
    const int per_rank = experts / ep;
    for (int j = 0; j < experts; ++j) {
      const double load = 1.0 / std::pow(j + 1.0, o.moe_skew);
      total += load;
      if (j / per_rank == expert_rank) mine += load;
    }
    w.experts = mine / total * ep;
  }
  return w;
}

std::string_view to_string(models::Recompute r) {
  switch (r) {
    case models::Recompute::None: return "none";
    case models::Recompute::Selective: return "selective";
    case models::Recompute::Full: return "full";
  }
  return "?";
}

std::optional<models::Recompute> parse_recompute(std::string_view s) {
  for (auto r : {models::Recompute::None, models::Recompute::Selective, models::Recompute::Full}) {
    if (s == to_string(r)) return r;
  }
  return std::nullopt;
}

std::optional<core::Dtype> parse_grad_dtype(std::string_view s) {
  for (auto d : {core::Dtype::Fp32, core::Dtype::Bf16}) {
    if (s == core::to_string(d)) return d;
  }
  return std::nullopt;
}

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

std::optional<Strategy> parse_strategy(std::string_view s) {
  if (s == "zero3") return Strategy::Fsdp;
  for (Strategy x : all_strategies()) {
    if (s == to_string(x)) return x;
  }
  return std::nullopt;
}

std::vector<Strategy> all_strategies() {
  return {Strategy::Ddp,  Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp,
          Strategy::Hsdp, Strategy::Hpz,   Strategy::Hzp};
}

bool resolve_async(const PlanOptions& o) { return o.async.value_or(o.strategy == Strategy::Hzp); }

std::vector<core::Problem> check_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c,
                                          ShardSizes& s) {
  const int node = std::min(c.devices_per_node, dp);
  const int domain = std::min(c.scale_up.domain_devices, dp);
  switch (o.strategy) {
    case Strategy::Ddp: s = {1, 1, 1}; break;
    case Strategy::Zero1: s = {1, 1, dp}; break;
    case Strategy::Zero2: s = {1, dp, dp}; break;
    case Strategy::Fsdp: s = {dp, dp, dp}; break;
    case Strategy::Hsdp: {
      const int S = o.param_shard > 0 ? o.param_shard : node;
      s = {S, S, S};
      break;
    }
    case Strategy::Hpz: s = {node, dp, dp}; break;
    case Strategy::Hzp:
      s = {o.param_shard > 0 ? o.param_shard : domain, o.grad_shard > 0 ? o.grad_shard : node,
           o.optim_shard > 0 ? o.optim_shard : dp};
      break;
  }
  std::vector<core::Problem> ps;
  if (o.strategy != Strategy::Hzp && o.strategy != Strategy::Hsdp && (o.param_shard || o.grad_shard || o.optim_shard)) {
    ps.push_back({o.param_shard ? "param_shard" : o.grad_shard ? "grad_shard" : "optim_shard",
                  fmt::format("expected no group sizes for the {} preset (use strategy hzp)", to_string(o.strategy))});
    return ps;
  }
  if (o.strategy == Strategy::Hsdp && (o.grad_shard || o.optim_shard)) {
    ps.push_back({o.grad_shard ? "grad_shard" : "optim_shard",
                  "expected only param_shard (the shard size S) for hsdp"});
    return ps;
  }
  auto check = [&](const char* key, int v, int of, const char* what) {
    if (v < 1 || of % v != 0) ps.push_back({key, fmt::format("expected a divisor of {} ({}), got {}", what, of, v)});
  };
  check("optim_shard", s.optim, dp, "the data-parallel size");
  if (ps.empty()) {
    check("param_shard", s.param, s.optim, "the optimizer shard group g_o");
    check("grad_shard", s.grad, s.optim, "the optimizer shard group g_o");
  }
  return ps;
}

namespace {

// The checks of a plan that need the model, once the batch split is known.
void model_problems(const models::ModelSpec& m, const PlanOptions& o, const BatchSplit& batch,
                    std::vector<core::Problem>& ps) {
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    ps.push_back({"prefetch_depth", fmt::format("expected 0..64, got {}", o.prefetch_depth)});
  }
  if (o.cp > 1 && (!o.flash_attention || batch.seq_len % (2 * o.cp) != 0)) {
    ps.push_back({"cp", fmt::format("context parallelism needs flash attention and a sequence length divisible by "
                                    "2 x cp = {}",
                                    2 * o.cp)});
  }
  if (o.ep < 1 || batch.data_parallel % o.ep != 0) {
    ps.push_back({"ep", fmt::format("expected a divisor of the data-parallel size {}, got {}", batch.data_parallel,
                                    o.ep)});
  } else if (o.ep > 1 && (!m.moe || m.moe->experts % o.ep != 0)) {
    ps.push_back({"ep", m.moe ? fmt::format("expected a divisor of the {} experts of {}, got {}", m.moe->experts,
                                            m.name, o.ep)
                              : fmt::format("{} has no experts: expected ep 1", m.name)});
  }
  if (o.variability_classes < 1 || batch.data_parallel % o.variability_classes != 0) {
    ps.push_back({"variability_classes", fmt::format("expected a divisor of the data-parallel size {}, got {}",
                                                     batch.data_parallel, o.variability_classes)});
  }
  if (!(o.doc_mean_tokens >= 0)) ps.push_back({"doc_mean_tokens", "expected a number >= 0"});
  if (!(o.compute_jitter >= 0 && o.compute_jitter <= 1)) ps.push_back({"compute_jitter", "expected a number in [0, 1]"});
  if (!(o.moe_skew >= 0 && o.moe_skew <= 10)) ps.push_back({"moe_skew", "expected a number in [0, 10]"});
  if (m.heads % o.tp != 0) {
    ps.push_back(
        {"tp", fmt::format("expected a divisor of the {} attention heads of {}, got {}", m.heads, m.name, o.tp)});
  }
  if (o.vpp < 1 || m.layers % (o.pp * o.vpp) != 0) {
    ps.push_back({o.vpp > 1 ? "vpp" : "pp", fmt::format("expected pp x vpp to divide the {} layers of {}, got {} x {}",
                                                        m.layers, m.name, o.pp, o.vpp)});
  } else if (o.vpp > 1 && batch.micro_batches % o.pp != 0) {
    ps.push_back({"vpp", fmt::format("interleaved pipelining needs micro-batches per rank ({}) to be a multiple of "
                                     "pp ({})",
                                     batch.micro_batches, o.pp)});
  }
}

// Expert parameters: already split ep ways; the same plan over the DP / ep
// expert-data-parallel ranks (group sizes capped there unless given).
void expert_problems(const models::ModelSpec& m, const PlanOptions& o, int shard_ranks, const ShardSizes& sh,
                     std::optional<ShardSizes>& expert, std::vector<core::Problem>& ps) {
  if (!m.moe || o.ep < 1 || shard_ranks % o.ep != 0) return;
  const int edp = shard_ranks / o.ep;
  const ShardSizes e =
      o.expert_shards.value_or(ShardSizes{std::min(sh.param, edp), std::min(sh.grad, edp), std::min(sh.optim, edp)});
  if (e.param < 1 || e.grad < 1 || e.optim < 1 || edp % e.optim != 0 || e.optim % e.param != 0 ||
      e.optim % e.grad != 0) {
    ps.push_back({o.expert_shards ? "expert_shards" : "ep",
                  fmt::format("expert group sizes ({}, {}, {}) do not nest in the {} expert-data-parallel ranks",
                              e.param, e.grad, e.optim, edp)});
    return;
  }
  expert = e;
}

}  // namespace

ShardSizes resolve_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c) {
  ShardSizes s;
  std::vector<core::Problem> ps = check_shards(o, dp, c, s);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
  return s;
}

std::vector<core::Problem> check_plan(const models::ModelSpec& m, const topologies::Topology& topo,
                                      const PlanOptions& o, ResolvedPlan* resolved) {
  ResolvedPlan r;
  std::vector<core::Problem> ps = check_batch(m, topo.devices(), o, r.batch);
  if (!ps.empty()) return ps;
  // Parameters are replicated over data- and context-parallel ranks alike: the
  // sharding dimension is DP x CP (Megatron's data-parallel-with-context group).
  r.shard_ranks = r.batch.data_parallel * o.cp;
  ps = check_shards(o, r.shard_ranks, topo.spec(), r.shards);
  model_problems(m, o, r.batch, ps);
  if (!ps.empty()) return ps;
  std::optional<ShardSizes> expert;
  expert_problems(m, o, r.shard_ranks, r.shards, expert, ps);
  if (!ps.empty()) return ps;
  if (resolved) {
    r.options = o;
    r.options.param_shard = r.shards.param;
    r.options.grad_shard = r.shards.grad;
    r.options.optim_shard = r.shards.optim;
    r.options.expert_shards = expert;
    r.options.async = resolve_async(o);
    r.options.sequence_parallel = o.tp > 1 && o.sequence_parallel;
    r.options.seq_len = r.batch.seq_len;
    r.options.global_batch_tokens.reset();
    r.options.global_batch_sequences = r.batch.sequences;
    *resolved = std::move(r);
  }
  return ps;
}

ResolvedPlan resolve_plan(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o) {
  ResolvedPlan r;
  std::vector<core::Problem> ps = check_plan(m, topo, o, &r);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
  return r;
}

std::string ResolvedPlan::provenance_json() const {
  nlohmann::json plan = nlohmann::json::parse(plan_options_json(options).dump());
  plan["micro_batches"] = batch.micro_batches;
  plan["data_parallel"] = batch.data_parallel;
  plan["shard_ranks"] = shard_ranks;
  return plan.dump();
}

core::Schedule lower(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o, bool check) {
  return lower_plan(m, topo, o, check).schedule;
}

LoweredPlan lower_plan(const models::ModelSpec& m, const topologies::Topology& topo, const PlanOptions& o,
                       bool check) {
  LoweredPlan out;
  out.plan = resolve_plan(m, topo, o);
  const ResolvedPlan& rp = out.plan;
  const BatchSplit& batch = rp.batch;
  const int shard_ranks = rp.shard_ranks;
  const ShardSizes sh = rp.shards;
  const bool async = *rp.options.async;
  Layout layout{o.tp, shard_ranks, o.pp, o.vpp, o.ep};
  models::GraphOptions go;
  go.seq_len = batch.seq_len;
  go.micro_batch = o.micro_batch;
  go.recompute = o.recompute;
  go.flash_attention = o.flash_attention;
  go.fused_loss = o.fused_loss;
  go.tp = o.tp;
  go.sequence_parallel = o.sequence_parallel;
  go.ep = o.ep;
  go.cp = o.cp;
  models::StepGraph graph = models::build_step_graph(m, go);

  core::Schedule& s = out.schedule;
  s.name = fmt::format("{}/{}x{}/{}", m.name, topo.spec().name, topo.devices(), to_string(o.strategy));
  s.step.model = m.name;
  s.step.cluster = topo.spec().name;
  s.step.strategy = std::string(to_string(o.strategy));
  s.step.world_size = topo.devices();
  s.step.seq_len = batch.seq_len;
  s.step.global_batch_sequences = batch.sequences;
  s.step.micro_batches = batch.micro_batches;
  s.step.model_flops = models::model_flops_per_sequence(m, batch.seq_len) * static_cast<double>(batch.sequences);

  const int dp = shard_ranks;  // the data-parallel index d' = c + cp·d runs over DP x CP
  std::vector<int> tp_groups = add_tp_groups(s, layout);
  // Dense parameters: the (g_p, g_g, g_o) plan over DP.
  std::vector<ParamClass> classes;
  auto add_class = [&](const std::string& tag, ShardSizes shards, int mult, int count, bool expert) {
    using K = core::GroupKind;
    ParamClass c;
    c.tag = tag;
    c.sh = shards;
    c.ranks = count;
    auto param = add_dp_groups(s, expert ? K::Edp : K::DpShard, layout, mult, count, shards.param, 1);
    auto grad = add_dp_groups(s, expert ? K::EdpGrad : K::DpGrad, layout, mult, count, shards.grad, 1);
    auto optim = add_dp_groups(s, expert ? K::EdpOptim : K::DpOptim, layout, mult, count, shards.optim, shards.grad);
    auto replica = add_dp_groups(s, expert ? K::EdpReplica : K::DpReplica, layout, mult, count, count, shards.optim);
    auto regather =
        add_dp_groups(s, expert ? K::EdpRegather : K::DpRegather, layout, mult, count, shards.optim, shards.param);
    c.param_of = std::move(param);
    c.grad_of = std::move(grad);
    c.optim_of = std::move(optim);
    c.replica_of = std::move(replica);
    c.regather_of = std::move(regather);
    classes.push_back(std::move(c));
  };
  add_class("", sh, 1, dp, false);
  // Expert parameters: already split ep ways; the same plan over the DP / ep
  // expert-data-parallel ranks (group sizes capped at DP / ep).
  std::vector<int> ep_groups(static_cast<std::size_t>(topo.devices()), -1);
  if (m.moe) {
    const int edp = dp / o.ep;
    const ShardSizes expert_sh = *rp.options.expert_shards;
    if (o.ep > 1) ep_groups = add_dp_groups(s, core::GroupKind::Ep, layout, 1, dp, o.ep, 1);
    add_class(".experts", expert_sh, o.ep, edp, true);
  }

  // Virtual stage c·pp + p holds layers [(c·pp + p)·Lc, (c·pp + p + 1)·Lc); the
  // embedding rides with the first, the head with the last.
  const int per_chunk = m.layers / (o.pp * o.vpp);
  // With sequence parallelism the boundary is already split over tp; without
  // it, each rank sends its 1/tp slice and the receivers all-gather.
  const std::int64_t activation = core::dtype_bytes(Dtype::Bf16) * batch.seq_len / o.cp * o.micro_batch * m.hidden;
  const std::int64_t boundary = activation / o.tp;
  const std::int64_t boundary_gather = o.tp > 1 && !o.sequence_parallel ? activation : 0;
  // Rank classes: ranks that run identical programs. Without variability, one
  // per stage; with it, contiguous blocks of data-parallel ranks and, under a
  // routing skew, each expert-parallel rank index apart.
  // Context-parallel ranks exchange K/V blocks with each other, so each cp
  // index is its own class too.
  const bool skewed = m.moe && o.ep > 1 && o.moe_skew > 0;
  const int blocks = o.variability_classes;
  const int per_block = dp / blocks;
  std::map<std::tuple<int, int, int>, int> class_ids;
  auto class_key = [&](int d) { return std::tuple{d % o.cp, skewed ? d % o.ep : 0, d / per_block}; };
  for (int d = 0; d < dp; ++d) class_ids.emplace(class_key(d), 0);
  {
    int next = 0;
    for (auto& [key, id] : class_ids) id = next++;
  }
  auto class_of = [&](int d) { return class_ids.at(class_key(d)); };
  const int class_count = static_cast<int>(class_ids.size());
  int program_id = 0;
  for (int p = 0; p < o.pp; ++p) {
    std::vector<Unit> units;
    for (const auto& u : graph.units) {
      int chunk = -1;
      if (u.kind == models::UnitKind::Embedding && p == 0) chunk = 0;
      if (u.kind == models::UnitKind::Head && p == o.pp - 1) chunk = o.vpp - 1;
      if (u.kind == models::UnitKind::Layer) {
        int virtual_stage = u.layer / per_chunk;
        if (virtual_stage % o.pp == p) chunk = virtual_stage / o.pp;
      }
      if (chunk >= 0) units.push_back(Unit{&u, chunk});
    }
    std::sort(units.begin(), units.end(), [](const auto& a, const auto& b) {
      auto order = [](const models::Unit* u) {
        return u->kind == models::UnitKind::Embedding ? -1 : u->kind == models::UnitKind::Head ? INT32_MAX : u->layer;
      };
      return std::pair{a.chunk, order(a.u)} < std::pair{b.chunk, order(b.u)};
    });
    for (int c = 0; c < class_count; ++c) {
      Lowering::Stage stage;
      stage.program = program_id++;
      stage.index = p;
      int first_d = -1;
      for (int d = 0; d < dp; ++d) {
        if (class_of(d) != c) continue;
        if (first_d < 0) first_d = d;
        for (int t = 0; t < o.tp; ++t) stage.ranks.push_back(rank_of(t, d, p, o.tp, dp));
      }
      std::sort(stage.ranks.begin(), stage.ranks.end());
      std::string name = o.pp > 1 ? fmt::format("stage{}", p) : "dp";
      if (class_count > 1) name += fmt::format(".class{}", c);
      stage.name = name;
      // The neighbouring stages' members with the same data-parallel rank.
      stage.prev_rep = rank_of(0, first_d, (p + o.pp - 1) % o.pp, o.tp, dp);
      stage.next_rep = rank_of(0, first_d, (p + 1) % o.pp, o.tp, dp);
      stage.order = pipeline_order(p, o.pp, o.vpp, batch.micro_batches);
      stage.boundary_bytes = boundary;
      stage.boundary_gather_bytes = boundary_gather;
      const auto rep = static_cast<std::size_t>(stage.ranks.front());
      stage.tp_group = tp_groups[rep];
      stage.ep_group = ep_groups[rep];
      stage.workload = draw_workload(o, batch.seq_len, batch.micro_batches, first_d / per_block, p,
                                     skewed ? first_d % o.ep : 0, o.ep, m.moe ? m.moe->experts : 0);
      if (o.cp > 1) {
        // Ring neighbours: the classes of the next and previous context-parallel index.
        const int base = first_d - first_d % o.cp;
        stage.cp_next_rep = rank_of(0, base + (first_d + 1) % o.cp, p, o.tp, dp);
        stage.cp_prev_rep = rank_of(0, base + (first_d + o.cp - 1) % o.cp, p, o.tp, dp);
        stage.cp = o.cp;
        // K and V of this rank's tokens, per K/V head on this tensor-parallel rank.
        const std::int64_t kv_heads = std::max<std::int64_t>(1, (m.mla ? m.heads : m.kv_heads) / o.tp);
        stage.kv_block_bytes = core::dtype_bytes(Dtype::Bf16) * batch.seq_len / o.cp * o.micro_batch * kv_heads *
                               (m.qk_head_dim() + m.v_head_dim());
      }
      Lowering lowering(units, batch, o, classes, async, layout, std::move(stage), topo);
      s.programs.push_back(lowering.run());
    }
  }

  nlohmann::json prov{{"plan", nlohmann::json::parse(rp.provenance_json())},
                      {"model", m.name},
                      {"cluster", topo.spec().name},
                      {"gpus", topo.devices()}};
  s.provenance_json = prov.dump();
  if (check) core::check_schedule(s);
  return out;
}

bool is_sharding_op(const core::Schedule& s, const core::Op& op) {
  switch (op.kind) {
    case core::OpKind::Collective: {
      const core::GroupKind g = s.groups.at(static_cast<std::size_t>(op.group)).kind;
      return g != core::GroupKind::Tp && g != core::GroupKind::Pp && g != core::GroupKind::Cp &&
             g != core::GroupKind::Ep;
    }
    case core::OpKind::Compute:
      return op.compute == ComputeKind::Optimizer ||
             (op.compute == ComputeKind::Elementwise &&
              (op.name == "zero_grads" || op.name.ends_with(".grad_accumulate")));
    default: return false;
  }
}

}  // namespace hzp::plan
