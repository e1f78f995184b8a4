// The data-parallel sharding of a hierarchical ZeRO plan (g_p, g_g, g_o):
// model-state and pool memory, parameter all-gathers (prefetched, and the
// 1/g_o -> 1/g_p regather), per-micro-batch gradient reduce-scatters, the
// once-per-step reductions for the optimizer, Adam and zeroing the gradients.
#include <fmt/compile.h>
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <set>

#include "plan/stage_lowering.hpp"

namespace hzp::plan::detail {

using core::Bytes;
using core::CollectiveKind;
using core::ComputeKind;
using core::Dtype;
using core::Flops;

ZeroSharding::ZeroSharding(StageContext& c, const std::vector<RankParams>& classes, HostOffload& offload)
    : c_(c),
      classes_(classes),
      offload_(offload),
      acc_(core::dtype_bytes(c.opt.grad_dtype)),
      depth_(prefetch_depth()) {}

// The parameter all-gathers and the gradient reductions run on streams of
// their own, issued from the threads the plan gives them.
void ZeroSharding::add_streams(int param_thread, int grad_thread) {
  ag_ = c_.b.add_stream("param_allgather", core::StreamKind::ParamGather, param_thread);
  rs_ = c_.b.add_stream("grad_reduce", core::StreamKind::GradReduce, grad_thread);
}

void ZeroSharding::add_communicators(std::set<int>& comms) const {
  for (const auto& c : classes_) {
    for (int g : {c.groups.param, c.groups.grad, c.groups.optim, c.groups.replica, c.groups.regather}) {
      if (g >= 0) comms.insert(g);
    }
  }
}

// Which uses gather and which reduce, and per unit its first forward and its
// last backward (or W).
void ZeroSharding::index_uses() {
  const std::vector<Use>& uses = c_.uses;
  for (std::size_t j = 0; j < uses.size(); ++j) {
    if (uses[j].gathers) gather_uses_.push_back(j);
    const bool reduces = uses[j].backward && uses[j].part != BackwardPart::Input;  // a whole backward or a W
    if (reduces && any_reduces(uses[j].unit)) reduce_uses_.push_back(j);
  }
  ag_done_.assign(uses.size(), -1);
  rs_done_.assign(uses.size(), -1);
  first_forward_.assign(c_.units.size(), uses.size());
  last_backward_of_.assign(c_.units.size(), uses.size());
  for (std::size_t j = 0; j < uses.size(); ++j) {
    const Use& use = uses[j];
    if (!use.backward && first_forward_[use.unit] == uses.size()) first_forward_[use.unit] = j;
    if (use.backward && use.part != BackwardPart::Input) last_backward_of_[use.unit] = j;
  }
  forward_gather_.assign(c_.units.size() * static_cast<std::size_t>(c_.batch.micro_batches), -1);
}

std::string ZeroSharding::buf(const char* what, std::size_t j) const {
  return fmt::format(FMT_COMPILE("{}.{}"), what, j);
}

bool ZeroSharding::any_gathers(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(), [&](const RankParams& c) { return c.gathers(u); });
}
bool ZeroSharding::any_reduces(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(), [&](const RankParams& c) { return c.reduces(u); });
}
// Buffers come from pre-allocated pools when the collectives are issued
// asynchronously by a stack whose allocator keeps pools (hzp's runtime);
// otherwise from the caching allocator, per use.
bool ZeroSharding::pools() const { return c_.async && c_.stack.allocator == stacks::Allocator::Pools; }
// Gathered buffers come from the pool, each freed before the next use of its
// slot (reshard after forward); otherwise they are allocated per use.
bool ZeroSharding::pooled() const { return pools() && c_.opt.reshard_after_forward; }
// Gathered parameters (and full bf16 gradients) of a unit, all classes.
Bytes ZeroSharding::gathered_bytes(std::size_t u) const {
  std::int64_t n = 0;
  for (const auto& c : classes_) n += c.gathers(u) ? 2 * c.padded[u] : 0;
  return Bytes(n);
}
Bytes ZeroSharding::full_grad_bytes(std::size_t u) const {
  std::int64_t n = 0;
  for (const auto& c : classes_) n += c.reduces(u) ? 2 * c.padded[u] : 0;
  return Bytes(n);
}

