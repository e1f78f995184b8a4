// Internal to plan/: the lowering of one program (a pipeline stage's rank
// class) as a walk over the stage's uses and four passes that each own their
// streams and state and meet only through the program builder:
//  - ZeroSharding (lower_zero.cpp): parameter all-gathers, gradient
//    reductions, the optimizer step, model-state and pool memory;
//  - PipelineBoundaries (lower_pipeline.cpp): transfers between virtual stages;
//  - ModelParallel (lower_model_parallel.cpp): a unit's kernels with their
//    TP, EP and CP communication;
//  - HostOffload (lower_offload.cpp): optimizer states, parameters and
//    activations in host memory.
// StageLowering (lower_stage.cpp) walks the uses and calls each pass where
// its work belongs; lower.cpp builds one StageLowering per program.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/step_graph.hpp"
#include "plan/lowering.hpp"
#include "plan/plan.hpp"
#include "plan/program_builder.hpp"
#include "schedule/schedule.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan::detail {

/// The program's stage: a (pipeline stage, rank class) with its ranks,
/// neighbours, groups and workload.
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
  bool op_names = true;                    // LowerOptions::names
  /// Chunk 1 runs up the stages (ZB-V, DualPipe): sends and receives go both ways.
  [[nodiscard]] bool two_way() const { return v_shape || dual; }
};

/// One run of a unit in the walk: its forward or backward (or, under a
/// zero-bubble schedule, its B or W) in one micro-batch.
struct Use {
  std::size_t unit;
  std::int64_t mb;
  bool backward;
  bool gathers;  // this use all-gathers parameters (else it has them)
  bool first_of_slot = false, last_of_slot = false;
  int chunk = 0;
  BackwardPart part = BackwardPart::Whole;  // a backward's B or W under a zero-bubble schedule
};

/// What every pass of one program reads, and the builder they all write to:
/// the inputs, the uses in walk order (fixed before any pass emits for them)
/// and the event each use records when its kernels are done.
struct StageContext {
  StageContext(std::vector<Unit> units, const BatchSplit& batch, const PlanOptions& opt, bool async, Layout layout,
               Stage stage, const Inputs& in);

  const BatchSplit& batch;
  const PlanOptions& opt;
  const stacks::StackSpec& stack;
  const topologies::Topology& topo;
  const bool async;
  const Layout layout;
  const Stage stage;
  const std::vector<Unit> units;
  ProgramBuilder b;
  int comp = 0;               // the compute stream
  std::vector<Use> uses;      // the walk's order
  std::vector<int> use_done;  // per use, its kernels' end on the compute stream (-1: not yet)

  [[nodiscard]] const models::Unit& unit(std::size_t u) const { return *units[u].u; }
  /// A backward split into B and W (zero-bubble schedules).
  [[nodiscard]] bool split_backward() const { return traits(opt.pipeline_schedule).split_backward; }
};

/// One parameter class as this program's ranks hold it: the plan's shard
/// sizes, this rank's groups and, per unit, its padded and owned elements.
struct RankParams {
  core::ParamClass cls = core::ParamClass::Dense;
  std::string tag;
  ShardSizes sh;
  int ranks = 1;
  ShardedParams::Groups groups;
  std::vector<std::int64_t> padded, owned;  // per unit
  bool host = false;                        // offload_params: the 1/g_p shard lives in host memory
  // Whether a use of unit u must bring its parameters in: over g_p, or from the host.
  [[nodiscard]] bool gathers(std::size_t u) const { return (sh.param > 1 || host) && padded[u] > 0; }
  [[nodiscard]] bool collects(std::size_t u) const { return sh.param > 1 && padded[u] > 0; }  // with an all-gather
  [[nodiscard]] bool reduces(std::size_t u) const { return sh.grad > 1 && padded[u] > 0; }
  [[nodiscard]] bool step_reduction() const { return sh.optim / sh.grad > 1 || ranks / sh.optim > 1; }
};

/// The classes of a stage as its representative rank holds them.
std::vector<RankParams> rank_params(const StageContext& c, const std::vector<ShardedParams>& classes);

/// Optimizer states, parameters and activations in host memory (lower_offload.cpp).
class HostOffload {
 public:
  HostOffload(StageContext& c, const std::vector<RankParams>& classes);
  void add_streams(int thread);
  /// Pinned host memory a rank holds: offloaded optimizer states, parameters
  /// and the peak of offloaded activations.
  [[nodiscard]] std::int64_t host_bytes() const;

