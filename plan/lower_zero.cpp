// The data-parallel sharding of a hierarchical ZeRO plan (g_p, g_g, g_o):
// model-state and pool memory, parameter all-gathers (prefetched, and the
// 1/g_o -> 1/g_p regather), per-micro-batch gradient reduce-scatters, the
// once-per-step reductions for the optimizer, Adam and zeroing the gradients.
#include "plan/lowering.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

namespace hzp::plan::detail {

using core::Bytes;
using core::CollectiveKind;
using core::ComputeKind;
using core::Dtype;
using core::Flops;

bool Lowering::any_gathers(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(), [&](const Class& c) { return c.gathers(u); });
}
bool Lowering::any_reduces(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(), [&](const Class& c) { return c.reduces(u); });
}
// Buffers come from pre-allocated pools when the collectives are issued
// asynchronously by a stack whose allocator keeps pools (hzp's runtime);
// otherwise from the caching allocator, per use.
bool Lowering::pools() const { return async_ && stack_.allocator == stacks::Allocator::Pools; }
// Gathered buffers come from the pool, each freed before the next use of its
// slot (reshard after forward); otherwise they are allocated per use.
bool Lowering::pooled() const { return pools() && opt_.reshard_after_forward; }
// Gathered parameters (and full bf16 gradients) of a unit, all classes.
Bytes Lowering::gathered_bytes(std::size_t u) const {
  std::int64_t n = 0;
  for (const auto& c : classes_) n += c.gathers(u) ? 2 * c.padded[u] : 0;
  return Bytes(n);
}
Bytes Lowering::full_grad_bytes(std::size_t u) const {
  std::int64_t n = 0;
  for (const auto& c : classes_) n += c.reduces(u) ? 2 * c.padded[u] : 0;
  return Bytes(n);
}

// Model state, per rank and class: bf16 parameters over g_p, accumulated
// gradients over g_g, fp32 master weights and Adam moments over g_o.
void Lowering::alloc_model_state() {
  std::int64_t params = 0, grads = 0, states = 0;
  const bool fp8 = opt_.precision != models::Precision::Bf16;
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
    if (fp8 && c.sh.param == 1 && !opt_.fp8_param_gather && !c.host) params += 2 * owned;
    grads += acc_ * owned / c.sh.grad;
    states += kOptimizerStateBytesPerParam * owned / c.sh.optim;
  }
  // FP8 scaling state: per FP8 GEMM its input, weight and output gradient's
  // scale; delayed scaling keeps a 1,024-entry fp32 amax history of each
  // (Transformer Engine's default amax_history_len), the others one fp32 scale.
  if (fp8) {
    std::int64_t gemms = 0;
    for (const auto& u : units_) {
      for (const auto& op : u.u->forward) gemms += op.dtype == Dtype::Fp8 ? 1 : 0;
    }
    params += gemms * 3 * 4 * (opt_.precision == models::Precision::Fp8Delayed ? 1024 : 1);
  }
  b_.alloc(comp_, "params", Bytes(params), core::BufferClass::Params);
  b_.alloc(comp_, "grads", Bytes(grads), core::BufferClass::Grads);
  // offload_optimizer: the states live in host memory (host_state_bytes).
  if (!opt_.offload_optimizer) {
    b_.alloc(comp_, "optimizer_states", Bytes(states), core::BufferClass::OptimizerStates);
  }
}

// async: pools of prefetch_depth + 1 slots sized for the largest unit,
// allocated once, so per-use buffers never fragment the heap.
void Lowering::alloc_pools() {
  if (!pools()) return;
  const auto slots = static_cast<std::int64_t>(opt_.prefetch_depth) + 1;
  Bytes gathered{}, grad{};
  for (std::size_t u = 0; u < units_.size(); ++u) {
    gathered = std::max(gathered, gathered_bytes(u));
    grad = std::max(grad, full_grad_bytes(u));
  }
  if (gathered.count() > 0 && pooled())
    b_.alloc(comp_, "pool.gathered", Bytes(slots * gathered.count()), core::BufferClass::GatheredPool);
  if (grad.count() > 0)
    b_.alloc(comp_, "pool.grad_buckets", Bytes(slots * grad.count()), core::BufferClass::GradBucketPool);
}