// Model state, per rank and class: bf16 parameters over g_p, accumulated
// gradients over g_g, fp32 master weights and Adam moments over g_o.
void ZeroSharding::alloc_model_state() {
  std::int64_t params = 0, grads = 0, states = 0;
  const bool fp8 = c_.opt.precision != models::Precision::Bf16;
  for (const auto& c : classes_) {
    std::int64_t owned = 0;
    for (auto o : c.owned) owned += o;
    params += c.host ? 0 : 2 * owned / c.sh.param;  // offload_params: in host memory (host_param_bytes)
    // FP8 with unsharded parameters: Transformer Engine keeps each weight's
    // FP8 copy and its FP8 transpose across the step (two bytes a parameter);
    // sharded ones are cast per gather inside the gathered buffer. With
    // fp8_param_gather the FP8 weights are the parameters (Megatron-Core's
    // --fp8-param-gather: no bf16 copy), one byte each and one more for the
    // transpose: the same two bytes as the bf16 copy they replace.
    if (fp8 && c.sh.param == 1 && !c_.opt.fp8_param_gather && !c.host) params += 2 * owned;
    grads += acc_ * owned / c.sh.grad;
    states += kOptimizerStateBytesPerParam * owned / c.sh.optim;
  }
  // FP8 scaling state: per FP8 GEMM its input, weight and output gradient's
  // scale; delayed scaling keeps a 1,024-entry fp32 amax history of each
  // (Transformer Engine's default amax_history_len), the others one fp32 scale.
  if (fp8) {
    std::int64_t gemms = 0;
    for (const auto& u : c_.units) {
      for (const auto& op : u.u->forward) gemms += op.dtype == Dtype::Fp8 ? 1 : 0;
    }
    params += gemms * 3 * 4 * (c_.opt.precision == models::Precision::Fp8Delayed ? 1024 : 1);
  }
  c_.b.alloc(c_.comp, "params", Bytes(params), core::BufferClass::Params);
  c_.b.alloc(c_.comp, "grads", Bytes(grads), core::BufferClass::Grads);
  // offload_optimizer: the states live in host memory (host_state_bytes).
  if (!c_.opt.offload_optimizer) {
    c_.b.alloc(c_.comp, "optimizer_states", Bytes(states), core::BufferClass::OptimizerStates);
  }
}

// async: pools of prefetch_depth + 1 slots sized for the largest unit,
// allocated once, so per-use buffers never fragment the heap.
void ZeroSharding::alloc_pools() {
  if (!pools()) return;
  const auto slots = static_cast<std::int64_t>(c_.opt.prefetch_depth) + 1;
  Bytes gathered{}, grad{};
  for (std::size_t u = 0; u < c_.units.size(); ++u) {
    gathered = std::max(gathered, gathered_bytes(u));
    grad = std::max(grad, full_grad_bytes(u));
  }
  if (gathered.count() > 0 && pooled())
    c_.b.alloc(c_.comp, "pool.gathered", Bytes(slots * gathered.count()), core::BufferClass::GatheredPool);
  if (grad.count() > 0)
    c_.b.alloc(c_.comp, "pool.grad_buckets", Bytes(slots * grad.count()), core::BufferClass::GradBucketPool);
}

// Issues all-gathers ahead of compute: those of the next prefetch_depth
// gathering uses after use j.
void ZeroSharding::prefetch_through(std::size_t j) {
  const std::size_t depth = depth_;
  const std::size_t current =
      static_cast<std::size_t>(std::lower_bound(gather_uses_.begin(), gather_uses_.end(), j) - gather_uses_.begin());
  while (next_gather_ < gather_uses_.size() && next_gather_ <= current + depth) {
    issue_gather(next_gather_, gather_uses_[next_gather_]);
    ++next_gather_;
  }
}

// The plan's prefetch depth, capped by the stack's limit on all-gathers in
// flight (FSDP1's limit_all_gathers: the current unit's and one more) and by
// its prefetch budget (DeepSpeed's stage3_prefetch_bucket_size: whole units
// of gathered parameters that fit in it; none when the largest does not).
std::size_t ZeroSharding::prefetch_depth() const {
  int depth = c_.opt.prefetch_depth;
  if (c_.stack.overlap.max_inflight_gathers > 0) depth = std::min(depth, c_.stack.overlap.max_inflight_gathers - 1);
  if (c_.stack.overlap.prefetch_MB > 0) {
    Bytes largest{};
    for (std::size_t u = 0; u < c_.units.size(); ++u) largest = std::max(largest, gathered_bytes(u));
    if (largest.count() > 0) {
      const double fit = std::floor(c_.stack.overlap.prefetch_MB * 1e6 / static_cast<double>(largest.count()));
      depth = std::min(depth, static_cast<int>(std::min(fit, 64.0)));
    }
  }
  return static_cast<std::size_t>(std::max(depth, 0));
}

