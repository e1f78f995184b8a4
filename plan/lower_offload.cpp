// Offload to host memory over the device's host link (PCIe or NVLink-C2C; the
// cluster's node.host): the optimizer, as ZeRO-Offload does it (Ren et al.
// 2021, arXiv:2101.06840: fp32 master weights and Adam moments on the host,
// gradients down once a step, Adam on the CPU, bf16 parameters back up); the
// parameters, as ZeRO-Infinity does it (Rajbhandari et al. 2021,
// arXiv:2104.07857: each rank's 1/g_p shard on the host, up before every use
// that gathers it, the update down at the step's end); and the activations a
// unit keeps for its backward (down after its forward, back up one backward
// ahead). Copies run on their own streams, one per direction (each direction
// of the link in order), the CPU's Adam on a third; all are compute ops of
// kinds HostCopy and HostOptimizer, which the engines cost at the host link
// and the host memory bandwidth.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>

#include "plan/stage_lowering.hpp"

namespace hzp::plan::detail {

using core::Bytes;
using core::ComputeKind;
using core::Dtype;
using core::Flops;
using core::StreamKind;

HostOffload::HostOffload(StageContext& c, const std::vector<RankParams>& classes)
    : c_(c), classes_(classes), acc_(core::dtype_bytes(c.opt.grad_dtype)) {}

void HostOffload::add_streams(int thread) {
  if (!c_.opt.offload_optimizer && !c_.opt.offload_activations && !c_.opt.offload_params) return;
  d2h_ = c_.b.add_stream("offload_d2h", StreamKind::Offload, thread);
  h2d_ = c_.b.add_stream("offload_h2d", StreamKind::Offload, thread);
  if (c_.opt.offload_optimizer) cpu_ = c_.b.add_stream("cpu_adam", StreamKind::Offload, thread);
}

// Host memory of the offloaded optimizer per rank: for each parameter of the
// 1/g_o shard the optimizer states, the upload's bf16 staging (none when the
// offloaded parameters take the update in place) and the landing buffer of
// the gradient (grad_dtype).
std::int64_t HostOffload::host_state_bytes() const {
  if (!c_.opt.offload_optimizer) return 0;
  std::int64_t n = 0;
  for (const auto& c : classes_) {
    std::int64_t owned = 0;
    for (auto o : c.owned) owned += o;
    // Offloaded parameters updated in place need no staging buffer of their own.
    const std::int64_t staging = c.host && updated_on_host(c) ? 2 : 0;
    n += (kHostStateBytesPerParam - staging + acc_) * owned / c.sh.optim;
  }
  return n;
}

// Bytes a parameter of the host's copy: the FP8 weights themselves with
// fp8_param_gather, else bf16.
namespace {
std::int64_t param_bytes(const PlanOptions& o) { return o.fp8_param_gather ? 1 : 2; }
Dtype param_dtype(const PlanOptions& o) { return o.fp8_param_gather ? Dtype::Fp8 : Dtype::Bf16; }
}  // namespace

// Host memory of the offloaded parameters per rank: every unit's 1/g_p shard.
std::int64_t HostOffload::host_param_bytes() const {
  std::int64_t n = 0;
  for (const auto& c : classes_) {
    if (!c.host) continue;
    for (auto o : c.owned) n += param_bytes(c_.opt) * o / c.sh.param;
  }
  return n;
}

std::int64_t HostOffload::host_bytes() const { return host_state_bytes() + host_param_bytes() + host_act_peak_; }

// Offloaded parameters before a gathering use j: each class's 1/g_p shard of
// the unit host -> device, into its place in the gathered buffer, once the
// parameter stream has that buffer; the all-gathers (g_p > 1) wait for it.
void HostOffload::fetch_params(std::size_t j, int param_stream) {
  if (!c_.opt.offload_params) return;
  const Use& use = c_.uses[j];
  const auto& unit = *c_.units[use.unit].u;
  const char* pass = use.backward ? "bwd" : "fwd";
  c_.b.wait(h2d_, c_.b.record(param_stream, c_.b.op_name("{}.buffer_ready", unit.name)),
            c_.b.op_name("wait {}.buffer_ready", unit.name));
  for (const auto& c : classes_) {
    if (!c.gathers(use.unit)) continue;
    c_.b.compute(h2d_, c_.b.op_name("{}{}.params_to_device.{}", unit.name, c.tag, pass), ComputeKind::HostCopy,
                 Flops(0), Bytes(param_bytes(c_.opt) * c.padded[use.unit] / c.sh.param), param_dtype(c_.opt),
                 core::OpRole::ParamGather, c.cls);
  }
  c_.b.wait(param_stream, c_.b.record(h2d_, c_.b.op_name("{}.params_fetched", unit.name)),
            c_.b.op_name("wait {}.params_fetched", unit.name));
}

// Whether class c's update lands in host memory by itself: the CPU's Adam
// writes the offloaded 1/g_p shard in place when it is the 1/g_o shard.
bool HostOffload::updated_on_host(const RankParams& c) const {
  return c_.opt.offload_optimizer && c.sh.optim == c.sh.param;
}

// The device buffer an offloaded unit's updated 1/g_p shards pass through on
// their way to the host (the update's output, then the regather's).
Bytes HostOffload::updated_bytes(std::size_t u) const {
  std::int64_t n = 0;
  for (const auto& c : classes_) {
    if (c.host && !updated_on_host(c)) n += param_bytes(c_.opt) * c.owned[u] / c.sh.param;
  }
  return Bytes(n);
}

void HostOffload::alloc_updated(std::size_t u, int stream) {
  if (updated_bytes(u).count() == 0) return;
  c_.b.alloc(stream, fmt::format("{}.updated_params", c_.units[u].u->name), updated_bytes(u),
             core::BufferClass::Gathered);
}

// Offloaded parameters after unit u's update (the last op on `stream`
// completes it): each class's updated 1/g_p shard device -> host, then the
// staging buffer is freed.
void HostOffload::params_to_host(std::size_t u, int stream) {
  if (updated_bytes(u).count() == 0) return;
  const auto& unit = *c_.units[u].u;
  c_.b.wait(d2h_, c_.b.record(stream, c_.b.op_name("{}.params_updated", unit.name)),
            c_.b.op_name("wait {}.params_updated", unit.name));
  for (const auto& c : classes_) {
    if (!c.host || updated_on_host(c) || c.owned[u] == 0) continue;
    c_.b.compute(d2h_, c_.b.op_name("{}{}.params_to_host", unit.name, c.tag), ComputeKind::HostCopy, Flops(0),
                 Bytes(param_bytes(c_.opt) * c.owned[u] / c.sh.param), param_dtype(c_.opt), core::OpRole::ParamGather,
                 c.cls);
  }
  c_.b.free(d2h_, fmt::format("{}.updated_params", unit.name), updated_bytes(u));
}

// Unit u's optimizer step on the host once its final gradients are there
// (event `ev`; -1: in compute-stream order): its 1/g_o gradients device ->
// host, CPU Adam (after the whole backward pass), its updated bf16 1/g_o
// parameters host -> device. Returns the event of the upload.
int HostOffload::host_optimizer_step(std::size_t u, int ev) {
  const auto& unit = *c_.units[u].u;
  if (ev < 0) ev = c_.b.record(c_.comp, fmt::format("{}.grads_final", unit.name));
  c_.b.wait(d2h_, ev, c_.b.op_name("wait {}.grads_final", unit.name));
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    c_.b.compute(d2h_, c_.b.op_name("{}{}.grads_to_host", unit.name, c.tag), ComputeKind::HostCopy, Flops(0),
                 Bytes(acc_ * c.owned[u] / c.sh.optim), c_.opt.grad_dtype, core::OpRole::GradReduce, c.cls);
  }
  // As ZeRO-Offload without its one-step delayed update: the CPU steps once
  // the backward pass is over (the gradients' copies overlap it).
  if (uploaded_ < 0) c_.b.wait(cpu_, c_.b.record(c_.comp, "backward_done"), "wait backward_done");
  c_.b.wait(cpu_, c_.b.record(d2h_, c_.b.op_name("{}.grads_on_host", unit.name)),
            c_.b.op_name("wait {}.grads_on_host", unit.name));
  for (const auto& c : classes_) {
    if (c.owned[u] == 0) continue;
    const std::int64_t shard = c.owned[u] / c.sh.optim;
    c_.b.compute(cpu_, c_.b.op_name("{}{}.cpu_adam", unit.name, c.tag), ComputeKind::HostOptimizer,
                 Flops(12.0 * static_cast<double>(shard)), Bytes((kCpuAdamBytesPerParam + acc_) * shard), Dtype::Fp32,
                 core::OpRole::Optimizer, c.cls);
  }
  c_.b.wait(h2d_, c_.b.record(cpu_, c_.b.op_name("{}.stepped", unit.name)), c_.b.op_name("wait {}.stepped", unit.name));
  alloc_updated(u, h2d_);
  for (const auto& c : classes_) {
    if (c.owned[u] == 0 || (c.host && updated_on_host(c))) continue;  // offloaded and updated in place
    c_.b.compute(h2d_, c_.b.op_name("{}{}.params_to_device", unit.name, c.tag), ComputeKind::HostCopy, Flops(0),
                 Bytes(2 * c.owned[u] / c.sh.optim), Dtype::Bf16, core::OpRole::ParamGather, c.cls);
  }
  uploaded_ = c_.b.record(h2d_, c_.b.op_name("{}.updated", unit.name));
  return uploaded_;
}

