// Internal to plan/: the pieces of plan lowering shared by its files — the
// rank layout and its groups (layout.cpp), the workload scaling of an op
// (workload.cpp) and the Lowering of one program (lower*.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "models/model_spec.hpp"
#include "models/step_graph.hpp"
#include "plan/plan.hpp"
#include "plan/program_builder.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan::detail {

/// A unit of the step graph and the model chunk (virtual stage) it runs in.
struct Unit {
  const models::Unit* u;
  int chunk;
};

struct Layout {
  int tp = 1, dp = 1, pp = 1, vpp = 1, ep = 1;
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// A class of parameters sharded by one hierarchical ZeRO plan: the dense
/// parameters over DP, or the expert parameters over DP / ep.
struct ShardedParams {
  core::ParamClass cls = core::ParamClass::Dense;
  std::string tag;  // "" or ".experts": appended to op names, for people
  ShardSizes sh;
  int ranks = 1;  // data-parallel ranks of this class (DP or DP / ep)
  struct Groups {
    int param = -1, grad = -1, optim = -1, replica = -1, regather = -1, all = -1;
  };
  std::vector<int> param_of, grad_of, optim_of, replica_of, regather_of;  // group of every rank
  std::vector<int> all_of;  // every data-parallel rank of the class (only for a stack that all-reduces over it)
  [[nodiscard]] Groups groups_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    return {param_of[r], grad_of[r], optim_of[r], replica_of[r], regather_of[r], all_of.empty() ? -1 : all_of[r]};
  }
};

// layout.cpp

/// Adds the groups of one kind over a data-parallel dimension. Within every
/// (tensor rank, stage) slice the dimension's index x in [0, count) is the
/// data-parallel rank d = offset + mult·x for each offset in [0, mult) (dense
/// parameters: mult 1, count DP; expert parameters: mult ep, count DP / ep).
/// Blocks of `block` consecutive x are split into block / stride groups of x
/// `stride` apart. Returns the group of every rank (-1 for one-rank groups).
std::vector<int> add_dp_groups(core::Schedule& s, core::GroupKind kind, const Layout& l, int mult, int count, int block,
                               int stride);
/// The tensor-parallel groups (of `kind`: tp, or etp over an expert
/// layout); the group of every rank (-1 without tp).
std::vector<int> add_tp_groups(core::Schedule& s, const Layout& l, core::GroupKind kind = core::GroupKind::Tp);
/// The layout experts see: MoE parallel folding re-splits each stage's
/// tp x DP ranks (consecutive, rank = i + tp·DP·p) into etp expert-tensor
/// ranks innermost and tp·DP / etp expert-side data-parallel indices, over
/// which the ep groups and the expert parameters' plan run; etp = tp is the
/// dense layout itself.
inline Layout expert_layout(const Layout& l, int etp) { return Layout{etp, l.tp * l.dp / etp, l.pp, l.vpp, l.ep}; }
/// The five groups of one parameter class's (g_p, g_g, g_o) plan over `count`
/// data-parallel indices `mult` apart (expert: the edp kinds).
ShardedParams add_param_class(core::Schedule& s, const Layout& l, core::ParamClass cls, ShardSizes shards, int mult,
                              int count, bool all_group = false);
/// The units of pipeline stage `p` with their chunks (layers as `layout`
/// places them), in chunk order, each chunk from the embedding to the head.
std::vector<Unit> stage_units(const models::StepGraph& graph, int p, const PipelineLayout& layout);

/// Rank classes: ranks that run identical programs. Without variability, one
/// per stage; with it, contiguous blocks of data-parallel ranks and, under a
/// routing skew, each expert-parallel rank index apart. Context-parallel ranks
/// exchange K/V blocks with each other, so each cp index is its own class too.
class RankClasses {
 public:
  RankClasses(int dp, int cp, int ep, bool skewed, int blocks);
  [[nodiscard]] int of(int d) const;
  [[nodiscard]] int count() const { return static_cast<int>(ids_.size()); }
  [[nodiscard]] int per_block() const { return per_block_; }

 private:
  [[nodiscard]] std::tuple<int, int, int> key(int d) const;
  int cp_, ep_, per_block_;
  bool skewed_;
  std::map<std::tuple<int, int, int>, int> ids_;
};

// workload.cpp