// The element counts of the collectives the stack cuts unit u's gather or
// reduction of class c into: the whole padded unit, each dense parameter
// tensor (in proportion to the unit's tensors), or buckets of bucket_MB of
// bf16 values.
std::vector<std::int64_t> ZeroSharding::pieces(const RankParams& c, std::size_t u, stacks::Granularity g) const {
  const std::int64_t total = c.padded[u];
  if (g == stacks::Granularity::Unit || total == 0) return {total};
  std::vector<std::int64_t> sizes;
  if (g == stacks::Granularity::Bucket) {
    const auto bucket = std::max<std::int64_t>(1, std::llround(c_.stack.collectives.bucket_MB * 1e6 / 2));
    sizes.assign(static_cast<std::size_t>(ceil_div(total, bucket)), 0);
  } else if (c.cls == core::ParamClass::Dense) {
    sizes = c_.units[u].u->tensors;
  } else {
    return {total};  // expert parameters: one collective per unit (not cut per expert tensor)
  }
  // Split `total` (padding included) in proportion, each piece at least one element.
  std::int64_t sum = 0;
  for (auto s : sizes) sum += s;
  std::vector<std::int64_t> out;
  std::int64_t given = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::int64_t n = sum > 0 ? total * sizes[i] / sum : total / static_cast<std::int64_t>(sizes.size());
    if (i + 1 == sizes.size()) n = total - given;
    if (n <= 0) continue;
    out.push_back(n);
    given += n;
  }
  return out;
}

// One parameter all-gather of `elements` (the gathered count) over `group`,
// cut as the stack cuts it, wrapped in its copy-in or int8 quantization.
// An FP8 weight all-gather (fp8_param_gather) casts the shard to FP8 the
// same way (read bf16, write one byte) and gathers one byte a parameter.
void ZeroSharding::gather_pieces(const RankParams& c, std::size_t u, const std::string& name, int group,
                                 std::int64_t elements) {
  const stacks::Collectives& sc = c_.stack.collectives;
  const std::int64_t shard = elements / c.sh.param;
  const bool one_byte = sc.int8_weights || c_.opt.fp8_param_gather;
  if (sc.copy_in) {
    c_.b.compute(ag_, name + ".copy_in", ComputeKind::Elementwise, Flops(0), Bytes(4 * shard), Dtype::Bf16,
                 core::OpRole::ParamGather, c.cls);
  }
  if (one_byte) {
    c_.b.compute(ag_, name + (sc.int8_weights ? ".quantize" : ".fp8_cast"), ComputeKind::Elementwise,
                 Flops(static_cast<double>(shard)), Bytes(3 * shard), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
  }
  std::vector<std::int64_t> parts = elements == c.padded[u] ? pieces(c, u, sc.gather) : std::vector{elements};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string piece = parts.size() > 1 ? fmt::format("{}.{}", name, i) : name;
    const Dtype dtype = sc.int8_weights ? Dtype::Int8 : c_.opt.fp8_param_gather ? Dtype::Fp8 : Dtype::Bf16;
    c_.b.collective(ag_, piece, CollectiveKind::AllGather, group, Bytes((one_byte ? 1 : 2) * parts[i]), dtype,
                    core::OpRole::ParamGather, c.cls);
  }
}