// Issues all-gathers ahead of compute: those of the next prefetch_depth
// gathering uses after use j.
void Lowering::prefetch_through(std::size_t j) {
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
std::size_t Lowering::prefetch_depth() const {
  int depth = opt_.prefetch_depth;
  if (stack_.overlap.max_inflight_gathers > 0) depth = std::min(depth, stack_.overlap.max_inflight_gathers - 1);
  if (stack_.overlap.prefetch_MB > 0) {
    Bytes largest{};
    for (std::size_t u = 0; u < units_.size(); ++u) largest = std::max(largest, gathered_bytes(u));
    if (largest.count() > 0) {
      const double fit = std::floor(stack_.overlap.prefetch_MB * 1e6 / static_cast<double>(largest.count()));
      depth = std::min(depth, static_cast<int>(std::min(fit, 64.0)));
    }
  }
  return static_cast<std::size_t>(std::max(depth, 0));
}

// The element counts of the collectives the stack cuts unit u's gather or
// reduction of class c into: the whole padded unit, each dense parameter
// tensor (in proportion to the unit's tensors), or buckets of bucket_MB of
// bf16 values.
std::vector<std::int64_t> Lowering::pieces(const Class& c, std::size_t u, stacks::Granularity g) const {
  const std::int64_t total = c.padded[u];
  if (g == stacks::Granularity::Unit || total == 0) return {total};
  std::vector<std::int64_t> sizes;
  if (g == stacks::Granularity::Bucket) {
    const auto bucket = std::max<std::int64_t>(1, std::llround(stack_.collectives.bucket_MB * 1e6 / 2));
    sizes.assign(static_cast<std::size_t>(ceil_div(total, bucket)), 0);
  } else if (c.cls == core::ParamClass::Dense) {
    sizes = units_[u].u->tensors;
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
void Lowering::gather_pieces(const Class& c, std::size_t u, const std::string& name, int group, std::int64_t elements) {
  const stacks::Collectives& sc = stack_.collectives;
  const std::int64_t shard = elements / c.sh.param;
  const bool one_byte = sc.int8_weights || opt_.fp8_param_gather;
  if (sc.copy_in) {
    b_.compute(ag_, name + ".copy_in", ComputeKind::Elementwise, Flops(0), Bytes(4 * shard), Dtype::Bf16,
               core::OpRole::ParamGather, c.cls);
  }
  if (one_byte) {
    b_.compute(ag_, name + (sc.int8_weights ? ".quantize" : ".fp8_cast"), ComputeKind::Elementwise,
               Flops(static_cast<double>(shard)), Bytes(3 * shard), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
  }
  std::vector<std::int64_t> parts = elements == c.padded[u] ? pieces(c, u, sc.gather) : std::vector{elements};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string piece = parts.size() > 1 ? fmt::format("{}.{}", name, i) : name;
    const Dtype dtype = sc.int8_weights ? Dtype::Int8 : opt_.fp8_param_gather ? Dtype::Fp8 : Dtype::Bf16;
    b_.collective(ag_, piece, CollectiveKind::AllGather, group, Bytes((one_byte ? 1 : 2) * parts[i]), dtype,
                  core::OpRole::ParamGather, c.cls);
  }
}

// On the compute stream once unit j's parameters are gathered: the stack's
// copy-out into the parameters, or the dequantization of int8 weights; FP8
// gathered weights are transposed for the GEMMs that take them so (read and
// write one byte a parameter).
void Lowering::after_gather(std::size_t j) {
  const stacks::Collectives& sc = stack_.collectives;
  if (!sc.copy_out && !sc.int8_weights && !opt_.fp8_param_gather) return;
  const auto& unit = *units_[uses_[j].unit].u;
  for (const auto& c : classes_) {
    if (!c.gathers(uses_[j].unit)) continue;
    const std::int64_t n = c.padded[uses_[j].unit];
    if ((sc.copy_out || sc.int8_weights) && c.collects(uses_[j].unit)) {
      b_.compute(comp_, fmt::format("{}{}.{}", unit.name, c.tag, sc.int8_weights ? "dequantize" : "copy_out"),
                 ComputeKind::Elementwise, Flops(sc.int8_weights ? static_cast<double>(n) : 0.0),
                 Bytes((sc.int8_weights ? 3 : 4) * n), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
    if (opt_.fp8_param_gather) {
      b_.compute(comp_, fmt::format("{}{}.fp8_transpose", unit.name, c.tag), ComputeKind::Elementwise, Flops(0),
                 Bytes(2 * n), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
  }
}

void Lowering::issue_gather(std::size_t g, std::size_t j) {
  const Use& use = uses_[j];
  ensure_regathered(use.unit);
  const auto& unit = *units_[use.unit].u;
  const std::size_t depth = depth_;
  // The slot this gather reuses was last used by gathering use g - depth - 1.
  if (g >= depth + 1) {
    int freed = use_done_[gather_uses_[g - depth - 1]];
    if (async_) {
      b_.wait(ag_, freed, fmt::format("wait slot for {}", unit.name));
    } else {
      b_.sync(ag_, freed, fmt::format("host waits slot for {}", unit.name));
    }
  }
  if (!pooled()) b_.alloc(ag_, buf("gathered", j), gathered_bytes(use.unit), core::BufferClass::Gathered);
  fetch_params(j);
  for (const auto& c : classes_) {
    if (!c.collects(use.unit)) continue;
    gather_pieces(c, use.unit, fmt::format("{}{}.allgather.{}", unit.name, c.tag, use.backward ? "bwd" : "fwd"),
                  c.groups.param, c.padded[use.unit]);
  }
  ag_done_[j] = b_.record(ag_, fmt::format("{}.gathered", unit.name));
  if (!use.backward) forward_gather_[slot(use)] = static_cast<int>(j);
}

std::size_t Lowering::slot(const Use& use) const { return static_cast<std::size_t>(use.mb) * units_.size() + use.unit; }

// The use whose gathered buffer this use computes with (-1: none).
int Lowering::gathered_by(std::size_t j) const {
  const Use& use = uses_[j];
  if (use.gathers) return static_cast<int>(j);
  return any_gathers(use.unit) ? forward_gather_[slot(use)] : -1;
}

bool Lowering::regathers(std::size_t u) const {
  return std::any_of(classes_.begin(), classes_.end(),
                     [&](const Class& c) { return c.owned[u] > 0 && c.sh.optim / c.sh.param > 1; });
}

// The all-gather of the last update's 1/g_o shards back to 1/g_p (on the
// parameter stream, ahead of this unit's own gather when it has one).
int Lowering::regather(std::size_t u) {
  regather_collectives(u);
  return b_.record(ag_, fmt::format("{}.regathered", units_[u].u->name));
}

// Unit u's updated 1/g_o shards gathered to 1/g_p on the parameter stream.
// With fp8_param_gather the parameters are FP8: each owner casts its updated
// fp32 shard to them (read 4, write 1 byte), the all-gather moves one byte a
// parameter, and unsharded FP8 weights are transposed once for the step's
// GEMMs (read and write one byte).
void Lowering::regather_collectives(std::size_t u) {
  const auto& unit = *units_[u].u;
  const bool fp8 = opt_.fp8_param_gather;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0 || c.sh.optim / c.sh.param <= 1) continue;
    const std::string name = fmt::format("{}{}.param_allgather.optim", unit.name, c.tag);
    const std::int64_t gathered = c.owned[u] / c.sh.param;
    if (fp8) {
      const std::int64_t shard = c.owned[u] / c.sh.optim;
      b_.compute(ag_, name + ".fp8_cast", ComputeKind::Elementwise, Flops(static_cast<double>(shard)), Bytes(5 * shard),
                 Dtype::Fp32, core::OpRole::ParamGather, c.cls);
    }
    b_.collective(ag_, name, CollectiveKind::AllGather, c.groups.regather, Bytes((fp8 ? 1 : 2) * gathered),
                  fp8 ? Dtype::Fp8 : Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    if (fp8 && c.sh.param == 1) {
      b_.compute(ag_, name + ".fp8_transpose", ComputeKind::Elementwise, Flops(0), Bytes(2 * gathered), Dtype::Bf16,
                 core::OpRole::ParamGather, c.cls);
    }
  }
}

// With --overlap-param-gather: regather each unit once, before its first use.
void Lowering::ensure_regathered(std::size_t u) {
  if (!opt_.overlap_param_gather || !regathers(u) || regathered_.contains(u)) return;
  regathered_[u] = regather(u);
}

// Before a backward that reduces gradients: its full-gradient buffer, a pool
// slot (free once the reduce-scatter that used it depth + 1 reducing uses ago
// is done) or a fresh allocation.
void Lowering::take_grad_buffer(std::size_t j) {
  if (!any_reduces(uses_[j].unit)) return;
  std::size_t k = reduce_index_++;
  const std::size_t depth = depth_;
  if (pools()) {
    if (k >= depth + 1) b_.wait(comp_, rs_done_[reduce_uses_[k - depth - 1]], "wait grad slot");
  } else {
    b_.alloc(comp_, buf("grad_bucket", j), full_grad_bytes(uses_[j].unit), core::BufferClass::GradBucket);
  }
}

// The per-micro-batch gradient reduce-scatter of unit u's class c over g_g,
// cut as the stack cuts it, after its copy-in or int4 quantization.
void Lowering::reduce_pieces(const Class& c, std::size_t u, const std::string& name) {
  const stacks::Collectives& sc = stack_.collectives;
  const std::int64_t n = c.padded[u];
  if (sc.grad_copy_in) {
    b_.compute(rs_, name + ".copy_in", ComputeKind::Elementwise, Flops(0), Bytes(4 * n), Dtype::Bf16,
               core::OpRole::GradReduce, c.cls);
  }
  if (sc.int4_gradients) {
    // Read bf16, write 4-bit values: 2.5 bytes an element.
    b_.compute(rs_, name + ".quantize", ComputeKind::Elementwise, Flops(static_cast<double>(n)), Bytes(5 * n / 2),
               Dtype::Bf16, core::OpRole::GradReduce, c.cls);
  }
  const std::vector<std::int64_t> parts = pieces(c, u, sc.reduce);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string piece = parts.size() > 1 ? fmt::format("{}.{}", name, i) : name;
    b_.collective(rs_, piece, CollectiveKind::ReduceScatter, c.groups.grad,
                  Bytes(sc.int4_gradients ? std::max<std::int64_t>(1, parts[i] / 2) : 2 * parts[i]),
                  sc.int4_gradients ? Dtype::Int4 : Dtype::Bf16, core::OpRole::GradReduce, c.cls);
  }
}

// g_g > 1: after the backward of use j, reduce-scatter its gradients over g_g
// and accumulate the 1/g_g shard. Whether the reduce stream now waits for use j.
bool Lowering::reduce_gradients(std::size_t j) {
  const Use& use = uses_[j];
  if (!any_reduces(use.unit)) return false;
  const auto& unit = *units_[use.unit].u;
  b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
  for (const auto& c : classes_) {
    if (!c.reduces(use.unit)) continue;
    reduce_pieces(c, use.unit, fmt::format("{}{}.grad_reducescatter", unit.name, c.tag));
    const std::int64_t shard = c.padded[use.unit] / c.sh.grad;
    b_.compute(rs_, fmt::format("{}{}.grad_accumulate", unit.name, c.tag), ComputeKind::Elementwise,
               Flops(static_cast<double>(shard)), Bytes((2 + 2 * acc_) * shard), opt_.grad_dtype,
               core::OpRole::GradAccumulate, c.cls);
  }
  rs_done_[j] = b_.record(rs_, fmt::format("{}.grad_reduced", unit.name));
  if (!pools()) b_.free(rs_, buf("grad_bucket", j), full_grad_bytes(use.unit));
  return true;
}

// overlap_grad_reduce off: every unit's final reduction, in backward order,
// once the stage's last backward is done.
void Lowering::reduce_deferred() {
  if (deferred_.empty()) return;
  b_.wait(rs_, use_done_[last_backward_], "wait backward_done");
  for (const std::size_t u : deferred_) reduce_for_optimizer(u, last_backward_, true);
}

// Once the unit's gradients are final: 1/g_g -> 1/g_o, then across replicas.
// `waited`: the reduce stream already waits for use j.
void Lowering::reduce_for_optimizer(std::size_t u, std::size_t j, bool waited) {
  const auto& unit = *units_[u].u;
  bool any = false;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    if (c.step_reduction() && !waited) {
      b_.wait(rs_, use_done_[j], fmt::format("wait {}.bwd_done", unit.name));
      waited = true;
    }
    if (stack_.collectives.step_reduction == stacks::StepReduction::AllReduce && c.sh.grad == 1 && c.ranks > 1) {
      // Unsharded gradients (g_g = 1): one all-reduce over every
      // data-parallel rank, cut as the stack cuts reductions; each rank then
      // keeps its 1/g_o. Sharded gradients take the hierarchical path.
      for (std::int64_t n : pieces(c, u, stack_.collectives.reduce)) {
        b_.collective(rs_, fmt::format("{}{}.grad_allreduce.all", unit.name, c.tag), CollectiveKind::AllReduce,
                      c.groups.all, Bytes(acc_ * n), opt_.grad_dtype, core::OpRole::GradReduce, c.cls);
      }
      any = true;
      continue;
    }
    if (c.sh.optim / c.sh.grad > 1) {
      b_.collective(rs_, fmt::format("{}{}.grad_reducescatter.optim", unit.name, c.tag), CollectiveKind::ReduceScatter,
                    c.groups.optim, Bytes(acc_ * c.padded[u] / c.sh.grad), opt_.grad_dtype, core::OpRole::GradReduce,
                    c.cls);
    }
    if (c.ranks / c.sh.optim > 1) {
      b_.collective(rs_, fmt::format("{}{}.grad_allreduce", unit.name, c.tag), CollectiveKind::AllReduce,
                    c.groups.replica, Bytes(acc_ * c.padded[u] / c.sh.optim), opt_.grad_dtype, core::OpRole::GradReduce,
                    c.cls);
    }
    any = true;
  }
  if (any) reduced_.emplace_back(u, waited ? b_.record(rs_, fmt::format("{}.grads_final", unit.name)) : -1);
}

// Adam per unit on the compute stream as each unit's reduction lands (units
// arrive in backward order), then the regather of its parameters; finally the
// accumulated gradients are zeroed for the next step.
void Lowering::step_end() {
  if (stage_.mirror_group >= 0) {
    // DualPipe: once every gradient is final, one all-reduce with the rank
    // holding the other copies sums the two copies' 1/g_o gradient shards
    // (both ranks hold the same two virtual stages), then every update.
    std::int64_t bytes = 0;
    for (auto [u, ev] : reduced_) {
      for (const auto& c : classes_) bytes += acc_ * c.owned[u] / c.sh.optim;
    }
    b_.collective(rs_, "dualpipe.copies_grad_allreduce", CollectiveKind::AllReduce, stage_.mirror_group, Bytes(bytes),
                  opt_.grad_dtype, core::OpRole::GradReduce, core::ParamClass::Dense);
    const int summed = b_.record(rs_, "dualpipe.copies_summed");
    for (auto& r : reduced_) r.second = summed;
  }
  for (auto [u, ev] : reduced_) optimizer_step(u, ev);
  // Offloaded: the gradients are zeroed (and a broadcast sends updates) once
  // every update is back on the device.
  if (uploaded_ >= 0) b_.wait(comp_, uploaded_, "wait updated");
  broadcast_updated();
  std::int64_t grads = 0;
  for (const auto& c : classes_) {
    for (auto o : c.owned) grads += acc_ * o / c.sh.grad;
  }
  b_.compute(comp_, "zero_grads", ComputeKind::Elementwise, Flops(0), Bytes(grads), opt_.grad_dtype,
             core::OpRole::ZeroGrads, core::ParamClass::None);
}

// A stack that regathers by broadcast: once every unit is updated, each of
// the g_o / g_p owners of a regather group broadcasts its whole updated shard
// (every unit's 1/g_o) to the group, one after another.
void Lowering::broadcast_updated() {
  if (stack_.collectives.regather != stacks::Regather::Broadcast || opt_.overlap_param_gather) return;
  bool waited = false;
  for (const auto& c : classes_) {
    const int owners = c.sh.optim / c.sh.param;
    if (owners <= 1) continue;
    std::int64_t owned = 0;
    for (auto o : c.owned) owned += o;
    if (owned == 0) continue;
    if (!waited) {
      b_.wait(ag_, b_.record(comp_, "updated"), "wait updated");
      waited = true;
    }
    for (int r = 0; r < owners; ++r) {
      b_.collective(ag_, fmt::format("params{}.broadcast.{}", c.tag, r), CollectiveKind::Broadcast, c.groups.regather,
                    Bytes(2 * owned / c.sh.optim), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
    }
  }
  if (!waited) return;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (regathers(u)) params_to_host(u, ag_);
  }
}

// Adam on unit u's 1/g_o shards once its final gradients (event `ev`, -1:
// already in order) are there; without --overlap-param-gather the 1/g_o ->
// 1/g_p regather follows on the parameter stream.
void Lowering::optimizer_step(std::size_t u, int ev) {
  const auto& unit = *units_[u].u;
  const int uploaded = opt_.offload_optimizer ? host_optimizer_step(u, ev) : -1;
  if (ev >= 0 && uploaded < 0) b_.wait(comp_, ev, fmt::format("wait {}.grads_final", unit.name));
  if (uploaded < 0) alloc_updated(u, comp_);
  bool regather = false;
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    const std::int64_t shard = c.owned[u] / c.sh.optim;
    if (uploaded < 0) {
      b_.compute(comp_, fmt::format("{}{}.adam", unit.name, c.tag), ComputeKind::Optimizer,
                 Flops(12.0 * static_cast<double>(shard)), Bytes(kAdamBytesPerParam * shard), Dtype::Fp32,
                 core::OpRole::Optimizer, c.cls);
    }
    regather = regather || c.sh.optim / c.sh.param > 1;
  }
  const bool broadcast = stack_.collectives.regather == stacks::Regather::Broadcast;
  if (!regather || opt_.overlap_param_gather || broadcast) {
    // Offloaded parameters: the update goes to the host now (after the
    // broadcasts when the stack regathers by broadcast).
    if (!(regather && broadcast)) params_to_host(u, uploaded >= 0 ? h2d_ : comp_);
    return;
  }
  int done = uploaded >= 0 ? uploaded : b_.record(comp_, fmt::format("{}.updated", unit.name));
  b_.wait(ag_, done, fmt::format("wait {}.updated", unit.name));
  regather_collectives(u);
  params_to_host(u, ag_);
}

}  // namespace hzp::plan::detail