  // Parameters (ZeRO-Infinity) and the optimizer (ZeRO-Offload).
  void fetch_params(std::size_t j, int param_stream);
  void alloc_updated(std::size_t u, int stream);
  void params_to_host(std::size_t u, int stream);
  int host_optimizer_step(std::size_t u, int ev);
  [[nodiscard]] int upload_stream() const { return h2d_; }
  [[nodiscard]] int uploaded() const { return uploaded_; }  // the last update's upload (-1: none)

  // Activations.
  void offload_activations(std::size_t j);
  void fetch_activations(std::size_t j);
  void release_activations(std::size_t j);

 private:
  [[nodiscard]] std::int64_t host_state_bytes() const;
  [[nodiscard]] std::int64_t host_param_bytes() const;
  [[nodiscard]] bool updated_on_host(const RankParams& p) const;
  [[nodiscard]] core::Bytes updated_bytes(std::size_t u) const;
  [[nodiscard]] bool offloads(std::size_t j) const;
  void issue_fetch(std::size_t j, int after);

  StageContext& c_;
  const std::vector<RankParams>& classes_;
  const std::int64_t acc_;  // bytes of an accumulated gradient
  int d2h_ = -1, h2d_ = -1, cpu_ = -1;
  int uploaded_ = -1;
  std::map<std::pair<std::size_t, std::int64_t>, int> act_on_host_, act_fetched_;  // (unit, mb) -> event
  std::int64_t host_act_ = 0, host_act_peak_ = 0;  // offloaded activations held on the host
};

/// The data-parallel sharding of a hierarchical ZeRO plan (lower_zero.cpp).
class ZeroSharding {
 public:
  ZeroSharding(StageContext& c, const std::vector<RankParams>& classes, HostOffload& offload);
  void add_streams(int param_thread, int grad_thread);
  /// The communicators of the parameter classes' groups.
  void add_communicators(std::set<int>& comms) const;
  void alloc_model_state();
  void alloc_pools();
  [[nodiscard]] bool any_gathers(std::size_t u) const;
  [[nodiscard]] bool any_reduces(std::size_t u) const;
  /// Once the walk's uses are fixed: which gather and which reduce.
  void index_uses();

  /// All-gathers of the next prefetch_depth gathering uses after use j.
  void prefetch_through(std::size_t j);
  /// Before a forward: the unit's regather (--overlap-param-gather).
  void before_forward(std::size_t j);
  /// The compute stream waits for use j's gathered parameters; the use
  /// whose buffer it computes with (-1: none).
  int wait_gathered(std::size_t j);
  /// After the kernels: the gathered buffer of use `gathered` is freed.
  void release_gathered(int gathered);
  /// Before a backward (or W) that reduces gradients: its gradient buffer.
  void take_grad_buffer(std::size_t j);
  /// After a backward's (or W's) weight gradients: their reduction, and for
  /// the unit's last one the step's reduction for the optimizer.
  void gradients_done(std::size_t j);
  /// The reductions deferred to the end of the backward, the optimizer and the gradients' zeroing.
  void step_end();

 private:
  [[nodiscard]] bool pools() const;
  [[nodiscard]] bool pooled() const;
  [[nodiscard]] core::Bytes gathered_bytes(std::size_t u) const;
  [[nodiscard]] core::Bytes full_grad_bytes(std::size_t u) const;
  [[nodiscard]] std::size_t prefetch_depth() const;
  [[nodiscard]] std::string buf(const char* what, std::size_t j) const;
  void issue_gather(std::size_t g, std::size_t j);
  [[nodiscard]] std::vector<std::int64_t> pieces(const RankParams& p, std::size_t u, stacks::Granularity g) const;
  void gather_pieces(const RankParams& p, std::size_t u, const std::string& name, int group, std::int64_t elements);
  void after_gather(std::size_t j);
  void reduce_pieces(const RankParams& p, std::size_t u, const std::string& name);
  [[nodiscard]] std::size_t slot(const Use& use) const;
  [[nodiscard]] int gathered_by(std::size_t j) const;
  [[nodiscard]] bool regathers(std::size_t u) const;
  void regather_collectives(std::size_t u);
  void ensure_regathered(std::size_t u);
  bool reduce_gradients(std::size_t j);
  void reduce_deferred();
  void reduce_for_optimizer(std::size_t u, std::size_t j, bool waited);
  void optimizer_step(std::size_t u, int ev);
  void broadcast_updated();

