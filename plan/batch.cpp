// Resolving a plan: the batch split, the (g_p, g_g, g_o) group sizes and every
// check of a plan against its model and cluster, as core::Problem lists named
// by option key (plan/options.hpp); the throwing variants wrap them.
#include "plan/plan.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "plan/options.hpp"

namespace hzp::plan {

namespace {

// The option that states the global batch (problems name it).
std::string batch_key(const PlanOptions& o) {
  if (o.tokens_per_gpu) return "tokens_per_gpu";
  return o.global_batch_sequences ? "global_batch_sequences" : "global_batch_tokens";
}

// The global batch asked for, in sequences, into b.sequences.
void requested_batch(int world, const PlanOptions& o, BatchSplit& b, std::vector<core::Problem>& ps) {
  const int given = int(o.global_batch_tokens.has_value()) + int(o.global_batch_sequences.has_value()) +
                    int(o.tokens_per_gpu.has_value());
  if (given > 1) {
    ps.push_back({o.tokens_per_gpu ? "tokens_per_gpu" : "global_batch_tokens",
                  "expected at most one of global_batch_tokens, global_batch_sequences and tokens_per_gpu"});
    return;
  }
  const std::string key = batch_key(o);
  if (o.global_batch_sequences) {
    b.sequences = *o.global_batch_sequences;
    if (b.sequences <= 0) ps.push_back({key, "expected a positive number of sequences"});
  } else {
    const std::int64_t tokens =
        o.tokens_per_gpu ? *o.tokens_per_gpu * world : o.global_batch_tokens.value_or(kDefaultGlobalBatchTokens);
    if (tokens <= 0 || tokens % b.seq_len != 0) {
      ps.push_back({key, fmt::format("expected a positive multiple of the sequence length {}, got {}{}", b.seq_len,
                                     tokens, o.tokens_per_gpu ? fmt::format(" tokens ({} GPUs)", world) : "")});
    }
    b.sequences = tokens / b.seq_len;
  }
  b.requested_sequences = b.sequences;
}

std::vector<core::Problem> check_parallel_sizes(int world, const PlanOptions& o) {
  std::vector<core::Problem> ps;
  if (o.tp < 1 || world % o.tp != 0) {
    ps.push_back({"tp", fmt::format("expected a divisor of the {} GPUs, got {}", world, o.tp)});
  } else if (o.pp < 1 || (world / o.tp) % o.pp != 0) {
    ps.push_back({"pp", fmt::format("expected a divisor of GPUs / tp = {}, got {}", world / o.tp, o.pp)});
  } else if (o.cp < 1 || (world / (o.tp * o.pp)) % o.cp != 0) {
    ps.push_back(
        {"cp", fmt::format("expected a divisor of GPUs / (tp x pp) = {}, got {}", world / (o.tp * o.pp), o.cp)});
  } else if (o.ulysses < 1 || (world / (o.tp * o.pp * o.cp)) % o.ulysses != 0) {
    ps.push_back({"ulysses", fmt::format("expected a divisor of GPUs / (tp x pp x cp) = {}, got {}",
                                         world / (o.tp * o.pp * o.cp), o.ulysses)});
  }
  return ps;
}

// The multiple of per_step nearest to sequences (halfway: up; at least one).
std::int64_t round_sequences(std::int64_t sequences, std::int64_t per_step) {
  const std::int64_t down = sequences / per_step * per_step;
  if (down == 0) return per_step;
  return sequences - down >= down + per_step - sequences ? down + per_step : down;
}

}  // namespace

std::vector<core::Problem> check_batch(const models::ModelSpec& m, int world, const PlanOptions& o, BatchSplit& b) {
  std::vector<core::Problem> ps;
  b.seq_len = o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(m.max_seq_len, 8192);
  if (b.seq_len > m.max_seq_len) {
    ps.push_back(
        {"seq_len", fmt::format("expected at most {} (max_seq_len of {}), got {}", m.max_seq_len, m.name, b.seq_len)});
    return ps;
  }
  if (o.micro_batch < 1 || o.micro_batch > (1 << 24) / b.seq_len) {
    ps.push_back({"micro_batch", fmt::format("expected 1 to {} sequences ({} tokens per micro-batch at most), got {}",
                                             (1 << 24) / b.seq_len, 1 << 24, o.micro_batch)});
  }
  requested_batch(world, o, b, ps);
  std::vector<core::Problem> sizes = check_parallel_sizes(world, o);
  ps.insert(ps.end(), sizes.begin(), sizes.end());
  if (!ps.empty()) return ps;
  const std::string key = batch_key(o);
  b.data_parallel = world / (o.tp * o.pp * sequence_split(o));
  const std::int64_t per_step = static_cast<std::int64_t>(b.data_parallel) * o.micro_batch;
  if (b.sequences % per_step != 0 && o.round_batch) b.sequences = round_sequences(b.sequences, per_step);
  if (b.sequences % per_step != 0) {
    ps.push_back({key, fmt::format("{} sequences do not split over {} data-parallel ranks x micro-batch {}: "
                                   "expected a multiple of {} sequences (or round_batch)",
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

std::vector<core::Problem> check_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c, ShardSizes& s) {
  const int node = std::min(c.devices_per_node, dp);
  const int domain = std::min(c.scale_up.domain_devices, dp);
  switch (o.strategy) {
    case Strategy::Ddp: s = {1, 1, 1}; break;
    case Strategy::Zero1: s = {1, 1, dp}; break;
    case Strategy::Zero2: s = {1, dp, dp}; break;
    case Strategy::Fsdp: s = {dp, dp, dp}; break;
    case Strategy::Hsdp:
    case Strategy::Hsdp2: {
      const int S = o.param_shard > 0 ? o.param_shard : node;
      s = {o.strategy == Strategy::Hsdp ? S : 1, S, S};
      break;
    }
    case Strategy::Hpz: s = {o.param_shard > 0 ? o.param_shard : node, dp, dp}; break;
    case Strategy::Hzp:
      s = {o.param_shard > 0 ? o.param_shard : domain, o.grad_shard > 0 ? o.grad_shard : node,
           o.optim_shard > 0 ? o.optim_shard : dp};
      break;
  }
  std::vector<core::Problem> ps;
  const bool hybrid = o.strategy == Strategy::Hsdp || o.strategy == Strategy::Hsdp2;
  const bool takes_param_shard = hybrid || o.strategy == Strategy::Hpz;
  if (o.strategy != Strategy::Hzp && !takes_param_shard && (o.param_shard || o.grad_shard || o.optim_shard)) {
    ps.push_back({o.param_shard  ? "param_shard"
                  : o.grad_shard ? "grad_shard"
                                 : "optim_shard",
                  fmt::format("expected no group sizes for the {} preset (use strategy hzp)", to_string(o.strategy))});
    return ps;
  }
  if (takes_param_shard && (o.grad_shard || o.optim_shard)) {
    ps.push_back({o.grad_shard ? "grad_shard" : "optim_shard",
                  hybrid ? fmt::format("expected only param_shard (the shard size S) for {}", to_string(o.strategy))
                         : "expected only param_shard (the hpZ partition size) for hpz"});
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
                    std::vector<core::Problem>& ps, PipelineLayout& layout) {
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    ps.push_back({"prefetch_depth", fmt::format("expected 0..64, got {}", o.prefetch_depth)});
  }
  if (o.cp > 1 && (!o.flash_attention || batch.seq_len % (2 * o.cp) != 0)) {
    ps.push_back({"cp", fmt::format("context parallelism needs flash attention and a sequence length divisible by "
                                    "2 x cp = {}",
                                    2 * o.cp)});
  }
  if (o.ulysses > 1) {
    // Each rank's heads split ulysses ways after the all-to-all (K/V heads
    // fewer than ulysses are replicated, as DeepSpeed does for GQA).
    const std::int64_t heads = m.heads / std::max(o.tp, 1);
    if (heads % o.ulysses != 0) {
      ps.push_back({"ulysses", fmt::format("expected a divisor of the {} attention heads per tensor-parallel rank "
                                           "({} / tp {}), got {}",
                                           heads, m.heads, o.tp, o.ulysses)});
    }
    const std::int64_t split =
        static_cast<std::int64_t>(o.ulysses) * (o.cp > 1 ? 2 * o.cp : 1) * (o.tp > 1 && o.sequence_parallel ? o.tp : 1);
    if (batch.seq_len % split != 0) {
      ps.push_back(
          {"ulysses", fmt::format("expected the sequence length {} to divide by ulysses{}{} = {}", batch.seq_len,
                                  o.cp > 1 ? " x 2 x cp" : "", o.tp > 1 && o.sequence_parallel ? " x tp" : "", split)});
    }
  }
  const int etp = o.expert_tp.value_or(o.tp);
  const std::int64_t stage_ranks = static_cast<std::int64_t>(o.tp) * batch.data_parallel * sequence_split(o);
  if (etp != o.tp) {
    // MoE parallel folding: ep x expert_tp over the stage's tp x cp x dp ranks.
    if (!m.moe) {
      ps.push_back({"expert_tp", fmt::format("{} has no experts: expected expert_tp null", m.name)});
    } else if (etp < 1 || o.ep < 1 || stage_ranks % (static_cast<std::int64_t>(etp) * o.ep) != 0) {
      ps.push_back({"ep", fmt::format("expected ep x expert_tp to divide the {} ranks of a stage (tp x cp x dp = {} x "
                                      "{} x {}), got {} x {}",
                                      stage_ranks, o.tp, sequence_split(o), batch.data_parallel, o.ep, etp)});
    } else if (o.tp > 1 && !o.sequence_parallel) {
      ps.push_back({"expert_tp", "MoE parallel folding with tp > 1 needs sequence parallelism (as Megatron-Core)"});
    } else if (o.moe_skew > 0) {
      ps.push_back({"moe_skew", "a routing skew is not modelled with MoE parallel folding (expert_tp != tp)"});
    }
  } else if (o.ep < 1 || batch.data_parallel % o.ep != 0) {
    ps.push_back({"ep", fmt::format("expected a divisor of the data-parallel size {}, got {} (or fold experts over "
                                    "tensor-parallel ranks too with expert_tp)",
                                    batch.data_parallel, o.ep)});
  }
  if (o.ep > 1 && (!m.moe || m.moe->experts % o.ep != 0)) {
    ps.push_back(
        {"ep", m.moe ? fmt::format("expected a divisor of the {} experts of {}, got {}", m.moe->experts, m.name, o.ep)
                     : fmt::format("{} has no experts: expected ep 1", m.name)});
  }
  if (o.variability_classes < 1 || batch.data_parallel % o.variability_classes != 0) {
    ps.push_back({"variability_classes", fmt::format("expected a divisor of the data-parallel size {}, got {}",
                                                     batch.data_parallel, o.variability_classes)});
  }
  if (!(o.doc_mean_tokens == 0 || o.doc_mean_tokens >= 1)) {
    ps.push_back({"doc_mean_tokens", "expected 0 (one document a sequence) or a mean length of at least 1 token"});
  }
  if (o.doc_lengths) {
    DocLengths lengths;
    const std::vector<core::Problem> bad = parse_doc_lengths(*o.doc_lengths, lengths);
    ps.insert(ps.end(), bad.begin(), bad.end());
    if (o.doc_mean_tokens > 0) {
      ps.push_back({"doc_lengths", "expected doc_lengths or doc_mean_tokens, not both"});
    }
  }
  if (!(o.compute_jitter >= 0 && o.compute_jitter <= 1))
    ps.push_back({"compute_jitter", "expected a number in [0, 1]"});
  if (!(o.moe_skew >= 0 && o.moe_skew <= 10)) ps.push_back({"moe_skew", "expected a number in [0, 10]"});
  if (m.heads % o.tp != 0) {
    ps.push_back(
        {"tp", fmt::format("expected a divisor of the {} attention heads of {}, got {}", m.heads, m.name, o.tp)});
  }
  const PipelineScheduleTraits& schedule = traits(o.pipeline_schedule);
  const bool zb_v = schedule.v_shape;
  if (std::optional<core::Problem> own =
          schedule.check ? schedule.check(o.pp, o.vpp, batch.micro_batches) : std::nullopt) {
    ps.push_back(std::move(*own));
  } else if (schedule.vpp > 0 && o.vpp != schedule.vpp) {
    ps.push_back({"pipeline_schedule",
                  fmt::format("{} needs vpp {} ({}), got vpp {}", to_string(o.pipeline_schedule), schedule.vpp,
                              zb_v ? "two chunks per stage, placed in a V" : "one chunk per stage", o.vpp)});
  } else if (std::vector<core::Problem> lp = check_pipeline_layout(m, o, layout); !lp.empty()) {
    ps.insert(ps.end(), lp.begin(), lp.end());
  } else if (o.vpp > 1 && !zb_v && batch.micro_batches % o.pp != 0) {
    ps.push_back({"vpp", fmt::format("interleaved pipelining needs micro-batches per rank ({}) to be a multiple of "
                                     "pp ({})",
                                     batch.micro_batches, o.pp)});
  }
}

// Expert parameters: already split ep ways (and expert_tp ways when folded);
// the same plan over the expert-data-parallel ranks, DP / ep or tp·DP /
// (expert_tp·ep) (group sizes capped there unless given).
void expert_problems(const models::ModelSpec& m, const PlanOptions& o, int shard_ranks, const ShardSizes& sh,
                     std::optional<ShardSizes>& expert, std::vector<core::Problem>& ps) {
  const int etp = o.expert_tp.value_or(o.tp);
  const int expert_ranks = shard_ranks * o.tp / std::max(etp, 1);  // the expert layout's data-parallel indices
  if (!m.moe || o.ep < 1 || etp < 1 || (shard_ranks * o.tp) % etp != 0 || expert_ranks % o.ep != 0) return;
  const int edp = expert_data_parallel(o, shard_ranks);
  const ShardSizes e = expert_shard_sizes(o, shard_ranks, sh);
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

int expert_data_parallel(const PlanOptions& o, int shard_ranks) {
  return std::max(1, shard_ranks * o.tp / std::max(1, o.expert_tp.value_or(o.tp) * o.ep));
}

ShardSizes expert_shard_sizes(const PlanOptions& o, int shard_ranks, const ShardSizes& sh) {
  if (o.expert_shards) return *o.expert_shards;
  const int edp = expert_data_parallel(o, shard_ranks);
  return {std::min(sh.param, edp), std::min(sh.grad, edp), std::min(sh.optim, edp)};
}

ShardSizes resolve_shards(const PlanOptions& o, int dp, const topologies::ClusterSpec& c) {
  ShardSizes s;
  std::vector<core::Problem> ps = check_shards(o, dp, c, s);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
  return s;
}

std::vector<core::Problem> check_plan(const Inputs& in, const PlanOptions& o, ResolvedPlan* resolved) {
  const models::ModelSpec& m = in.model;
  const topologies::Topology& topo = in.cluster;
  ResolvedPlan r;
  std::vector<core::Problem> ps = check_batch(m, topo.devices(), o, r.batch);
  if (!ps.empty()) return ps;
  // Parameters are replicated over data-, context- and Ulysses-parallel ranks
  // alike: the sharding dimension is DP x CP x ulysses (Megatron's
  // data-parallel-with-context group; DeepSpeed shards ZeRO over DP x SP).
  r.shard_ranks = r.batch.data_parallel * sequence_split(o);
  ps = check_shards(o, r.shard_ranks, topo.spec(), r.shards);
  model_problems(m, o, r.batch, ps, r.layout);
  const stacks::Stack& stack = *in.stack;
  if (o.async.value_or(false) && !stack.spec.overlap.background_threads) {
    ps.push_back({"async", fmt::format("the stack {} issues collectives from the training loop's thread; expected "
                                       "async false, or a stack with background threads (hzp-async)",
                                       stack.spec.name)});
  }
  for (auto [on, key] : {std::pair{o.offload_optimizer, "offload_optimizer"},
                         {o.offload_activations, "offload_activations"},
                         {o.offload_params, "offload_params"}}) {
    if (on && !topo.spec().host) {
      ps.push_back({key, fmt::format("the cluster {} does not describe node.host (host link, memory and its "
                                     "bandwidth): expected false, or a cluster with node.host",
                                     topo.spec().name)});
    }
  }
  if (o.offload_params && o.overlap_param_gather) {
    ps.push_back({"offload_params",
                  "offloaded parameters are updated in host memory at the step's end; expected "
                  "overlap_param_gather false (its regather runs inside the next step)"});
  }
  if (o.offload_activations && o.pipeline_schedule != PipelineSchedule::OneFOneB) {
    ps.push_back({"offload_activations", "activation offload is modelled with the 1f1b pipeline schedule only"});
  }
  const topologies::DeviceProfile& device = topo.spec().device;
  if (o.precision != models::Precision::Bf16 && !device.peak_tflops.contains(core::Dtype::Fp8)) {
    ps.push_back({"precision", fmt::format("the {} of cluster {} has no fp8 peak (peak_tflops.fp8): expected bf16",
                                           device.name, topo.spec().name)});
  }
  if (o.fp8_param_gather && o.precision == models::Precision::Bf16) {
    ps.push_back({"fp8_param_gather",
                  "an FP8 weight all-gather needs an FP8 precision (fp8-delayed, fp8-current "
                  "or fp8-block)"});
  } else if (o.fp8_param_gather && ps.empty() && r.shards.param <= 1 && r.shards.optim <= 1) {
    ps.push_back({"fp8_param_gather",
                  "nothing is gathered (g_p = 1: parameters unsharded; g_o = 1: no updated "
                  "shards to regather): expected false, or a plan with g_p or g_o > 1"});
  } else if (o.fp8_param_gather && ps.empty() && r.shards.param <= 1 &&
             stack.spec.collectives.regather == stacks::Regather::Broadcast) {
    ps.push_back({"fp8_param_gather", fmt::format("the stack {} regathers updated parameters by bf16 broadcasts, "
                                                  "not an FP8 all-gather: expected false",
                                                  stack.spec.name)});
  } else if (o.fp8_param_gather && stack.spec.collectives.int8_weights) {
    ps.push_back({"fp8_param_gather",
                  fmt::format("the stack {} already gathers int8 weights (qwZ): expected false", stack.spec.name)});
  }
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
    r.options.async = resolve_async(o, stack.spec);
    r.stack = in.stack;
    r.options.sequence_parallel = o.tp > 1 && o.sequence_parallel;
    r.options.seq_len = r.batch.seq_len;
    r.options.global_batch_tokens.reset();
    r.options.tokens_per_gpu.reset();
    r.options.global_batch_sequences = r.batch.sequences;
    *resolved = std::move(r);
  }
  return ps;
}

ResolvedPlan resolve_plan(const Inputs& in, const PlanOptions& o) {
  ResolvedPlan r;
  std::vector<core::Problem> ps = check_plan(in, o, &r);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
  return r;
}

nlohmann::json ResolvedPlan::provenance() const {
  nlohmann::json plan = nlohmann::json::object();
  for (const auto& row : plan_option_table()) plan[row.spec.key] = row.get(options);
  plan["micro_batches"] = batch.micro_batches;
  plan["data_parallel"] = batch.data_parallel;
  plan["shard_ranks"] = shard_ranks;
  const stacks::Stack& s = stack ? *stack : *stacks::default_stack();
  plan["stack"] = {{"name", s.spec.name}, {"file", s.file}, {"sha256", s.sha256}};
  return plan;
}

std::string ResolvedPlan::provenance_json() const { return provenance().dump(); }

}  // namespace hzp::plan