// Whether forward use j sends its activations to the host: the unit keeps
// some, and its backward does not follow right away (the head's).
bool HostOffload::offloads(std::size_t j) const {
  const Use& use = c_.uses[j];
  if (!c_.opt.offload_activations || c_.split_backward() || use.backward ||
      c_.units[use.unit].u->activations.count() == 0) {
    return false;
  }
  const bool next_is_own_backward = j + 1 < c_.uses.size() && c_.uses[j + 1].backward &&
                                    c_.uses[j + 1].unit == use.unit && c_.uses[j + 1].mb == use.mb;
  return !next_is_own_backward;
}

// After forward use j: its activations go to the host once the forward is
// done, and leave the device when they are there.
void HostOffload::offload_activations(std::size_t j) {
  if (!offloads(j)) return;
  const Use& use = c_.uses[j];
  const auto& unit = *c_.units[use.unit].u;
  c_.b.wait(d2h_, c_.use_done[j], c_.b.op_name("wait {}.fwd_done", unit.name));
  c_.b.compute(d2h_, c_.b.op_name("act.u{}.mb{}.to_host", use.unit, use.mb), ComputeKind::HostCopy, Flops(0),
               unit.activations, Dtype::Bf16, core::OpRole::Other, core::ParamClass::None);
  c_.b.free(d2h_, fmt::format(FMT_COMPILE("act.u{}.mb{}"), use.unit, use.mb), unit.activations);
  act_on_host_[{use.unit, use.mb}] = c_.b.record(d2h_, c_.b.op_name("act.u{}.mb{}.on_host", use.unit, use.mb));
  host_act_ += unit.activations.count();
  host_act_peak_ = std::max(host_act_peak_, host_act_);
}