// On the compute stream once unit j's parameters are gathered: the stack's
// copy-out into the parameters, or the dequantization of int8 weights; FP8
// gathered weights are transposed for the GEMMs that take them so (read and
// write one byte a parameter).
void ZeroSharding::after_gather(std::size_t j) {
  const stacks::Collectives& sc = c_.stack.collectives;
  if (!sc.copy_out && !sc.int8_weights && !c_.opt.fp8_param_gather) return;
  const auto& unit = *c_.units[c_.uses[j].unit].u;
  for (const auto& c : classes_) {
    if (!c.gathers(c_.uses[j].unit)) continue;
    const std::int64_t n = c.padded[c_.uses[j].unit];
    if ((sc.copy_out || sc.int8_weights) && c.collects(c_.uses[j].unit)) {
      c_.b.compute(c_.comp, fmt::format("{}{}.{}", unit.name, c.tag, sc.int8_weights ? "dequantize" : "copy_out"),
                   ComputeKind::Elementwise, Flops(sc.int8_weights ? static_cast<double>(n) : 0.0),
                   Bytes((sc.int8_weights ? 3 : 4) * n), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
    if (c_.opt.fp8_param_gather) {
      c_.b.compute(c_.comp, fmt::format("{}{}.fp8_transpose", unit.name, c.tag), ComputeKind::Elementwise, Flops(0),
                   Bytes(2 * n), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
  }
}

void ZeroSharding::issue_gather(std::size_t g, std::size_t j) {
  const Use& use = c_.uses[j];
  ensure_regathered(use.unit);
  const auto& unit = *c_.units[use.unit].u;
  const std::size_t depth = depth_;
  // The slot this gather reuses was last used by gathering use g - depth - 1.
  if (g >= depth + 1) {
    int freed = c_.use_done[gather_uses_[g - depth - 1]];
    if (c_.async) {
      c_.b.wait(ag_, freed, c_.b.op_name("wait slot for {}", unit.name));
    } else {
      c_.b.sync(ag_, freed, fmt::format("host waits slot for {}", unit.name));
    }
  }
  if (!pooled()) c_.b.alloc(ag_, buf("gathered", j), gathered_bytes(use.unit), core::BufferClass::Gathered);
  offload_.fetch_params(j, ag_);
  for (const auto& c : classes_) {
    if (!c.collects(use.unit)) continue;
    gather_pieces(c, use.unit, fmt::format("{}{}.allgather.{}", unit.name, c.tag, use.backward ? "bwd" : "fwd"),
                  c.groups.param, c.padded[use.unit]);
  }
  ag_done_[j] = c_.b.record(ag_, c_.b.op_name("{}.gathered", unit.name));
  if (!use.backward) forward_gather_[slot(use)] = static_cast<int>(j);
}

std::size_t ZeroSharding::slot(const Use& use) const {
  return static_cast<std::size_t>(use.mb) * c_.units.size() + use.unit;
}

// The use whose gathered buffer this use computes with (-1: none).
int ZeroSharding::gathered_by(std::size_t j) const {
  const Use& use = c_.uses[j];
  if (use.gathers) return static_cast<int>(j);
  return any_gathers(use.unit) ? forward_gather_[slot(use)] : -1;
}

bool ZeroSharding::regathers(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(),
                     [&](const RankParams& c) { return c.owned[u] > 0 && c.sh.optim / c.sh.param > 1; });
}

// Unit u's updated 1/g_o shards gathered to 1/g_p on the parameter stream.
// With fp8_param_gather the parameters are FP8: each owner casts its updated
// fp32 shard to them (read 4, write 1 byte), the all-gather moves one byte a
// parameter, and unsharded FP8 weights are transposed once for the step's
// GEMMs (read and write one byte).
void ZeroSharding::regather_collectives(std::size_t u) {
  const auto& unit = *c_.units[u].u;
  const bool fp8 = c_.opt.fp8_param_gather;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0 || c.sh.optim / c.sh.param <= 1) continue;
    const std::string name = fmt::format("{}{}.param_allgather.optim", unit.name, c.tag);
    const std::int64_t gathered = c.owned[u] / c.sh.param;
    if (fp8) {
      const std::int64_t shard = c.owned[u] / c.sh.optim;
      c_.b.compute(ag_, name + ".fp8_cast", ComputeKind::Elementwise, Flops(static_cast<double>(shard)),
                   Bytes(5 * shard), Dtype::Fp32, core::OpRole::ParamGather, c.cls);
    }
    c_.b.collective(ag_, name, CollectiveKind::AllGather, c.groups.regather, Bytes((fp8 ? 1 : 2) * gathered),
                    fp8 ? Dtype::Fp8 : Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    if (fp8 && c.sh.param == 1) {
      c_.b.compute(ag_, name + ".fp8_transpose", ComputeKind::Elementwise, Flops(0), Bytes(2 * gathered), Dtype::Bf16,
                   core::OpRole::ParamGather, c.cls);
    }
  }
}

// With --overlap-param-gather: regather each unit once, before its first
// use (on the parameter stream, ahead of this unit's own gather when it has one).
void ZeroSharding::ensure_regathered(std::size_t u) {
  if (!c_.opt.overlap_param_gather || !regathers(u) || regathered_.contains(u)) return;
  regather_collectives(u);
  regathered_[u] = c_.b.record(ag_, c_.b.op_name("{}.regathered", c_.unit(u).name));
}

void ZeroSharding::before_forward(std::size_t j) {
  const std::size_t u = c_.uses[j].unit;
  ensure_regathered(u);
  if (auto it = regathered_.find(u); it != regathered_.end() && j == first_forward_[u]) {
    c_.b.wait(c_.comp, it->second, c_.b.op_name("wait {}.regathered", c_.unit(u).name));
  }
}

int ZeroSharding::wait_gathered(std::size_t j) {
  const int gathered = gathered_by(j);
  if (gathered < 0) return gathered;
  c_.b.wait(c_.comp, ag_done_[static_cast<std::size_t>(gathered)],
            c_.b.op_name("wait {}.gathered", c_.unit(c_.uses[j].unit).name));
  if (c_.uses[j].gathers) after_gather(j);
  return gathered;
}

void ZeroSharding::release_gathered(int gathered) {
  if (gathered < 0 || pooled()) return;
  const auto g = static_cast<std::size_t>(gathered);
  c_.b.free(c_.comp, buf("gathered", g), gathered_bytes(c_.uses[g].unit));
}

// Before a backward that reduces gradients: its full-gradient buffer, a pool
// slot (free once the reduce-scatter that used it depth + 1 reducing uses ago
// is done) or a fresh allocation.
void ZeroSharding::take_grad_buffer(std::size_t j) {
  if (!any_reduces(c_.uses[j].unit)) return;
  std::size_t k = reduce_index_++;
  const std::size_t depth = depth_;
  if (pools()) {
    if (k >= depth + 1) c_.b.wait(c_.comp, rs_done_[reduce_uses_[k - depth - 1]], "wait grad slot");
  } else {
    c_.b.alloc(c_.comp, buf("grad_bucket", j), full_grad_bytes(c_.uses[j].unit), core::BufferClass::GradBucket);
  }
}

// The per-micro-batch gradient reduce-scatter of unit u's class c over g_g,
// cut as the stack cuts it, after its copy-in or int4 quantization.
void ZeroSharding::reduce_pieces(const RankParams& c, std::size_t u, const std::string& name) {
  const stacks::Collectives& sc = c_.stack.collectives;
  const std::int64_t n = c.padded[u];
  if (sc.grad_copy_in) {
    c_.b.compute(rs_, name + ".copy_in", ComputeKind::Elementwise, Flops(0), Bytes(4 * n), Dtype::Bf16,
                 core::OpRole::GradReduce, c.cls);
  }
  if (sc.int4_gradients) {
    // Read bf16, write 4-bit values: 2.5 bytes an element.
    c_.b.compute(rs_, name + ".quantize", ComputeKind::Elementwise, Flops(static_cast<double>(n)), Bytes(5 * n / 2),
                 Dtype::Bf16, core::OpRole::GradReduce, c.cls);
  }
  const std::vector<std::int64_t> parts = pieces(c, u, sc.reduce);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string piece = parts.size() > 1 ? fmt::format("{}.{}", name, i) : name;
    c_.b.collective(rs_, piece, CollectiveKind::ReduceScatter, c.groups.grad,
                    Bytes(sc.int4_gradients ? std::max<std::int64_t>(1, parts[i] / 2) : 2 * parts[i]),
                    sc.int4_gradients ? Dtype::Int4 : Dtype::Bf16, core::OpRole::GradReduce, c.cls);
  }
}

// g_g > 1: after the backward of use j, reduce-scatter its gradients over g_g
// and accumulate the 1/g_g shard. Whether the reduce stream now waits for use j.
bool ZeroSharding::reduce_gradients(std::size_t j) {
  const Use& use = c_.uses[j];
  if (!any_reduces(use.unit)) return false;
  const auto& unit = *c_.units[use.unit].u;
  c_.b.wait(rs_, c_.use_done[j], c_.b.op_name("wait {}.bwd_done", unit.name));
  for (const auto& c : classes_) {
    if (!c.reduces(use.unit)) continue;
    reduce_pieces(c, use.unit, fmt::format("{}{}.grad_reducescatter", unit.name, c.tag));
    const std::int64_t shard = c.padded[use.unit] / c.sh.grad;
    c_.b.compute(rs_, c_.b.op_name("{}{}.grad_accumulate", unit.name, c.tag), ComputeKind::Elementwise,
                 Flops(static_cast<double>(shard)), Bytes((2 + 2 * acc_) * shard), c_.opt.grad_dtype,
                 core::OpRole::GradAccumulate, c.cls);
  }
  rs_done_[j] = c_.b.record(rs_, c_.b.op_name("{}.grad_reduced", unit.name));
  if (!pools()) c_.b.free(rs_, buf("grad_bucket", j), full_grad_bytes(use.unit));
  return true;
}

void ZeroSharding::gradients_done(std::size_t j) {
  const bool waited = reduce_gradients(j);
  const std::size_t u = c_.uses[j].unit;
  if (j != last_backward_of_[u]) return;
  if (c_.opt.overlap_grad_reduce) {
    reduce_for_optimizer(u, j, waited);
  } else {
    deferred_.push_back(u);
    last_backward_ = j;
  }
}

// overlap_grad_reduce off: every unit's final reduction, in backward order,
// once the stage's last backward is done.
void ZeroSharding::reduce_deferred() {
  if (deferred_.empty()) return;
  c_.b.wait(rs_, c_.use_done[last_backward_], "wait backward_done");
  for (const std::size_t u : deferred_) reduce_for_optimizer(u, last_backward_, true);
}

// Once the unit's gradients are final: 1/g_g -> 1/g_o, then across replicas.
// `waited`: the reduce stream already waits for use j.
void ZeroSharding::reduce_for_optimizer(std::size_t u, std::size_t j, bool waited) {
  const auto& unit = *c_.units[u].u;
  bool any = false;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    if (c.step_reduction() && !waited) {
      c_.b.wait(rs_, c_.use_done[j], c_.b.op_name("wait {}.bwd_done", unit.name));
      waited = true;
    }
    if (c_.stack.collectives.step_reduction == stacks::StepReduction::AllReduce && c.sh.grad == 1 && c.ranks > 1) {
      // Unsharded gradients (g_g = 1): one all-reduce over every
      // data-parallel rank, cut as the stack cuts reductions; each rank then
      // keeps its 1/g_o. Sharded gradients take the hierarchical path.
      for (std::int64_t n : pieces(c, u, c_.stack.collectives.reduce)) {
        c_.b.collective(rs_, c_.b.op_name("{}{}.grad_allreduce.all", unit.name, c.tag), CollectiveKind::AllReduce,
                        c.groups.all, Bytes(acc_ * n), c_.opt.grad_dtype, core::OpRole::GradReduce, c.cls);
      }
      any = true;
      continue;
    }
    if (c.sh.optim / c.sh.grad > 1) {
      c_.b.collective(rs_, c_.b.op_name("{}{}.grad_reducescatter.optim", unit.name, c.tag),
                      CollectiveKind::ReduceScatter, c.groups.optim, Bytes(acc_ * c.padded[u] / c.sh.grad),
                      c_.opt.grad_dtype, core::OpRole::GradReduce, c.cls);
    }
    if (c.ranks / c.sh.optim > 1) {
      c_.b.collective(rs_, c_.b.op_name("{}{}.grad_allreduce", unit.name, c.tag), CollectiveKind::AllReduce,
                      c.groups.replica, Bytes(acc_ * c.padded[u] / c.sh.optim), c_.opt.grad_dtype,
                      core::OpRole::GradReduce, c.cls);
    }
    any = true;
  }
  if (any) reduced_.emplace_back(u, waited ? c_.b.record(rs_, c_.b.op_name("{}.grads_final", unit.name)) : -1);
}

