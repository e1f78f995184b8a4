// The plan option table (see options.hpp).
#include "plan/options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

namespace hzp::plan {
namespace {

using core::OptionSpec;
using core::ValueType;
using json = nlohmann::json;

OptionSpec spec(std::string key, ValueType type, std::string help, double min = 0, double max = 0) {
  return core::option_spec(std::move(key), type, std::move(help), min, max);
}

// A Boolean with the flag that sets it and the one that clears it.
OptionSpec flags(OptionSpec s, std::string on, std::string off) {
  s.flag = std::move(on);
  s.false_flag = std::move(off);
  return s;
}

// The field's own spellings of the flag (Megatron-LM's long flags).
OptionSpec aka(OptionSpec s, std::vector<std::string> aliases) {
  s.flag_aliases = std::move(aliases);
  return s;
}

OptionSpec optional_in_file(OptionSpec s) {
  s.required_in_file = false;
  return s;
}

OptionSpec nullable(OptionSpec s) {
  s.nullable = true;
  return s;
}

// A plain field: integer, number or bool, read and written as itself.
template <auto Member>
PlanOption field(OptionSpec s) {
  return PlanOption{std::move(s), [](const PlanOptions& o) -> json { return o.*Member; },
                    [](PlanOptions& o, const json& v) {
                      using T = std::remove_cvref_t<decltype(o.*Member)>;
                      o.*Member = v.get<T>();
                    }};
}

// A nullable field (std::optional): null when unset.
template <auto Member>
PlanOption optional_field(OptionSpec s) {
  return PlanOption{std::move(nullable(std::move(s))),
                    [](const PlanOptions& o) -> json {
                      const auto& v = o.*Member;
                      return v ? json(*v) : json();
                    },
                    [](PlanOptions& o, const json& v) {
                      using T = typename std::remove_cvref_t<decltype(o.*Member)>::value_type;
                      o.*Member = v.is_null() ? std::nullopt : std::optional<T>(v.get<T>());
                    }};
}

constexpr double kGroup = 1 << 20;  // the largest group size a plan may name
constexpr double kModelParallel = 1 << 12;

// The data-parallel plan: strategy, group sizes, issue mode, resharding, prefetch.
void add_sharding_options(std::vector<PlanOption>& t) {
  {
    OptionSpec s =
        spec("strategy", ValueType::Choice,
             "the data-parallel plan (g_p, g_g, g_o): ddp (1,1,1), zero1 (1,1,DP), zero2 (1,DP,DP), "
             "fsdp = zero3 (DP,DP,DP), hsdp (S,S,S), hsdp2 (1,S,S), hpz (node or param_shard,DP,DP), hzp (any); "
             "PyTorch FSDP's names: NO_SHARD = ddp, SHARD_GRAD_OP = zero2 (the same bytes and peak memory; PyTorch "
             "gathers each unit before its forward), FULL_SHARD = fsdp, HYBRID_SHARD = hsdp, _HYBRID_SHARD_ZERO2 = "
             "hsdp2; DeepSpeed's ZeRO stages 0-3 (--zero-stage N) = ddp, zero1, zero2, zero3");
    s.choices = core::names(kStrategies);
    // DeepSpeed's name for fsdp (parse_strategy), listed before it.
    s.choices.insert(std::find(s.choices.begin(), s.choices.end(), "fsdp"), "zero3");
    // PyTorch FSDP's ShardingStrategy names, DeepSpeed's stage numbers, and Megatron-LM's distributed optimizer.
    s.choice_aliases = {{"NO_SHARD", "ddp"},
                        {"SHARD_GRAD_OP", "zero2"},
                        {"FULL_SHARD", "fsdp"},
                        {"HYBRID_SHARD", "hsdp"},
                        {"_HYBRID_SHARD_ZERO2", "hsdp2"},
                        {"0", "ddp"},
                        {"1", "zero1"},
                        {"2", "zero2"},
                        {"3", "fsdp"}};
    s.flag_aliases = {"--zero-stage"};
    s.value_flags = {{"--use-distributed-optimizer", "zero1"}};
    t.push_back({s, [](const PlanOptions& o) -> json { return std::string(to_string(o.strategy)); },
                 [](PlanOptions& o, const json& v) { o.strategy = *parse_strategy(v.get<std::string>()); }});
  }
  t.push_back(field<&PlanOptions::param_shard>(aka(
      spec("param_shard", ValueType::Integer,
           "hzp: g_p, ranks the bf16 parameters are sharded over (hsdp: S; hpz: DeepSpeed's hpZ partition size); 0: "
           "the strategy's default",
           0, kGroup),
      {"--zero-hpz-partition-size"})));
  t.push_back(field<&PlanOptions::grad_shard>(
      spec("grad_shard", ValueType::Integer,
           "hzp: g_g, ranks the accumulated gradients are sharded over; 0: the strategy's default", 0, kGroup)));
  t.push_back(field<&PlanOptions::optim_shard>(
      spec("optim_shard", ValueType::Integer,
           "hzp: g_o, ranks the fp32 master weights and Adam moments are sharded over; 0: the strategy's default", 0,
           kGroup)));
  t.push_back({nullable(flags(spec("async", ValueType::Boolean,
                                   "background issue threads and pooled buffers (true) or collectives issued inline "
                                   "with the caching allocator (false); null: true for hzp, false for the presets"),
                              "--async", "--no-async")),
               [](const PlanOptions& o) -> json { return o.async ? json(*o.async) : json(); },
               [](PlanOptions& o, const json& v) {
                 o.async = v.is_null() ? std::nullopt : std::optional<bool>(v.get<bool>());
               }});
  t.push_back(field<&PlanOptions::reshard_after_forward>(
      flags(spec("reshard_after_forward", ValueType::Boolean,
                 "free gathered parameters after forward and gather them again for backward (false: keep them)"),
            "--reshard-after-forward", "--keep-gathered")));
  t.push_back(field<&PlanOptions::prefetch_depth>(
      spec("prefetch_depth", ValueType::Integer, "parameter all-gathers in flight ahead of compute", 0, 64)));
}

// The pipeline schedule: a Choice, optional in plan files (1f1b when absent).
PlanOption pipeline_schedule_option() {
  OptionSpec s = optional_in_file(
      spec("pipeline_schedule", ValueType::Choice,
           "pipeline schedule: 1f1b (interleaved when vpp > 1), or a zero-bubble schedule (Qi et al. 2024) that "
           "splits each backward into input and weight gradients and defers the weight gradients into the "
           "bubbles: zb-h1 (vpp 1, 1F1B's peak activations) or zb-v (vpp 2, chunks in a V); or dualpipe "
           "(DeepSeek-V3: vpp 1, pp even, each stage also holds its mirror stage's copy, micro-batches from both "
           "ends, B and W split)"));
  s.choices.clear();
  for (const PipelineScheduleTraits& t : pipeline_schedules()) s.choices.emplace_back(t.name);
  return {s, [](const PlanOptions& o) -> json { return std::string(to_string(o.pipeline_schedule)); },
          [](PlanOptions& o, const json& v) { o.pipeline_schedule = *parse_pipeline_schedule(v.get<std::string>()); }};
}

// Megatron model parallelism and the overlaps of its communication.
void add_model_parallel_options(std::vector<PlanOption>& t) {
  t.push_back(field<&PlanOptions::tp>(aka(
      spec("tp", ValueType::Integer, "tensor-parallel size (Megatron, with sequence parallelism)", 1, kModelParallel),
      {"--tensor-model-parallel-size"})));
  t.push_back(field<&PlanOptions::sequence_parallel>(
      flags(spec("sequence_parallel", ValueType::Boolean,
                 "tensor parallelism with sequence parallelism (false: all-reduces)"),
            "--sequence-parallel", "--no-sequence-parallel")));
  t.push_back(field<&PlanOptions::pp>(aka(spec("pp", ValueType::Integer, "pipeline stages (1F1B)", 1, kModelParallel),
                                          {"--pipeline-model-parallel-size"})));
  t.push_back(field<&PlanOptions::vpp>(
      aka(spec("vpp", ValueType::Integer, "virtual stages per pipeline rank (interleaved 1F1B when > 1)", 1, 1 << 10),
          {"--virtual-pipeline-model-parallel-size"})));
  t.push_back(optional_field<&PlanOptions::first_stage_layers>(optional_in_file(
      aka(spec("first_stage_layers", ValueType::Integer,
               "transformer layers on the first pipeline stage (uneven pipelines; the rest split evenly over the "
               "stages between); null: even",
               0, 1 << 20),
          {"--decoder-first-pipeline-num-layers"}))));
  t.push_back(optional_field<&PlanOptions::last_stage_layers>(optional_in_file(
      aka(spec("last_stage_layers", ValueType::Integer,
               "transformer layers on the last pipeline stage (uneven pipelines); null: even", 0, 1 << 20),
          {"--decoder-last-pipeline-num-layers"}))));
  {
    OptionSpec s = optional_in_file(
        spec("pipeline_layout", ValueType::Text,
             "Megatron's pipeline layout: the pp x vpp virtual stages in order, separated by '|', each a run of E "
             "(embedding), t (transformer layer) and L (head and loss); X*N and (...)*N repeat, e.g. "
             "\"Et*7|(t*8|)*14t*7L\" for 126 layers on 16 stages; null: even or first/last_stage_layers"));
    s.unit = "layout text";
    s.flag_aliases = {"--pipeline-model-parallel-layout"};
    t.push_back(optional_field<&PlanOptions::pipeline_layout>(s));
  }
  t.push_back(field<&PlanOptions::cp>(
      aka(spec("cp", ValueType::Integer, "context-parallel size (ring attention; sequences split over cp ranks)", 1,
               kModelParallel),
          {"--context-parallel-size"})));
  t.push_back(field<&PlanOptions::ulysses>(optional_in_file(
      aka(spec("ulysses", ValueType::Integer,
               "DeepSpeed-Ulysses sequence-parallel size (sequences split over ulysses ranks, all-to-all to "
               "heads / ulysses heads around attention; composes with cp)",
               1, kModelParallel),
          {"--ds-sequence-parallel-size", "--ulysses-degree"}))));
  t.push_back(field<&PlanOptions::tp_comm_overlap>(
      flags(spec("tp_comm_overlap", ValueType::Boolean,
                 "pipeline tensor-parallel all-gathers/reduce-scatters with their GEMMs in chunks"),
            "--tp-comm-overlap", "--no-tp-comm-overlap")));
  t.push_back(field<&PlanOptions::overlap_param_gather>(
      flags(spec("overlap_param_gather", ValueType::Boolean,
                 "steady state: the 1/g_o -> 1/g_p parameter all-gather overlaps the next forward"),
            "--overlap-param-gather", "--no-overlap-param-gather")));
  t.push_back(field<&PlanOptions::overlap_grad_reduce>(optional_in_file(
      flags(spec("overlap_grad_reduce", ValueType::Boolean,
                 "reduce each unit's final gradients during the backward pass (false: after it, Megatron-LM's "
                 "default)"),
            "--overlap-grad-reduce", "--no-overlap-grad-reduce"))));
  t.push_back(field<&PlanOptions::pipeline_p2p_sync>(optional_in_file(
      flags(spec("pipeline_p2p_sync", ValueType::Boolean,
                 "the host waits for every pipeline receive before issuing more work (Megatron's batch_p2p_sync)"),
            "--pipeline-p2p-sync", "--no-pipeline-p2p-sync"))));
}

// Expert parallelism: ep, its folding (expert_tp) and the experts' own sharding.
void add_expert_options(std::vector<PlanOption>& t) {
  t.push_back(field<&PlanOptions::ep>(
      aka(spec("ep", ValueType::Integer,
               "expert-parallel size for MoE models (experts split over ep data-parallel ranks)", 1, kModelParallel),
          {"--expert-model-parallel-size"})));
  t.push_back(optional_field<&PlanOptions::expert_tp>(optional_in_file(
      aka(spec("expert_tp", ValueType::Integer,
               "expert tensor-parallel size (MoE parallel folding: ep x expert_tp over the stage's tp x cp x dp "
               "ranks, independent of attention's tp); null: tp, ep over data-parallel ranks",
               1, kModelParallel),
          {"--expert-tensor-parallel-size"}))));
  {
    OptionSpec s = nullable(spec("expert_shards", ValueType::Triple,
                                 "expert parameters' own (g_p, g_g, g_o) over the DP / ep expert-data-parallel "
                                 "ranks; null: the dense sizes capped at DP / ep",
                                 1, kGroup));
    s.unit = "text form g_p/g_g/g_o";
    t.push_back({s,
                 [](const PlanOptions& o) -> json {
                   if (!o.expert_shards) return json();
                   return json{o.expert_shards->param, o.expert_shards->grad, o.expert_shards->optim};
                 },
                 [](PlanOptions& o, const json& v) {
                   o.expert_shards =
                       v.is_null()
                           ? std::nullopt
                           : std::optional<ShardSizes>(ShardSizes{v[0].get<int>(), v[1].get<int>(), v[2].get<int>()});
                 }});
  }
}

// Offload to host memory (ZeRO-Offload); optional in files, off by default.
void add_offload_options(std::vector<PlanOption>& t) {
  t.push_back(field<&PlanOptions::offload_optimizer>(optional_in_file(
      flags(spec("offload_optimizer", ValueType::Boolean,
                 "ZeRO-Offload: optimizer states in host memory, gradients to the host once a step, Adam on the "
                 "CPU, updated bf16 parameters back (needs the cluster's node.host)"),
            "--offload-optimizer", "--no-offload-optimizer"))));
  t.push_back(field<&PlanOptions::offload_activations>(optional_in_file(
      flags(spec("offload_activations", ValueType::Boolean,
                 "copy each unit's kept activations to host memory after its forward and back before its backward, "
                 "overlapped on their own streams (needs the cluster's node.host)"),
            "--offload-activations", "--no-offload-activations"))));
  t.push_back(field<&PlanOptions::offload_params>(optional_in_file(
      flags(spec("offload_params", ValueType::Boolean,
                 "ZeRO-Infinity: each rank's bf16 parameter shard in host memory, copied to the device before every "
                 "use that gathers it and the step's update copied back (needs the cluster's node.host)"),
            "--offload-params", "--no-offload-params"))));
}

// Workload variability: rank classes, packed documents, jitter, routing skew.
void add_workload_options(std::vector<PlanOption>& t) {
  t.push_back(field<&PlanOptions::variability_classes>(
      spec("variability_classes", ValueType::Integer,
           "rank classes per stage, each a block of data-parallel ranks that draws the slowest of its ranks' "
           "workloads (documents, jitter)",
           1, kGroup)));
  {
    OptionSpec s = spec("doc_mean_tokens", ValueType::Number,
                        "packed documents of this mean length (exponential): attention costs the sum of squares; "
                        "0: one document per sequence",
                        0, 1 << 21);
    s.unit = "tokens";
    t.push_back(field<&PlanOptions::doc_mean_tokens>(s));
  }
  {
    OptionSpec s = optional_in_file(
        spec("doc_lengths", ValueType::Text,
             "packed documents of lengths from a public distribution (dolma-v1: Dolma v1's sources by their "
             "documents, each exponential of its mean length) or a histogram UPPER:WEIGHT,... (bins from 0 to each "
             "UPPER tokens, WEIGHT their share of documents); instead of doc_mean_tokens; null: doc_mean_tokens"));
    s.unit = "name or histogram";
    t.push_back(optional_field<&PlanOptions::doc_lengths>(s));
  }
  t.push_back(field<&PlanOptions::compute_jitter>(
      spec("compute_jitter", ValueType::Number, "relative std. dev. of each rank's compute per micro-batch", 0, 1)));
  t.push_back(field<&PlanOptions::moe_skew>(
      spec("moe_skew", ValueType::Number, "Zipf skew of the routing to experts (0: uniform)", 0, 10)));
  t.push_back(field<&PlanOptions::seed>(
      spec("seed", ValueType::Integer, "seed of every workload draw", 0, 9007199254740992.0 /* 2^53 */)));
}

// The batch, the micro-batch and the kernels' choices.
void add_batch_and_kernel_options(std::vector<PlanOption>& t) {
  {
    OptionSpec s = spec("seq_len", ValueType::Integer, "sequence length; 0: min(model max, 8192)", 0, 1 << 21);
    s.unit = "tokens";
    s.flag_aliases = {"--seq-length"};
    t.push_back(field<&PlanOptions::seq_len>(s));
  }
  {
    OptionSpec s = nullable(spec("global_batch_tokens", ValueType::TokenCount,
                                 "global batch in tokens; null with global_batch_sequences null: 16M", 1, 1LL << 50));
    s.unit = "tokens";
    t.push_back(
        {s, [](const PlanOptions& o) -> json { return o.global_batch_tokens ? json(*o.global_batch_tokens) : json(); },
         [](PlanOptions& o, const json& v) {
           o.global_batch_tokens = v.is_null() ? std::nullopt : std::optional<std::int64_t>(v.get<std::int64_t>());
         }});
  }
  {
    OptionSpec s = nullable(spec("global_batch_sequences", ValueType::Integer,
                                 "global batch in sequences (instead of global_batch_tokens)", 1, 1LL << 40));
    s.flag_aliases = {"--global-batch-seqs", "--global-batch-size"};
    t.push_back({s,
                 [](const PlanOptions& o) -> json {
                   return o.global_batch_sequences ? json(*o.global_batch_sequences) : json();
                 },
                 [](PlanOptions& o, const json& v) {
                   o.global_batch_sequences =
                       v.is_null() ? std::nullopt : std::optional<std::int64_t>(v.get<std::int64_t>());
                 }});
  }
  {
    OptionSpec s = optional_in_file(nullable(spec(
        "tokens_per_gpu", ValueType::TokenCount,
        "weak scaling: the global batch is this many tokens per GPU (instead of global_batch_tokens)", 1, 1LL << 40)));
    s.unit = "tokens";
    t.push_back({s, [](const PlanOptions& o) -> json { return o.tokens_per_gpu ? json(*o.tokens_per_gpu) : json(); },
                 [](PlanOptions& o, const json& v) {
                   o.tokens_per_gpu = v.is_null() ? std::nullopt : std::optional<std::int64_t>(v.get<std::int64_t>());
                 }});
  }
  t.push_back(field<&PlanOptions::round_batch>(optional_in_file(
      flags(spec("round_batch", ValueType::Boolean,
                 "round a global batch that does not split over data-parallel ranks x micro-batch to the nearest "
                 "one that does (the summary says so)"),
            "--round-batch", "--no-round-batch"))));
  {
    OptionSpec s = spec("micro_batch", ValueType::Integer, "sequences per micro-batch per rank", 1, 1 << 24);
    s.flag_aliases = {"--micro-batch-size"};
    t.push_back(field<&PlanOptions::micro_batch>(s));
  }
  {
    OptionSpec s = spec("recompute", ValueType::Choice, "activation recomputation");
    s.choices = core::names(models::kRecomputes);
    s.flag_aliases = {"--recompute-granularity"};
    t.push_back({s, [](const PlanOptions& o) -> json { return std::string(to_string(o.recompute)); },
                 [](PlanOptions& o, const json& v) { o.recompute = *parse_recompute(v.get<std::string>()); }});
  }
  t.push_back(field<&PlanOptions::flash_attention>(
      flags(spec("flash_attention", ValueType::Boolean,
                 "fused (flash) attention (false: scores and context as batched GEMMs)"),
            "--flash-attention", "--no-flash-attention")));
  t.push_back(field<&PlanOptions::fused_loss>(optional_in_file(
      flags(spec("fused_loss", ValueType::Boolean,
                 "fused softmax cross-entropy (false: Megatron's eager vocab-parallel kernels, six passes over "
                 "fp32 logits)"),
            "--fused-loss", "--unfused-loss"))));
  {
    OptionSpec s = spec("grad_dtype", ValueType::Choice, "gradient accumulation dtype");
    s.choices = {"fp32", "bf16"};
    t.push_back({s, [](const PlanOptions& o) -> json { return std::string(core::to_string(o.grad_dtype)); },
                 [](PlanOptions& o, const json& v) { o.grad_dtype = *parse_grad_dtype(v.get<std::string>()); }});
  }
}

// The linear layers' precision: bf16 or an FP8 recipe, and the FP8 weight all-gather.
void add_precision_options(std::vector<PlanOption>& t) {
  {
    OptionSpec s = optional_in_file(
        spec("precision", ValueType::Choice,
             "the linear layers' GEMMs: bf16, or FP8 at the device's fp8 rate with Transformer Engine's / torchao's "
             "recipes: fp8-delayed (amax history), fp8-current (per-tensor amax first), fp8-block (1x128 block "
             "scales); casts, transposes and amax reductions around each GEMM"));
    s.choices = core::names(models::kPrecisions);
    // Megatron-Core's --fp8-recipe values.
    s.flag_aliases = {"--fp8-recipe"};
    s.choice_aliases = {{"delayed", "fp8-delayed"}, {"tensorwise", "fp8-current"}, {"blockwise", "fp8-block"}};
    t.push_back({s, [](const PlanOptions& o) -> json { return std::string(to_string(o.precision)); },
                 [](PlanOptions& o, const json& v) { o.precision = *parse_precision(v.get<std::string>()); }});
  }
  t.push_back(field<&PlanOptions::fp8_param_gather>(optional_in_file(aka(
      flags(spec("fp8_param_gather", ValueType::Boolean,
                 "FP8 weight all-gather: shards cast to FP8 before the parameter all-gather and the optimizer's "
                 "regather (half the bytes), the gathered weights only transposed; with g_p = 1 the FP8 weights "
                 "are the parameters (no bf16 copy; Megatron-Core's --fp8-param-gather) (needs an FP8 precision and "
                 "g_p or g_o > 1)"),
            "--fp8-param-gather", "--no-fp8-param-gather"),
      {"--fp8-all-gather"}))));
}

std::vector<PlanOption> make_table() {
  std::vector<PlanOption> t;
  add_sharding_options(t);
  add_model_parallel_options(t);
  add_expert_options(t);
  t.push_back(pipeline_schedule_option());
  add_offload_options(t);
  add_workload_options(t);
  add_batch_and_kernel_options(t);
  add_precision_options(t);
  return t;
}

}  // namespace

const std::vector<PlanOption>& plan_option_table() {
  static const std::vector<PlanOption> t = make_table();
  return t;
}

const PlanOption* find_plan_option(std::string_view key) { return core::find_row(plan_option_table(), key); }

std::vector<std::string> plan_option_keys() {
  std::vector<std::string> keys;
  for (const auto& row : plan_option_table()) keys.push_back(row.spec.key);
  return keys;
}

std::optional<core::Problem> set_plan_option(PlanOptions& o, std::string_view key, const json& value) {
  return core::set_row(plan_option_table(), o, key, value, "plan option");
}

nlohmann::ordered_json plan_options_json(const PlanOptions& o) {
  nlohmann::ordered_json j;
  for (const auto& row : plan_option_table()) j[row.spec.key] = row.get(o);
  return j;
}

std::vector<core::Problem> plan_options_from_json(const json& j, PlanOptions& o) {
  std::vector<core::Problem> problems;
  if (!j.is_object()) return {core::Problem{"(top level)", "expected a JSON object of plan options"}};
  const std::vector<std::string> keys = plan_option_keys();
  for (const auto& [key, value] : j.items()) {
    if (key == "schema_version" || find_plan_option(key)) continue;
    const auto near = core::closest(key, keys);
    problems.push_back({key, near ? fmt::format("unknown key (did you mean \"{}\"?)", *near) : "unknown key"});
  }
  for (const auto& row : plan_option_table()) {
    if (!j.contains(row.spec.key)) {
      if (row.spec.required_in_file) problems.push_back({row.spec.key, "missing required key"});
      continue;
    }
    if (auto p = set_plan_option(o, row.spec.key, j.at(row.spec.key))) problems.push_back(*p);
  }
  if (int(o.global_batch_tokens.has_value()) + int(o.global_batch_sequences.has_value()) +
          int(o.tokens_per_gpu.has_value()) >
      1) {
    problems.push_back({"global_batch_tokens",
                        "expected at most one of global_batch_tokens, global_batch_sequences and tokens_per_gpu to be "
                        "non-null"});
  }
  return problems;
}

nlohmann::ordered_json plan_schema() {
  const PlanOptions defaults;
  nlohmann::ordered_json props;
  props["schema_version"] = {{"const", kPlanSchemaVersion}, {"description", "the plan file format's version"}};
  nlohmann::ordered_json required = {"schema_version"};
  for (const auto& row : plan_option_table()) {
    props[row.spec.key] = core::schema_property(row.spec, row.get(defaults));
    if (row.spec.required_in_file) required.push_back(row.spec.key);
  }
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "hzp/plan.schema.json"},
          {"title", "hzp plan options (hzp simulate --plan FILE)"},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", required},
          {"properties", props}};
}

}  // namespace hzp::plan
