// StackSpec reading and the stack catalog (see stack_spec.hpp).
#include "stacks/stack_spec.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "stacks/catalog_data.hpp"

namespace hzp::stacks {
namespace {

using core::choose;
using core::StrictObject;

core::KernelCost kernel_cost(StrictObject o) {
  core::KernelCost k;
  k.kernels = static_cast<int>(o.integer("kernels", 0, 1000));
  k.bytes_per_element = o.number("bytes_per_element", 0, 1e4);
  o.finish();
  return k;
}

core::OpKernels op_kernels(StrictObject o) {
  core::OpKernels k;
  k.forward = kernel_cost(o.object("forward"));
  k.backward = kernel_cost(o.object("backward"));
  o.finish();
  return k;
}

core::NonGemmKernels non_gemm_ops(StrictObject o) {
  core::NonGemmKernels n;
  n.norm = op_kernels(o.object("norm"));
  n.rope = op_kernels(o.object("rope"));
  n.swiglu = op_kernels(o.object("swiglu"));
  n.gelu = op_kernels(o.object("gelu"));
  n.residual = op_kernels(o.object("residual"));
  n.loss = op_kernels(o.object("loss"));
  n.embedding = op_kernels(o.object("embedding"));
  n.repeat_kv = o.boolean("repeat_kv");
  o.finish();
  return n;
}

// Knobs a file may leave out: the value keeps its default (the member's
// initializer in stack_spec.hpp) unless the key is there, so a new knob is a
// member with its default and one read_knob line, and no catalog file has to
// name it. The schema marks them optional (the reader probes them with has()).
template <class E, std::size_t N>
void read_knob(StrictObject& o, const std::string& key, const core::Names<E, N>& table, E& value) {
  if (o.has_or_default(key, std::string(core::name_of(table, value)))) value = choose(o, key, table);
}
void read_knob(StrictObject& o, const std::string& key, bool& value) {
  if (o.has_or_default(key, value)) value = o.boolean(key);
}
void read_knob(StrictObject& o, const std::string& key, double min, double max, double& value) {
  if (o.has_or_default(key, value)) value = o.number(key, min, max);
}
void read_knob(StrictObject& o, const std::string& key, int min, int max, int& value) {
  if (o.has_or_default(key, value)) value = static_cast<int>(o.integer(key, min, max));
}

Collectives collectives(StrictObject o) {
  Collectives c;
  read_knob(o, "gather", kGranularities, c.gather);
  read_knob(o, "reduce", kGranularities, c.reduce);
  read_knob(o, "bucket_MB", 0, 1e6, c.bucket_MB);
  // NCCL buckets below a megabyte are latency all the way; a stack that cuts
  // that fine would turn one unit into thousands of collectives.
  if ((c.gather == Granularity::Bucket || c.reduce == Granularity::Bucket) && c.bucket_MB < 1)
    o.fail("bucket_MB", "expected a bucket of at least 1 MB when a granularity is \"bucket\"");
  read_knob(o, "copy_in", c.copy_in);
  read_knob(o, "copy_out", c.copy_out);
  read_knob(o, "grad_copy_in", c.grad_copy_in);
  read_knob(o, "int8_weights", c.int8_weights);
  read_knob(o, "int4_gradients", c.int4_gradients);
  read_knob(o, "step_reduction", kStepReductions, c.step_reduction);
  read_knob(o, "regather", kRegathers, c.regather);
  o.finish();
  return c;
}

HostCosts host_costs(StrictObject o) {
  HostCosts h;
  read_knob(o, "kernel_us", 0, 1e6, h.kernel_us);
  read_knob(o, "collective_us", 0, 1e6, h.collective_us);
  read_knob(o, "event_us", 0, 1e6, h.event_us);
  read_knob(o, "alloc_us", 0, 1e6, h.alloc_us);
  read_knob(o, "sync_us", 0, 1e6, h.sync_us);
  o.finish();
  return h;
}

Overlap overlap(StrictObject o) {
  Overlap v;
  read_knob(o, "background_threads", v.background_threads);
  read_knob(o, "max_inflight_gathers", 0, 64, v.max_inflight_gathers);
  read_knob(o, "prefetch_MB", 0, 1e9, v.prefetch_MB);
  read_knob(o, "tp_gemm_streams", 1, 16, v.tp_gemm_streams);
  read_knob(o, "tp_gather_cut", kTpOverlapCuts, v.tp_gather_cut);
  read_knob(o, "tp_scatter_cut", kTpOverlapCuts, v.tp_scatter_cut);
  read_knob(o, "tp_bulk_backward", v.tp_bulk_backward);
  o.finish();
  return v;
}

// A list of names, each one of `allowed` and none twice.
std::vector<std::string> names_of(StrictObject& o, const std::string& key, const std::vector<std::string>& allowed,
                                  bool may_be_empty) {
  const nlohmann::json& a = o.array(key);
  std::vector<std::string> out;
  std::string all;
  for (const auto& n : allowed) all += (all.empty() ? "" : "|") + n;
  for (const auto& v : a) {
    const bool known =
        v.is_string() && std::find(allowed.begin(), allowed.end(), v.get<std::string>()) != allowed.end();
    if (!known) o.fail(key, fmt::format("expected a list of {}, got {}", all, v.dump()));
    if (std::find(out.begin(), out.end(), v.get<std::string>()) != out.end()) {
      o.fail(key, fmt::format("expected each name once, got {} twice", v.dump()));
    }
    out.push_back(v.get<std::string>());
  }
  if (out.empty() && !may_be_empty) o.fail(key, "expected at least one name");
  return out;
}

}  // namespace

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> n = {"ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp", "hsdp2", "hpz", "hzp"};
  return n;
}

