// The Schedule IR: one training step per rank class, per stream, in the order a
// CUDA program would enqueue it. Every engine (analytic, SimGrid) and the
// runtime consume exactly this; see docs/ARCHITECTURE.md, "The Schedule".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/stack_kernels.hpp"
#include "core/units.hpp"

namespace hzp::core {

/// 6: a host thread states what it spends on an event call, an allocator
/// call and the return from a blocking wait (5 issued those for nothing).
/// 5: ZeRO++'s quantized collectives carry their integer element types
/// (int8, int4; 4 labelled them fp8) and an attention op's kernel is one of
/// kAttentionKernels. An older Schedule is refused with one line saying to
/// lower it again.
inline constexpr int kScheduleSchemaVersion = 6;
/// The most ranks a Schedule may have (a million).
inline constexpr int kMaxWorldSize = 1 << 20;

/// Element types. Int8 and Int4 are the quantized values of ZeRO++'s weight
/// all-gathers and gradient reduce-scatters; int4 values travel packed, two a
/// byte (a collective's `bytes` says what it moves).
enum class Dtype { Bf16, Fp16, Fp32, Fp8, Int8, Int4 };
[[nodiscard]] int dtype_bits(Dtype d);
/// Bytes an element of a whole-byte type; throws std::logic_error for Int4.
[[nodiscard]] std::int64_t dtype_bytes(Dtype d);

/// Data-parallel sharding uses five kinds: dp_shard (parameter all-gather over
/// g_p ranks), dp_grad (gradient reduce-scatter over g_g), dp_optim (1/g_g to
/// 1/g_o reduce-scatter over the ranks holding the same 1/g_g shard),
/// dp_replica (all-reduce across the DP/g_o optimizer replicas) and
/// dp_regather (1/g_o back to 1/g_p all-gather); a stack that all-reduces
/// the gradients over the whole data-parallel dimension at once uses a sixth,
/// dp_all (every data-parallel rank of a tensor rank and stage).
/// Expert parameters use the same over the expert-data-parallel ranks:
/// edp (g_p), edp_grad, edp_optim, edp_replica, edp_regather, edp_all; ep is
/// the expert-parallel all-to-all group.
enum class GroupKind {
  World,
  DpShard,
  DpReplica,
  Tp,
  Pp,
  Cp,
  Ep,
  Edp,
  DpGrad,
  DpOptim,
  DpRegather,
  EdpGrad,
  EdpOptim,
  EdpReplica,
  EdpRegather,
  DpAll,
  EdpAll,
  Etp,      // expert tensor parallelism when it differs from tp (MoE parallel folding)
  Ulysses,  // DeepSpeed-Ulysses sequence parallelism: the all-to-alls around attention
  PpMirror  // DualPipe: a stage and its mirror stage, which hold copies of each other's layers
};
/// How many group kinds there are (tables indexed by kind).
inline constexpr std::size_t kGroupKinds = static_cast<std::size_t>(GroupKind::PpMirror) + 1;

/// A process group: the ranks of one NCCL communicator.
struct Group {
  int id = 0;
  GroupKind kind = GroupKind::World;
  std::vector<int> ranks;  // global ranks, ascending
};

enum class OpKind { Compute, Collective, Send, Recv, Alloc, Free, Record, Wait, Sync };
/// HostCopy: a copy over the device's host link (PCIe or C2C), `bytes` one
/// way, costed at the cluster's node.host.link_GBps (offload). HostOptimizer:
/// the optimizer step run by the host CPU (ZeRO-Offload's CPU Adam), `bytes`
/// of host memory traffic, costed at the device's share of the node's
/// node.host.memory_GBps. Neither uses the device's SMs.
enum class ComputeKind { Gemm, Attention, Elementwise, Norm, Embedding, Loss, Optimizer, HostCopy, HostOptimizer };
enum class CollectiveKind { AllGather, ReduceScatter, AllReduce, AllToAll, Broadcast };

/// What an op is for in the training step. Consumers decide by the role, the
/// parameter class and the buffer class, never by op or buffer names (those
/// are for people: traces, reports). Schema 2.
enum class OpRole {
  Forward,         // a kernel of the forward pass
  Backward,        // a kernel of the backward pass (input or weight gradients)
  Recompute,       // a forward kernel run again during backward (activation recomputation)
  ModelParallel,   // tensor-, expert- or context-parallel communication inside a unit
  Pipeline,        // activations and gradients between pipeline stages (send, recv, the
                   // tensor-parallel all-gather of a scattered boundary)
  ParamGather,     // all-gather of sharded parameters: 1/g_p before use, 1/g_o -> 1/g_p after the update
  GradReduce,      // data-parallel gradient reduce-scatter (1/g_g, then 1/g_o) and replica all-reduce
  GradAccumulate,  // adds a reduce-scattered gradient into the accumulated 1/g_g shard
  Optimizer,       // the optimizer step (Adam) on the 1/g_o shard
  ZeroGrads,       // clears the accumulated gradients for the next step
  Other            // alloc, free, record, wait, sync, and anything not above
};

/// Which parameters an op belongs to. Expert: the routed experts' kernels and
/// all-to-alls (their cost follows the rank class's expert load) and the
/// sharding ops of the expert parameters; Dense: every other kernel and
/// model-parallel collective of the model and the sharding ops of the dense
/// parameters; None: ops of no one class (pipeline and context-parallel
/// transfers, memory and event ops, zeroing all gradients).
enum class ParamClass { None, Dense, Expert };

/// What an alloc or free holds: the memory categories step metrics report.
enum class BufferClass {
  Params,           // the bf16 parameters (1/g_p), for the whole step
  Grads,            // the accumulated gradients (1/g_g)
  OptimizerStates,  // fp32 master weights and Adam moments (1/g_o)
  NcclBuffers,      // NCCL's own buffers, per communicator and peer
  GatheredPool,     // async: the pool of gathered-parameter slots
  GradBucketPool,   // async: the pool of gradient-bucket slots
  Gathered,         // one use's gathered parameters (sync: caching allocator)
  GradBucket,       // one backward's full bf16 gradients before their reduce-scatter
  Activations,      // what a unit's forward keeps for its backward
  Recomputed        // what recomputation brings back during a unit's backward
};

/// C[m×n] = A[m×k]·B[k×n], `batch` independent products.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

// The payloads of the op kinds (Op says which kind carries which). They live
// outside Op so that their default member initialisers are complete where
// Op's variant needs them default-constructible.
struct ComputePayload {
  ComputeKind kind = ComputeKind::Elementwise;
  Flops flops{};
  Bytes bytes{};
  Dtype dtype = Dtype::Bf16;
  std::optional<GemmShape> gemm;
  /// The kernels the op launches (a stack's eager norm is several); each
  /// costs its thread one launch latency to issue.
  int kernels = 1;
  /// Attention only: the fused kernel's family, whose efficiency the device
  /// profile gives; none: the device's generic attention efficiency.
  std::optional<AttentionKernel> attention_kernel;
};
struct CollectivePayload {
  CollectiveKind kind = CollectiveKind::AllReduce;
  int group = -1;
  int seq = -1;
  Bytes bytes{};
  Dtype dtype = Dtype::Bf16;
};
struct TransferPayload {
  int peer = -1;
  int seq = -1;
  Bytes bytes{};
};
struct BufferPayload {
  std::string name;
  BufferClass buffer_class = BufferClass::Activations;
  Bytes bytes{};
};
struct EventPayload {
  int id = -1;
};

/// One operation on a stream: what every op has (id, kind, name, role,
/// parameter class) and the payload of its kind, one of five:
///  - Compute (OpKind::Compute): the kernel kind, flops (what the hardware
///    executes), bytes (HBM traffic), dtype, gemm shape, kernels launched.
///  - Collective: the collective, group, seq, bytes, dtype. `bytes` is the
///    per-rank buffer size in nccl-tests' convention: all-gather = receive
///    buffer, reduce-scatter = send buffer, all-reduce = the buffer,
///    all-to-all = the larger of what the rank sends and receives
///    (all_to_allv: may differ between members; the collective lasts as long
///    as the largest share).
///  - Transfer (Send, Recv): peer (global rank of the other side), seq (per
///    ordered pair), bytes.
///  - Buffer (Alloc, Free): name (unique among live buffers of the program),
///    what it holds, bytes. A free's class is its alloc's.
///  - Event (Record, Wait, Sync): its id, unique within the program and
///    recorded exactly once. A wait holds back its stream
///    (cudaStreamWaitEvent). A sync blocks the issuing host thread until the
///    event has happened on the device (cudaEventSynchronize); nothing after
///    it on that thread is issued earlier. It sits on a stream of its thread
///    and takes no device time.
/// The payload always matches the kind (payload_index; the checker says so
/// of a Schedule built by hand); an accessor asked for another kind's payload
/// throws std::bad_variant_access. `name` is for people only.
struct Op {
  using Compute = ComputePayload;
  using Collective = CollectivePayload;
  using Transfer = TransferPayload;
  using Buffer = BufferPayload;
  using Event = EventPayload;
  using Payload = std::variant<Compute, Collective, Transfer, Buffer, Event>;

