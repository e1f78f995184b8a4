// Plan files (see plan_file.hpp).
#include "plan/plan_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::plan {

PlanOptions plan_from_json(const std::string& text, const std::string& file) {
  nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  core::require_schema_version(o, kPlanSchemaVersion);
  PlanOptions p;
  const std::string strategy = o.str("strategy");
  try {
    p.strategy = parse_strategy(strategy);
  } catch (const core::InputError&) {
    o.fail("strategy", fmt::format("expected ddp|zero1|zero2|zero3|fsdp|hsdp|hpz|hzp, got \"{}\"", strategy));
  }
  p.param_shard = static_cast<int>(o.integer("param_shard", 0, 1 << 20));
  p.grad_shard = static_cast<int>(o.integer("grad_shard", 0, 1 << 20));
  p.optim_shard = static_cast<int>(o.integer("optim_shard", 0, 1 << 20));
  if (!o.raw("async").is_null()) p.async = o.boolean("async");
  p.reshard_after_forward = o.boolean("reshard_after_forward");
  p.prefetch_depth = static_cast<int>(o.integer("prefetch_depth", 0, 64));
  p.tp = static_cast<int>(o.integer("tp", 1, 1 << 12));
  p.sequence_parallel = o.boolean("sequence_parallel");
  p.pp = static_cast<int>(o.integer("pp", 1, 1 << 12));
  p.vpp = static_cast<int>(o.integer("vpp", 1, 1 << 10));
  p.cp = static_cast<int>(o.integer("cp", 1, 1 << 12));
  p.tp_comm_overlap = o.boolean("tp_comm_overlap");
  p.overlap_param_gather = o.boolean("overlap_param_gather");
  // Optional keys (added after schema 1 files were written) keep their defaults when absent.
  if (o.has("overlap_grad_reduce")) p.overlap_grad_reduce = o.boolean("overlap_grad_reduce");
  if (o.has("pipeline_p2p_sync")) p.pipeline_p2p_sync = o.boolean("pipeline_p2p_sync");
  p.ep = static_cast<int>(o.integer("ep", 1, 1 << 12));
  const auto& experts = o.raw("expert_shards");
  if (!experts.is_null()) {
    if (!experts.is_array() || experts.size() != 3) o.fail("expert_shards", "expected null or [g_p, g_g, g_o]");
    int v[3] = {0, 0, 0};
    for (std::size_t i = 0; i < 3; ++i) {
      if (!experts[i].is_number_integer() || experts[i].get<std::int64_t>() < 1 ||
          experts[i].get<std::int64_t>() > (1 << 20)) {
        o.fail("expert_shards", "expected null or three positive group sizes [g_p, g_g, g_o]");
      }
      v[i] = experts[i].get<int>();
    }
    p.expert_shards = ShardSizes{v[0], v[1], v[2]};
  }
  p.seq_len = o.integer("seq_len", 0, 1 << 21);
  p.variability_classes = static_cast<int>(o.integer("variability_classes", 1, 1 << 20));
  p.doc_mean_tokens = o.number("doc_mean_tokens", 0, 1 << 21);
  p.compute_jitter = o.number("compute_jitter", 0, 1);
  p.moe_skew = o.number("moe_skew", 0, 10);
  p.seed = static_cast<std::uint64_t>(o.integer("seed", 0));
  const bool tokens = !o.raw("global_batch_tokens").is_null();
  const bool seqs = !o.raw("global_batch_sequences").is_null();
  if (tokens == seqs)
    o.fail("global_batch_tokens",
           "expected exactly one of global_batch_tokens and global_batch_sequences to be non-null");
  if (tokens) p.global_batch_tokens = o.integer("global_batch_tokens", 1, 1LL << 50);
  if (seqs) p.global_batch_sequences = o.integer("global_batch_sequences", 1, 1LL << 40);
  p.micro_batch = o.integer("micro_batch", 1, 1 << 24);
  const std::string rc = o.str("recompute");
  const auto recompute = parse_recompute(rc);
  if (!recompute) o.fail("recompute", fmt::format("expected none|selective|full, got \"{}\"", rc));
  p.recompute = *recompute;
  p.flash_attention = o.boolean("flash_attention");
  if (o.has("fused_loss")) p.fused_loss = o.boolean("fused_loss");  // optional: default on
  const std::string gd = o.str("grad_dtype");
  const auto grad_dtype = parse_grad_dtype(gd);
  if (!grad_dtype) o.fail("grad_dtype", fmt::format("expected fp32|bf16, got \"{}\"", gd));
  p.grad_dtype = *grad_dtype;
  o.finish();
  return p;
}

std::string plan_to_json(const PlanOptions& p) {
  nlohmann::ordered_json j;
  j["schema_version"] = kPlanSchemaVersion;
  j["strategy"] = to_string(p.strategy);
  j["param_shard"] = p.param_shard;
  j["grad_shard"] = p.grad_shard;
  j["optim_shard"] = p.optim_shard;
  j["async"] = p.async ? nlohmann::ordered_json(*p.async) : nlohmann::ordered_json();
  j["reshard_after_forward"] = p.reshard_after_forward;
  j["prefetch_depth"] = p.prefetch_depth;
  j["tp"] = p.tp;
  j["sequence_parallel"] = p.sequence_parallel;
  j["pp"] = p.pp;
  j["vpp"] = p.vpp;
  j["cp"] = p.cp;
  j["tp_comm_overlap"] = p.tp_comm_overlap;
  j["overlap_param_gather"] = p.overlap_param_gather;
  j["overlap_grad_reduce"] = p.overlap_grad_reduce;
  j["pipeline_p2p_sync"] = p.pipeline_p2p_sync;
  j["ep"] = p.ep;
  j["expert_shards"] =
      p.expert_shards ? nlohmann::ordered_json{p.expert_shards->param, p.expert_shards->grad, p.expert_shards->optim}
                      : nlohmann::ordered_json();
  j["seq_len"] = p.seq_len;
  j["variability_classes"] = p.variability_classes;
  j["doc_mean_tokens"] = p.doc_mean_tokens;
  j["compute_jitter"] = p.compute_jitter;
  j["moe_skew"] = p.moe_skew;
  j["seed"] = p.seed;
  j["global_batch_tokens"] =
      p.global_batch_tokens ? nlohmann::ordered_json(*p.global_batch_tokens) : nlohmann::ordered_json();
  j["global_batch_sequences"] =
      p.global_batch_sequences ? nlohmann::ordered_json(*p.global_batch_sequences) : nlohmann::ordered_json();
  j["micro_batch"] = p.micro_batch;
  j["recompute"] = to_string(p.recompute);
  j["flash_attention"] = p.flash_attention;
  j["fused_loss"] = p.fused_loss;
  j["grad_dtype"] = core::to_string(p.grad_dtype);
  return j.dump(2) + "\n";
}

}  // namespace hzp::plan