const std::vector<std::string>& parallelism_names() {
  static const std::vector<std::string> n = {"tp", "pp", "cp", "ep", "ulysses"};
  return n;
}

StackSpec stack_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  StrictObject o(j, file);
  core::require_schema_version(o, kStackSchemaVersion);
  StackSpec s;
  s.name = o.name("name");
  s.source = o.str("source");
  s.ops = non_gemm_ops(o.object("ops"));
  read_knob(o, "attention", core::kAttentionKernels, s.attention);
  read_knob(o, "selective_recompute", core::kSelectivePolicies, s.selective);
  read_knob(o, "unfused_loss", core::kUnfusedLosses, s.unfused_loss);
  read_knob(o, "fp8_saved_inputs", core::kFp8SavedInputs, s.fp8_saved_inputs);
  if (o.has("collectives")) s.collectives = collectives(o.object("collectives"));
  if (o.has("host")) s.host = host_costs(o.object("host"));
  if (o.has("overlap")) s.overlap = overlap(o.object("overlap"));
  read_knob(o, "allocator", kAllocators, s.allocator);
  if (o.has("runs")) {
    StrictObject r = o.object("runs");
    s.runs.strategies = names_of(r, "strategies", strategy_names(), false);
    if (r.has("parallelism")) s.runs.parallelism = names_of(r, "parallelism", parallelism_names(), true);
    s.runs.source = r.str("source");
    r.finish();
  }
  o.finish();
  return s;
}

std::vector<std::string> stack_catalog_names() { return core::catalog_names(stack_catalog()); }

std::pair<std::string, std::string> stack_text(const std::string& name_or_path) {
  return core::catalog_text(stack_catalog(), name_or_path, "stack", "stacks/catalog");
}

StackSpec load_stack(const std::string& name_or_path) {
  auto [text, file] = stack_text(name_or_path);
  return stack_from_json(text, file);
}

std::shared_ptr<const Stack> resolve_stack(const std::string& name_or_path) {
  if (name_or_path == kDefaultStack) return default_stack();
  auto [text, file] = stack_text(name_or_path);
  return stack_from_text(text, file);
}

std::shared_ptr<const Stack> stack_from_text(const std::string& text, const std::string& file) {
  auto s = std::make_shared<Stack>();
  s->spec = stack_from_json(text, file);
  s->file = file;
  s->sha256 = core::sha256_hex(text);
  return s;
}

const std::shared_ptr<const Stack>& default_stack() {
  static const std::shared_ptr<const Stack> s = [] {
    auto [text, file] = stack_text(kDefaultStack);
    return stack_from_text(text, file);
  }();
  return s;
}

}  // namespace hzp::stacks