// Adam per unit on the compute stream as each unit's reduction lands (units
// arrive in backward order), then the regather of its parameters; finally the
// accumulated gradients are zeroed for the next step.
void ZeroSharding::step_end() {
  reduce_deferred();
  if (c_.stage.mirror_group >= 0) {
    // DualPipe: once every gradient is final, one all-reduce with the rank
    // holding the other copies sums the two copies' 1/g_o gradient shards
    // (both ranks hold the same two virtual stages), then every update.
    std::int64_t bytes = 0;
    for (auto [u, ev] : reduced_) {
      for (const auto& c : classes_) bytes += acc_ * c.owned[u] / c.sh.optim;
    }
    c_.b.collective(rs_, "dualpipe.copies_grad_allreduce", CollectiveKind::AllReduce, c_.stage.mirror_group,
                    Bytes(bytes), c_.opt.grad_dtype, core::OpRole::GradReduce, core::ParamClass::Dense);
    const int summed = c_.b.record(rs_, "dualpipe.copies_summed");
    for (auto& r : reduced_) r.second = summed;
  }
  for (auto [u, ev] : reduced_) optimizer_step(u, ev);
  // Offloaded: the gradients are zeroed (and a broadcast sends updates) once
  // every update is back on the device.
  if (offload_.uploaded() >= 0) c_.b.wait(c_.comp, offload_.uploaded(), "wait updated");
  broadcast_updated();
  std::int64_t grads = 0;
  for (const auto& c : classes_) {
    for (auto o : c.owned) grads += acc_ * o / c.sh.grad;
  }
  c_.b.compute(c_.comp, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(grads), c_.opt.grad_dtype,
               core::OpRole::ZeroGrads, core::ParamClass::None);
}