  int id = 0;  // unique within the program; ascending in host issue order
  OpKind kind = OpKind::Compute;
  std::string name;
  OpRole role = OpRole::Other;
  ParamClass param_class = ParamClass::None;
  Payload payload;

  Op() = default;
  /// Every member given, the payload `p` constructed in place (how the
  /// program builder puts an op straight into its stream).
  template <class P>
  Op(int i, OpKind k, std::string n, OpRole r, ParamClass c, P&& p)
      : id(i),
        kind(k),
        name(std::move(n)),
        role(r),
        param_class(c),
        payload(std::in_place_type<std::decay_t<P>>, std::forward<P>(p)) {}

  /// An op of `kind` with its kind's default payload.
  [[nodiscard]] static Op of(OpKind kind);
  /// The payload alternative `kind` carries.
  [[nodiscard]] static constexpr std::size_t payload_index(OpKind kind) {
    switch (kind) {
      case OpKind::Compute: return 0;
      case OpKind::Collective: return 1;
      case OpKind::Send:
      case OpKind::Recv: return 2;
      case OpKind::Alloc:
      case OpKind::Free: return 3;
      case OpKind::Record:
      case OpKind::Wait:
      case OpKind::Sync: return 4;
    }
    return 0;
  }

  [[nodiscard]] Compute& compute() { return std::get<Compute>(payload); }
  [[nodiscard]] const Compute& compute() const { return std::get<Compute>(payload); }
  [[nodiscard]] Collective& collective() { return std::get<Collective>(payload); }
  [[nodiscard]] const Collective& collective() const { return std::get<Collective>(payload); }
  [[nodiscard]] Transfer& transfer() { return std::get<Transfer>(payload); }
  [[nodiscard]] const Transfer& transfer() const { return std::get<Transfer>(payload); }
  [[nodiscard]] Buffer& buffer() { return std::get<Buffer>(payload); }
  [[nodiscard]] const Buffer& buffer() const { return std::get<Buffer>(payload); }
  [[nodiscard]] Event& event() { return std::get<Event>(payload); }
  [[nodiscard]] const Event& event() const { return std::get<Event>(payload); }
};

/// What an op moves or holds, whatever its kind: a kernel's HBM traffic, a
/// collective's or transfer's buffer, an allocation's size; an event op, 0.
[[nodiscard]] inline Bytes op_bytes(const Op& op) {
  return std::visit(
      [](const auto& p) {
        if constexpr (requires { p.bytes; }) {
          return p.bytes;
        } else {
          return Bytes{};
        }
      },
      op.payload);
}

/// Work that uses none of the device's SMs (copy engines, the host CPU):
/// collectives do not slow it down.
[[nodiscard]] constexpr bool is_offload(ComputeKind k) {
  return k == ComputeKind::HostCopy || k == ComputeKind::HostOptimizer;
}

/// Offload: the copies to and from host memory and the host CPU's optimizer step.
enum class StreamKind { Compute, ParamGather, GradReduce, Optimizer, Comm, Offload };

/// An in-order queue of device work (a CUDA stream), fed by one host thread.
struct Stream {
  int id = 0;
  std::string name;
  StreamKind kind = StreamKind::Compute;
  int thread = 0;  // the host thread that issues this stream's ops
  std::vector<Op> ops;
};

/// A host thread. It issues the ops of its streams in ascending op id, each
/// after the one before has cost the thread its issue time (issue_latency):
/// a kernel `launch_latency`; a collective, send or receive
/// `collective_launch_latency`; recording an event or making a stream wait
/// on one `event_latency`; an allocation or a free from the caching
/// allocator `alloc_latency`; a blocking wait (Sync) `sync_latency` from the
/// moment its event happens until the thread issues again. An op starts on
/// the device no earlier than it is issued.
struct Thread {
  int id = 0;
  std::string name;
  Duration launch_latency{};
  Duration collective_launch_latency{};
  Duration event_latency{};
  Duration alloc_latency{};
  Duration sync_latency{};
};

/// Ops that occupy a device and so have a duration in a Timeline: compute,
/// collectives, sends and receives. A step spans them (StepSpan).
[[nodiscard]] constexpr bool is_timed(OpKind k) {
  return k == OpKind::Compute || k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv;
}

/// The host time `thread` spends issuing `op` — the one rule the engines and
/// the runtime's backends share (see Thread). A Sync's time runs from the
/// moment its event happens: the engines hold the thread until then first.
[[nodiscard]] inline Duration issue_latency(const Thread& thread, const Op& op) {
  switch (op.kind) {
    case OpKind::Compute: return Duration::ns(thread.launch_latency.count_ns() * op.compute().kernels);
    case OpKind::Collective:
    case OpKind::Send:
    case OpKind::Recv: return thread.collective_launch_latency;
    case OpKind::Record:
    case OpKind::Wait: return thread.event_latency;
    case OpKind::Alloc:
    case OpKind::Free: return thread.alloc_latency;
    case OpKind::Sync: return thread.sync_latency;
  }
  return Duration{};
}

/// One step's time, as every engine and the runtime define it: from the
/// earliest start to the latest end of its timed ops; zero without any.
class StepSpan {
 public:
  constexpr void add(TimePoint start, TimePoint end) {
    first_ = std::min(first_, start.count_ns());
    last_ = std::max(last_, end.count_ns());
  }
  [[nodiscard]] constexpr Duration step() const { return Duration::ns(first_ > last_ ? 0 : last_ - first_); }