// Backward use j's activations back from the host (once), into a buffer of
// their own, not before event `after` (a backward's start on the device).
void HostOffload::issue_fetch(std::size_t j, int after) {
  const Use& use = c_.uses[j];
  const auto on_host = act_on_host_.find({use.unit, use.mb});
  if (on_host == act_on_host_.end() || act_fetched_.contains({use.unit, use.mb})) return;
  const auto& unit = *c_.units[use.unit].u;
  c_.b.wait(h2d_, after, "wait backward started");
  c_.b.wait(h2d_, on_host->second, c_.b.op_name("wait act.u{}.mb{}.on_host", use.unit, use.mb));
  const std::string name = fmt::format(FMT_COMPILE("act.u{}.mb{}.fetched"), use.unit, use.mb);
  c_.b.alloc(h2d_, name, unit.activations, core::BufferClass::Activations);
  c_.b.compute(h2d_, c_.b.op_name("act.u{}.mb{}.to_device", use.unit, use.mb), ComputeKind::HostCopy, Flops(0),
               unit.activations, Dtype::Bf16, core::OpRole::Other, core::ParamClass::None);
  act_fetched_[{use.unit, use.mb}] = c_.b.record(h2d_, name);
}

// Before backward use j: its activations (fetched now if not yet), and the
// next backward use's, so that the copy overlaps this backward. Fetches wait
// for the device to start backward use j: the host issues far ahead, and
// otherwise every activation would come back as soon as it had left.
void HostOffload::fetch_activations(std::size_t j) {
  if (!c_.opt.offload_activations) return;
  const Use& use = c_.uses[j];
  const int started = c_.b.record(c_.comp, fmt::format("{}.bwd_start", c_.units[use.unit].u->name));
  issue_fetch(j, started);
  for (std::size_t k = j + 1; k < c_.uses.size(); ++k) {
    if (!c_.uses[k].backward) continue;
    issue_fetch(k, started);
    break;
  }
  if (auto it = act_fetched_.find({use.unit, use.mb}); it != act_fetched_.end()) {
    c_.b.wait(c_.comp, it->second, c_.b.op_name("wait act.u{}.mb{}.fetched", use.unit, use.mb));
  }
}

// After backward use j: its activations leave the device (and the host).
void HostOffload::release_activations(std::size_t j) {
  const Use& use = c_.uses[j];
  const auto& unit = *c_.units[use.unit].u;
  if (!act_fetched_.contains({use.unit, use.mb})) {
    c_.b.free(c_.comp, fmt::format(FMT_COMPILE("act.u{}.mb{}"), use.unit, use.mb), unit.activations);
    return;
  }
  c_.b.free(c_.comp, fmt::format(FMT_COMPILE("act.u{}.mb{}.fetched"), use.unit, use.mb), unit.activations);
  host_act_ -= unit.activations.count();
}

}  // namespace hzp::plan::detail
