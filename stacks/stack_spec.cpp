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

Granularity granularity(StrictObject& o, const std::string& key) { return choose(o, key, kGranularities); }

Collectives collectives(StrictObject o) {
  Collectives c;
  c.gather = granularity(o, "gather");
  c.reduce = granularity(o, "reduce");
  c.bucket_MB = o.number("bucket_MB", 0, 1e6);
  // NCCL buckets below a megabyte are latency all the way; a stack that cuts
  // that fine would turn one unit into thousands of collectives.
  if ((c.gather == Granularity::Bucket || c.reduce == Granularity::Bucket) && c.bucket_MB < 1)
    o.fail("bucket_MB", "expected a bucket of at least 1 MB when a granularity is \"bucket\"");
  c.copy_in = o.boolean("copy_in");
  c.copy_out = o.boolean("copy_out");
  c.grad_copy_in = o.boolean("grad_copy_in");
  c.int8_weights = o.boolean("int8_weights");
  c.int4_gradients = o.boolean("int4_gradients");
  c.step_reduction = choose(o, "step_reduction", kStepReductions);
  c.regather = choose(o, "regather", kRegathers);
  o.finish();
  return c;
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
  s.attention = choose(o, "attention", core::kAttentionKernels);
  s.selective = choose(o, "selective_recompute", core::kSelectivePolicies);
  if (o.has("unfused_loss")) s.unfused_loss = choose(o, "unfused_loss", core::kUnfusedLosses);
  if (o.has("fp8_saved_inputs")) s.fp8_saved_inputs = choose(o, "fp8_saved_inputs", core::kFp8SavedInputs);
  s.collectives = collectives(o.object("collectives"));
  {
    StrictObject h = o.object("host");
    s.host.kernel_us = h.number("kernel_us", 0, 1e6);
    s.host.collective_us = h.number("collective_us", 0, 1e6);
    h.finish();
  }
  {
    StrictObject v = o.object("overlap");
    s.overlap.background_threads = v.boolean("background_threads");
    s.overlap.max_inflight_gathers = static_cast<int>(v.integer("max_inflight_gathers", 0, 64));
    s.overlap.prefetch_MB = v.number("prefetch_MB", 0, 1e9);
    if (v.has("tp_gemm_streams")) s.overlap.tp_gemm_streams = static_cast<int>(v.integer("tp_gemm_streams", 1, 16));
    v.finish();
  }
  s.allocator = choose(o, "allocator", kAllocators);
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