 private:
  std::int64_t first_ = INT64_MAX;
  std::int64_t last_ = 0;
};

/// The op list shared by a class of ranks. Ops name groups as seen by the
/// first member (the representative); each other member runs the same list on
/// the group of the same kind that contains it (so the groups of one kind
/// partition the ranks that use them).
struct Program {
  int id = 0;
  std::string name;
  std::vector<int> ranks;  // ascending; ranks[0] is the representative
  std::vector<Thread> threads;
  std::vector<Stream> streams;
  /// Pinned host memory each rank of the class holds at its peak for
  /// offloaded state (optimizer states, activations); 0 without offload
  /// (JSON `host_bytes`, written only when > 0).
  Bytes host_bytes{};
};

/// What the step computes, for throughput and MFU: the engines see only the
/// Schedule, never the model.
struct StepInfo {
  std::string model;
  std::string cluster;
  std::string strategy;
  int world_size = 0;
  std::int64_t seq_len = 0;
  std::int64_t global_batch_sequences = 0;
  std::int64_t micro_batches = 0;  // per data-parallel rank
  /// Model FLOPs of the whole step over all ranks (no recomputation counted).
  Flops model_flops{};
  [[nodiscard]] std::int64_t tokens() const { return seq_len * global_batch_sequences; }
};

struct Schedule {
  std::string name;
  StepInfo step;
  std::vector<Group> groups;      // ids 0..n-1 in order
  std::vector<Program> programs;  // ids 0..n-1 in order
  /// Where the Schedule came from (inputs, their hashes, plan options): a JSON
  /// object kept as text so that this header needs only json_fwd.
  std::string provenance_json = "{}";