// A stack that regathers by broadcast: once every unit is updated, each of
// the g_o / g_p owners of a regather group broadcasts its whole updated shard
// (every unit's 1/g_o) to the group, one after another.
void ZeroSharding::broadcast_updated() {
  if (c_.stack.collectives.regather != stacks::Regather::Broadcast || c_.opt.overlap_param_gather) return;
  bool waited = false;
  for (const auto& c : classes_) {
    const int owners = c.sh.optim / c.sh.param;
    if (owners <= 1) continue;
    std::int64_t owned = 0;
    for (auto o : c.owned) owned += o;
    if (owned == 0) continue;
    if (!waited) {
      c_.b.wait(ag_, c_.b.record(c_.comp, "updated"), "wait updated");
      waited = true;
    }
    for (int r = 0; r < owners; ++r) {
      c_.b.collective(ag_, c_.b.op_name("params{}.broadcast.{}", c.tag, r), CollectiveKind::Broadcast,
                      c.groups.regather, Bytes(2 * owned / c.sh.optim), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
  }
  if (!waited) return;
  for (std::size_t u = 0; u < c_.units.size(); ++u) {
    if (regathers(u)) offload_.params_to_host(u, ag_);
  }
}

// Adam on unit u's 1/g_o shards once its final gradients (event `ev`, -1:
// already in order) are there; without --overlap-param-gather the 1/g_o ->
// 1/g_p regather follows on the parameter stream.
void ZeroSharding::optimizer_step(std::size_t u, int ev) {
  const auto& unit = *c_.units[u].u;
  const int uploaded = c_.opt.offload_optimizer ? offload_.host_optimizer_step(u, ev) : -1;
  if (ev >= 0 && uploaded < 0) c_.b.wait(c_.comp, ev, c_.b.op_name("wait {}.grads_final", unit.name));
  if (uploaded < 0) offload_.alloc_updated(u, c_.comp);
  bool regather = false;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    const std::int64_t shard = c.owned[u] / c.sh.optim;
    if (uploaded < 0) {
      c_.b.compute(c_.comp, fmt::format("{}{}.adam", unit.name, c.tag), ComputeKind::Optimizer,
                   Flops(12.0 * static_cast<double>(shard)), Bytes(kAdamBytesPerParam * shard), Dtype::Fp32,
                   core::OpRole::Optimizer, c.cls);
    }
    regather = regather || c.sh.optim / c.sh.param > 1;
  }
  const bool broadcast = c_.stack.collectives.regather == stacks::Regather::Broadcast;
  if (!regather || c_.opt.overlap_param_gather || broadcast) {
    // Offloaded parameters: the update goes to the host now (after the
    // broadcasts when the stack regathers by broadcast).
    if (!(regather && broadcast)) offload_.params_to_host(u, uploaded >= 0 ? offload_.upload_stream() : c_.comp);
    return;
  }
  int done = uploaded >= 0 ? uploaded : c_.b.record(c_.comp, fmt::format("{}.updated", unit.name));
  c_.b.wait(ag_, done, c_.b.op_name("wait {}.updated", unit.name));
  regather_collectives(u);
  offload_.params_to_host(u, ag_);
}

}  // namespace hzp::plan::detail