/// Φ⁻¹(p), the standard normal quantile, and Φ⁻¹(1 − q) from the upper tail q
/// (accurate where 1 − q rounds to 1).
double normal_quantile(double p);
double normal_upper_quantile(double q);
/// E of the k-th smallest (k = 1..classes) of `classes` independent maxima of
/// n draws of a variable given as points: x ascending, cdf[i] = P(X ≤ x[i])
/// ascending to 1 (each point weighs its step of the CDF).
std::vector<double> expected_order_statistics(const std::vector<double>& x, const std::vector<double>& cdf, double n,
                                              int classes);

/// The op as a rank class runs it in one micro-batch: FLOPs scaled by the
/// compute jitter `compute`, the attention core also by `attention` (Σ lenᵢ² /
/// seq²), expert kernels also by the class's expert load `experts` (their
/// GEMMs grow by rows, and their bytes with them).
models::GraphOp scale_op(const models::GraphOp& op, double compute, double attention, double experts);

// lower*.cpp

/// Lowers one program: a (pipeline stage, rank class).
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
    int tp_group = -1, ep_group = -1, etp_group = -1, ulysses_group = -1;
    int cp = 1;                              // context-parallel size
    int cp_next_rep = -1, cp_prev_rep = -1;  // ring neighbours
    std::int64_t kv_block_bytes = 0;         // K and V of one rank's tokens
    bool v_shape = false;                    // ZB-V: chunk 1 runs from the last stage back to the first
    bool dual = false;                       // DualPipe: chunk 1 is the mirror stage's copy, run upwards
    int mirror_group = -1;                   // DualPipe: this rank and the one holding the other copies
    /// Chunk 1 runs up the stages (ZB-V, DualPipe): sends and receives go both ways.
    [[nodiscard]] bool two_way() const { return v_shape || dual; }
  };

  Lowering(std::vector<Unit> units, const BatchSplit& batch, const PlanOptions& opt,
           const std::vector<ShardedParams>& classes, bool async, Layout layout, Stage stage,
           const topologies::Topology& topo);

  core::Program run();

 private:
  struct Class {
    core::ParamClass cls = core::ParamClass::Dense;
    std::string tag;
    ShardSizes sh;
    int ranks = 1;
    ShardedParams::Groups groups;
    std::vector<std::int64_t> padded, owned;  // per unit
    bool host = false;                        // offload_params: the 1/g_p shard lives in host memory
    // Whether a use of unit u must bring its parameters in: over g_p, or from the host.
    bool gathers(std::size_t u) const { return (sh.param > 1 || host) && padded[u] > 0; }
    bool collects(std::size_t u) const { return sh.param > 1 && padded[u] > 0; }  // with an all-gather
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
    BackwardPart part = BackwardPart::Whole;  // a backward's B or W under a zero-bubble schedule
  };

  // lower.cpp: the walk over the stage's uses.
  void setup();
  void add_streams();
  void alloc_nccl_buffers();
  void plan_uses();
  void forward(std::size_t j);
  void backward(std::size_t j);
  std::string buf(const char* what, std::size_t j) const;

  // lower_pipeline.cpp: the boundaries between virtual stages.
  bool first_virtual(int chunk) const;
  bool last_virtual(int chunk) const;
  int upstream(int chunk) const;
  int downstream(int chunk) const;
  bool turns(const Use& use, bool sending) const;
  int next_seq(std::map<int, int>& seqs, int peer, bool grad);
  void receive(std::size_t j);
  void after_receive(const std::string& name);
  void send(std::size_t j);
  // lower_pipeline.cpp: a backward split into B and W (zero-bubble schedules).
  bool split_backward() const;
  std::pair<core::Bytes, core::Bytes> weight_held(std::size_t u) const;
  void alloc_activations(std::size_t j);
  void alloc_working(std::size_t j);
  void free_working(std::size_t j);
  void backward_input(std::size_t j);
  void backward_weight(std::size_t j);

  // lower_model_parallel.cpp: a unit's kernels with their TP, EP and CP communication.
  void unit_ops(const std::vector<models::GraphOp>& ops, std::int64_t mb);
  [[nodiscard]] models::GraphOp chunk_of(const models::GraphOp& op, int k) const;
  void overlapped_gather_gemm(const models::GraphOp& gather, const models::GraphOp& gemm);
  void overlapped_gemm_scatter(const models::GraphOp& gemm, const models::GraphOp& scatter);
  void ring_attention(const models::GraphOp& op, double factor);

  // lower_zero.cpp: the data-parallel sharding of parameters, gradients and optimizer states.
  bool any_gathers(std::size_t u) const;
  bool any_reduces(std::size_t u) const;
  bool pools() const;
  bool pooled() const;
  core::Bytes gathered_bytes(std::size_t u) const;
  core::Bytes full_grad_bytes(std::size_t u) const;
  void alloc_model_state();
  void alloc_pools();
  void prefetch_through(std::size_t j);
  void issue_gather(std::size_t g, std::size_t j);
  std::vector<std::int64_t> pieces(const Class& c, std::size_t u, stacks::Granularity g) const;
  void gather_pieces(const Class& c, std::size_t u, const std::string& name, int group, std::int64_t elements);
  void after_gather(std::size_t j);
  void reduce_pieces(const Class& c, std::size_t u, const std::string& name);
  std::size_t prefetch_depth() const;  // computed once into depth_
  std::size_t slot(const Use& use) const;
  int gathered_by(std::size_t j) const;
  bool regathers(std::size_t u) const;
  int regather(std::size_t u);
  void regather_collectives(std::size_t u);
  void ensure_regathered(std::size_t u);
  void take_grad_buffer(std::size_t j);
  bool reduce_gradients(std::size_t j);
  void reduce_deferred();
  void reduce_for_optimizer(std::size_t u, std::size_t j, bool waited);
  void step_end();
  void optimizer_step(std::size_t u, int ev);
  void broadcast_updated();

  // lower_offload.cpp: optimizer states, parameters and activations in host memory.
  void add_offload_streams(int thread);
  std::int64_t host_state_bytes() const;
  std::int64_t host_param_bytes() const;
  void fetch_params(std::size_t j);
  bool updated_on_host(const Class& c) const;
  core::Bytes updated_bytes(std::size_t u) const;
  void alloc_updated(std::size_t u, int stream);
  void params_to_host(std::size_t u, int stream);
  int host_optimizer_step(std::size_t u, int ev);
  bool offloads(std::size_t j) const;
  void offload_activations(std::size_t j);
  void fetch_activations(std::size_t j);
  void issue_fetch(std::size_t j, int after);
  void release_activations(std::size_t j);

  const BatchSplit& batch_;
  const PlanOptions& opt_;
  bool async_;
  Layout layout_;
  Stage stage_;
  const topologies::Topology& topo_;
  const stacks::StackSpec& stack_;
  ProgramBuilder b_;
  std::vector<Unit> units_;
  std::vector<Class> classes_;
  std::int64_t acc_ = 4;
  std::size_t depth_ = 1;  // the prefetch depth the stack allows (prefetch_depth())
  int comp_ = 0, ag_ = 0, rs_ = 0, send_fwd_ = -1, send_bwd_ = -1, cp_send_ = -1, cp_recv_ = -1, tp_comm_ = -1;
  int send_fwd_v_ = -1, send_bwd_v_ = -1;  // ZB-V, DualPipe: chunk 1's sends, which run the other way
  std::vector<Use> uses_;
  std::vector<std::size_t> gather_uses_, reduce_uses_;
  std::vector<int> ag_done_, use_done_, rs_done_, forward_gather_;
  // Per unit, its first forward and its last backward (or W) use: where a
  // regathered unit is waited for and where its gradients become final.
  std::vector<std::size_t> first_forward_, last_backward_of_;
  std::size_t next_gather_ = 0, reduce_index_ = 0;
  std::vector<std::pair<std::size_t, int>> reduced_;
  std::vector<std::size_t> deferred_;  // units whose final reduction waits for the whole backward
  std::size_t last_backward_ = 0;
  std::map<int, int> send_seq_, recv_seq_;
  std::map<std::size_t, int> regathered_;  // unit -> event, with --overlap-param-gather
  // Offload: device -> host and host -> device copy streams, the CPU's optimizer steps.
  int d2h_ = -1, h2d_ = -1, cpu_ = -1;
  int uploaded_ = -1;  // the last updated-parameter upload's event
  std::map<std::pair<std::size_t, std::int64_t>, int> act_on_host_, act_fetched_;  // (unit, mb) -> event
  std::int64_t host_act_ = 0, host_act_peak_ = 0;  // offloaded activations held on the host
};

}  // namespace hzp::plan::detail