  [[nodiscard]] const Group& group(int id) const { return groups.at(static_cast<std::size_t>(id)); }
};

// Names of enum values as they appear in JSON.
std::string_view to_string(Dtype);
std::string_view to_string(GroupKind);
std::string_view to_string(OpKind);
std::string_view to_string(ComputeKind);
std::string_view to_string(CollectiveKind);
std::string_view to_string(StreamKind);
std::string_view to_string(OpRole);
std::string_view to_string(ParamClass);
/// As step metrics report it: "params", "grads", "optimizer_states",
/// "nccl_buffers", "pool.gathered", "pool.grad_buckets", "gathered", "grad_buckets", "act",
/// "recomputed".
std::string_view to_string(BufferClass);

/// Canonical JSON text (sorted keys, no whitespace) with `schema_version` and
/// `sha256` — the hash covers the same text without the `sha256` key.
[[nodiscard]] std::string to_canonical_json(const Schedule& s);
/// SHA-256 of the canonical form.
[[nodiscard]] std::string schedule_hash(const Schedule& s);
/// Parses a Schedule file's text; `file` names it in errors. A recorded sha256
/// that does not match the content is an error unless `verify_hash` is false
/// (fuzzing, and deliberate hand edits).
[[nodiscard]] Schedule schedule_from_json(const std::string& text, const std::string& file, bool verify_hash = true);

}  // namespace hzp::core