  StageContext& c_;
  const std::vector<RankParams>& classes_;
  HostOffload& offload_;
  const std::int64_t acc_;   // bytes of an accumulated gradient
  const std::size_t depth_;  // the prefetch depth the stack allows
  int ag_ = 0, rs_ = 0;      // the parameter and gradient streams
  std::vector<std::size_t> gather_uses_, reduce_uses_;
  std::vector<int> ag_done_, rs_done_, forward_gather_;
  // Per unit, its first forward and its last backward (or W) use: where a
  // regathered unit is waited for and where its gradients become final.
  std::vector<std::size_t> first_forward_, last_backward_of_;
  std::size_t next_gather_ = 0, reduce_index_ = 0;
  std::vector<std::pair<std::size_t, int>> reduced_;
  std::vector<std::size_t> deferred_;  // units whose final reduction waits for the whole backward
  std::size_t last_backward_ = 0;
  std::map<std::size_t, int> regathered_;  // unit -> event, with --overlap-param-gather
};

/// The transfers between virtual pipeline stages (lower_pipeline.cpp).
class PipelineBoundaries {
 public:
  explicit PipelineBoundaries(StageContext& c) : c_(c) {}
  void add_streams(int thread);
  /// Before a slot's first unit: the activation (forward) or its gradient (B).
  void receive(std::size_t j);
  /// After a slot's last unit: the activation or the input gradient onwards.
  void send(std::size_t j);

 private:
  [[nodiscard]] bool first_virtual(int chunk) const;
  [[nodiscard]] bool last_virtual(int chunk) const;
  [[nodiscard]] int upstream(int chunk) const;
  [[nodiscard]] int downstream(int chunk) const;
  [[nodiscard]] bool turns(const Use& use, bool sending) const;
  int next_seq(std::map<int, int>& seqs, int peer, bool grad);
  void after_receive(const std::string& name);

  StageContext& c_;
  int send_fwd_ = -1, send_bwd_ = -1;
  int send_fwd_v_ = -1, send_bwd_v_ = -1;  // ZB-V, DualPipe: chunk 1's sends, which run the other way
  std::map<int, int> send_seq_, recv_seq_;
};

/// A unit's kernels with their tensor-, expert- and context-parallel
/// communication (lower_model_parallel.cpp).
class ModelParallel {
 public:
  explicit ModelParallel(StageContext& c) : c_(c) {}
  void add_streams(int thread);
  /// The kernels of `ops` in micro-batch `mb`, as this rank class runs them.
  void unit_ops(const std::vector<models::GraphOp>& ops, std::int64_t mb);

 private:
  [[nodiscard]] int steps(stacks::TpOverlapCut cut) const;
  [[nodiscard]] models::GraphOp chunk_of(const models::GraphOp& op, int k, int n) const;
  void piece(const std::string& name, const models::GraphOp& collective, bool ring, int n);
  void overlapped_gather_gemm(const models::GraphOp& gather, const models::GraphOp& gemm);
  void overlapped_gemm_scatter(const models::GraphOp& gemm, const models::GraphOp& scatter,
                               const models::GraphOp* beside = nullptr);
  void bulk_backward(const models::GraphOp& dgrad, const models::GraphOp& wgrad, const models::GraphOp& scatter);
  void ring_attention(const models::GraphOp& op, double factor);

  StageContext& c_;
  int tp_comm_ = -1, cp_send_ = -1, cp_recv_ = -1;
  int kv_sent_ = 0, kv_received_ = 0;  // ring transfers to the next and from the previous cp rank
};

/// Lowers one program: walks the stage's uses in slot order and calls each
/// pass where its work belongs (lower_stage.cpp).
class StageLowering {
 public:
  StageLowering(std::vector<Unit> units, const BatchSplit& batch, const PlanOptions& opt,
                const std::vector<ShardedParams>& classes, bool async, Layout layout, Stage stage, const Inputs& in);
  StageLowering(const StageLowering&) = delete;
  StageLowering& operator=(const StageLowering&) = delete;

  core::Program run();

 private:
  void add_streams();
  void alloc_nccl_buffers();
  void plan_uses();
  /// About how many ops the walk puts on the compute stream: each use's
  /// kernels and the few allocations and events around them.
  [[nodiscard]] std::size_t compute_ops_estimate() const;
  void forward(std::size_t j);
  void backward(std::size_t j);
  // A backward split into B and W (zero-bubble schedules).
  [[nodiscard]] std::pair<core::Bytes, core::Bytes> weight_held(std::size_t u) const;
  void backward_input(std::size_t j);
  void backward_weight(std::size_t j);
  void alloc_activations(std::size_t j);
  void alloc_working(std::size_t j);
  void free_working(std::size_t j);

  StageContext c_;
  const std::vector<RankParams> classes_;
  HostOffload offload_;
  ZeroSharding zero_;
  PipelineBoundaries pipeline_;
  ModelParallel model_parallel_;
};

}  // namespace hzp::plan::detail
