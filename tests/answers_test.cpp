// Issue 18's answers a newcomer can trust, as library calls: ties within the
// model's tolerance and merged identical plans, the cost to train, the sweep
// ETA before any point finished, `--where` arithmetic with constants, weak
// scaling and batch rounding, and the field's names (PyTorch, Megatron-LM,
// DeepSpeed) read through the option tables.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/megatron_args.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "explore/search.hpp"
#include "explore/sweep.hpp"
#include "explore/why.hpp"
#include "models/model_spec.hpp"
#include "plan/options.hpp"
#include "plan/plan.hpp"

namespace hzp {
namespace {

explore::PlanChoice choice(double tokens_per_s, double mem, models::Recompute recompute = models::Recompute::None) {
  explore::PlanChoice c;
  c.cluster = "dgx-h100";
  c.gpus = 64;
  c.options.strategy = plan::Strategy::Fsdp;
  c.options.recompute = recompute;
  c.shards = {64, 64, 64};
  c.tokens_per_s = tokens_per_s;
  c.step_s = 1e6 / tokens_per_s;
  c.peak_reserved_GiB = mem;
  return c;
}

TEST(Ties, PlansWithinTheToleranceShareARankAndIdenticalOnesMerge) {
  // 1000 and 990 tie (1 %); 900 is 10 % behind; the last two predict the
  // same numbers and differ only in recompute.
  const std::vector<explore::PlanChoice> plans = {choice(1000, 10), choice(990, 11), choice(900, 12),
                                                  choice(800, 13, models::Recompute::None),
                                                  choice(800, 13, models::Recompute::Selective)};
  const auto rows = explore::rank_with_ties(plans, explore::Objective::Throughput, 0.03);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].rank, "1=");
  EXPECT_EQ(rows[1].rank, "1=");
  EXPECT_EQ(rows[2].rank, "3");
  EXPECT_EQ(rows[3].rank, "4");
  EXPECT_EQ(rows[3].merged, (std::vector<std::size_t>{3, 4}));
  EXPECT_NE(rows[3].description.find("none|selective"), std::string::npos) << rows[3].description;
  // No tolerance: a ranking again.
  EXPECT_EQ(explore::rank_with_ties(plans, explore::Objective::Throughput, 0)[1].rank, "2");
}

// The search objective's one name table, both ways.
TEST(Objective, NamesRoundTrip) {
  for (explore::Objective o : {explore::Objective::Throughput, explore::Objective::Cost}) {
    EXPECT_EQ(explore::parse_objective(explore::to_string(o)), o);
  }
  EXPECT_EQ(explore::to_string(explore::Objective::Cost), "cost");
  EXPECT_FALSE(explore::parse_objective("speed"));
}

TEST(TrainingCost, DaysGpuHoursAndDollars) {
  explore::PlanChoice c = choice(1e6, 10);
  c.usd_per_million_tokens = 0.5;
  const explore::TrainingCost t = explore::training_cost(c, 8.64e10);  // 86,400 s at 1M tokens/s
  EXPECT_DOUBLE_EQ(t.days, 1.0);
  EXPECT_DOUBLE_EQ(t.gpu_hours, 24.0 * 64);
  ASSERT_TRUE(t.usd.has_value());
  EXPECT_DOUBLE_EQ(*t.usd, 0.5 * 8.64e4);
}

TEST(SweepProgress, NoEtaBeforeTheFirstPointFinishes) {
  EXPECT_EQ(explore::eta_text(0, 1000, 1e-6), "after the first point");
  EXPECT_EQ(explore::eta_text(0, 1000, 30), "after the first point");
  EXPECT_EQ(explore::eta_text(10, 100, 20), "3:00");    // 90 points at 2 s
  EXPECT_EQ(explore::eta_text(1, 1801, 2), "1:00:00");  // 1800 points at 2 s
}

std::vector<explore::SweepPoint> points(const std::vector<std::string>& sets, const std::string& where) {
  explore::SweepSpec spec;
  for (const auto& s : sets) explore::add_set(spec, s);
  spec.where.push_back(where);
  return explore::expand(spec, "command line");
}

TEST(SweepFilters, ConstantsAndArithmeticOnBothSides) {
  EXPECT_EQ(points({"gpus=256,512,1024,4096"}, "gpus * 16K <= 16M").size(), 3u);
  EXPECT_EQ(points({"gpus=256,512,1024,4096"}, "(gpus + 256) / 2 == 384").size(), 1u);
  EXPECT_EQ(points({"gpus=64,128", "tp=2,4,8"}, "tp*pp<=8").size(), 6u);  // pp at its default, 1
  EXPECT_EQ(points({"gpus=64,128", "tp=2,4,8"}, "gpus >= 16 * tp").size(), 5u);
  EXPECT_EQ(points({"gpus=64,128", "tp=2,4,8"}, "tp divides gpus / 16").size(), 5u);  // 2, 4 of 4; 2, 4, 8 of 8
  try {
    (void)points({"gpus=64"}, "gpus <= 2 * tpp");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'tpp' (did you mean 'tp'?)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)points({"gpus=64"}, "gpus <= (2"), core::InputError);
  EXPECT_THROW((void)points({"gpus=64"}, "gpus 2"), core::InputError);
}

// Issue 42, item 6: a key the sweep does not set is filtered at the value
// its points run with; text keys, unset keys and division by zero are refused.
TEST(SweepFilters, EveryKeyAtThePointsValueAndNothingSilentlyKept) {
  EXPECT_EQ(points({"gpus=64,128"}, "tp == 1").size(), 2u);
  EXPECT_EQ(points({"gpus=64,128", "pp=1,2"}, "tp * pp >= 2").size(), 2u);
  EXPECT_EQ(points({"gpus=64,128", "global_batch_sequences=64,128"}, "global_batch_sequences >= gpus").size(), 3u);
  auto error = [](const std::vector<std::string>& sets, const std::string& where) {
    try {
      (void)points(sets, where);
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // tp = 1 at every point: both were kept before.
  EXPECT_NE(error({"gpus=64,128"}, "tp >= 2").find("command line: where: the filters keep none of the 2 point(s)"),
            std::string::npos)
      << error({"gpus=64,128"}, "tp >= 2");
  EXPECT_NE(error({"gpus=64"}, "strategy > 5").find("'strategy' is text, not a number: filters compare numbers"),
            std::string::npos)
      << error({"gpus=64"}, "strategy > 5");
  EXPECT_NE(error({"gpus=64"}, "gpus > 1/0").find("filter 'gpus > 1/0' divides by zero at point {\"gpus\":64}"),
            std::string::npos)
      << error({"gpus=64"}, "gpus > 1/0");
  EXPECT_NE(error({"gpus=64,128", "tp=2,4"}, "gpus / (tp - 2) >= 8").find("divides by zero"), std::string::npos);
  EXPECT_NE(error({"gpus=64"}, "global_batch_sequences >= gpus").find("'global_batch_sequences' is unset"),
            std::string::npos)
      << error({"gpus=64"}, "global_batch_sequences >= gpus");
}

TEST(Batch, TokensPerGpuScalesWithTheGpus) {
  const models::ModelSpec m = models::load_model("llama3-8b");
  plan::PlanOptions o;
  o.tokens_per_gpu = 16384;
  EXPECT_EQ(plan::split_batch(m, 256, o).sequences, 512);
  EXPECT_EQ(plan::split_batch(m, 4096, o).sequences, 8192);
  o.global_batch_tokens = 1 << 24;
  EXPECT_THROW((void)plan::split_batch(m, 256, o), core::ProblemError);
}

TEST(Batch, RoundedOnlyWhenAskedAndRecorded) {
  const models::ModelSpec m = models::load_model("llama3-8b");
  plan::PlanOptions o;
  o.global_batch_tokens = 1 << 24;  // 2,048 sequences of 8,192
  EXPECT_THROW((void)plan::split_batch(m, 4096, o), core::ProblemError);
  o.round_batch = true;
  const plan::BatchSplit b = plan::split_batch(m, 4096, o);
  EXPECT_EQ(b.sequences, 4096);
  EXPECT_EQ(b.requested_sequences, 2048);
  EXPECT_EQ(plan::split_batch(m, 3000, o).sequences, 3000);  // 2,048 rounds up to one per rank
  o.global_batch_sequences = 2000;
  o.global_batch_tokens.reset();
  EXPECT_EQ(plan::split_batch(m, 64, o).sequences, 1984);  // 31 x 64 is nearer than 32 x 64
}

TEST(Batch, SweepRowsSayWhatRanAndWhatWasRounded) {
  // 2,048 sequences of 8,192 over 4,096 ranks: rounded up to one a rank.
  explore::SweepPoint pt;
  pt.inputs = {{"model", "llama3-8b"},         {"gpus", 4096},       {"strategy", "fsdp"}, {"recompute", "full"},
               {"global_batch_tokens", "16M"}, {"round_batch", true}};
  pt.key = pt.inputs.dump();
  const explore::PointResult rounded = explore::run_point(pt);
  ASSERT_EQ(rounded.status, "ok") << rounded.error;
  EXPECT_EQ(rounded.row["batch_sequences"], 4096);
  EXPECT_EQ(rounded.row["batch_rounded_from"], 2048);
  pt.inputs["gpus"] = 2048;
  const explore::PointResult exact = explore::run_point(pt);
  ASSERT_EQ(exact.status, "ok") << exact.error;
  EXPECT_EQ(exact.row["batch_sequences"], 2048);
  EXPECT_FALSE(exact.row.contains("batch_rounded_from"));
}

TEST(FieldNames, PyTorchStrategiesAndMegatronFlagsReachTheirOptions) {
  const core::OptionSpec& strategy = plan::find_plan_option("strategy")->spec;
  EXPECT_EQ(core::value_from_text(strategy, "FULL_SHARD").value, "fsdp");
  EXPECT_EQ(core::value_from_text(strategy, "HYBRID_SHARD").value, "hsdp");
  EXPECT_EQ(core::value_from_text(strategy, "NO_SHARD").value, "ddp");
  EXPECT_EQ(core::value_from_text(strategy, "_HYBRID_SHARD_ZERO2").value, "hsdp2");
  // DeepSpeed's stages, also as --zero-stage N.
  EXPECT_EQ(core::value_from_text(strategy, "0").value, "ddp");
  EXPECT_EQ(core::value_from_text(strategy, "2").value, "zero2");
  EXPECT_EQ(core::value_from_text(strategy, "3").value, "fsdp");
  EXPECT_FALSE(core::value_from_text(strategy, "4").problem.empty());
  EXPECT_NE(std::find(strategy.flag_aliases.begin(), strategy.flag_aliases.end(), "--zero-stage"),
            strategy.flag_aliases.end());
  EXPECT_FALSE(core::value_from_text(strategy, "full_shard").problem.empty());
  plan::PlanOptions o;
  EXPECT_FALSE(plan::set_plan_option(o, "strategy", "SHARD_GRAD_OP").has_value());
  EXPECT_EQ(o.strategy, plan::Strategy::Zero2);

  const cli::MegatronImport m = cli::import_megatron_args(
      "--tensor-model-parallel-size 8 \\\n --pipeline-model-parallel-size=4 --micro-batch-size 2 "
      "--global-batch-size 1024 --use-distributed-optimizer --recompute-granularity full --num-layers 80 --bf16",
      "args");
  nlohmann::json v = nlohmann::json::object();
  for (const auto& [key, value] : m.values) v[key] = value;
  EXPECT_EQ(v["tp"], 8);
  EXPECT_EQ(v["pp"], 4);
  EXPECT_EQ(v["micro_batch"], 2);
  EXPECT_EQ(v["global_batch_sequences"], 1024);
  EXPECT_EQ(v["strategy"], "zero1");
  EXPECT_EQ(v["recompute"], "full");
  EXPECT_EQ(v["sequence_parallel"], false);  // Megatron-LM's default
  EXPECT_EQ(m.ignored, (std::vector<std::string>{"--num-layers 80", "--bf16"}));
  EXPECT_THROW((void)cli::import_megatron_args("--tensor-model-parallel-size eight", "args"), core::InputError);

  // FP8: --fp8-format turns it on with Megatron-LM's default recipe
  // (delayed scaling) unless --fp8-recipe names another, before or after it.
  auto precision = [](const std::string& args) {
    nlohmann::json p;
    for (const auto& [key, value] : cli::import_megatron_args(args, "args").values) {
      if (key == "precision") p = value;
    }
    return p;
  };
  EXPECT_EQ(precision("--fp8-format hybrid --use-distributed-optimizer --fp8-param-gather"), "fp8-delayed");
  EXPECT_EQ(precision("--fp8-recipe tensorwise --fp8-format e4m3"), "fp8-current");
  EXPECT_EQ(precision("--fp8-format hybrid --fp8-recipe blockwise"), "fp8-block");
  EXPECT_TRUE(precision("--bf16").is_null());
  EXPECT_THROW((void)cli::import_megatron_args("--fp8-format e5m2", "args"), core::InputError);
}

// Two plans of a 10 s step; `slow` differs from `fast` only where a test says.
explore::PlanTerms terms(const char* name, double step_s) {
  explore::PlanTerms t;
  t.name = name;
  t.step_s = step_s;
  t.reserved_GiB = 40;
  t.exposed_s = {{"dp_shard", 0.1}};
  t.idle_s = 0.1;
  t.sharding.gather_latency_s = 0.2;
  t.sharding.gather_bandwidth_s = 1.0;
  return t;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Why, NamesTheTermThatMakesAPlanSlower) {
  const explore::PlanTerms fast = terms("fsdp", 10);
  // Exposed all-gathers grow by 0.4 s and their NCCL latency by 0.4 s: latency.
  explore::PlanTerms slow = terms("hzp", 10.4);
  slow.exposed_s["dp_shard"] = 0.5;
  slow.idle_s = 0.5;
  slow.sharding.gather_latency_s = 0.6;
  std::string why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "all-gather latency: dp_shard collectives exposed 0.400 s more")) << why;
  EXPECT_TRUE(has(why, "0.600 s of NCCL latency against 0.200 s")) << why;
  // The same exposure from 0.5 s more bytes on the links (0.1 s more latency): bandwidth.
  slow.sharding.gather_latency_s = 0.3;
  slow.sharding.gather_bandwidth_s = 1.5;
  why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "bandwidth: dp_shard collectives exposed 0.400 s more")) << why;
  EXPECT_TRUE(has(why, "1.500 s against 1.000 s")) << why;
  // The same exposure with the same collective time: overlap.
  slow.sharding = fast.sharding;
  why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "overlap: dp_shard collectives exposed 0.400 s more")) << why;
  // Waits that no exposed collective explains: 0.3 s of bubble.
  slow = terms("pp4", 10.3);
  slow.pp = 4;
  slow.idle_s = 0.4;
  why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "bubble: the compute stream waits 0.300 s more")) << why;
  EXPECT_TRUE(has(why, "pp 4")) << why;
  // The same 0.4 s of waits, 0.3 s of them for the host thread: host (the
  // bubble is what is left, 0.1 s).
  slow.host_bound_s = 0.3;
  why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "host: the compute stream waits 0.300 s more for its host thread")) << why;
  // More work on the compute stream: compute.
  slow = terms("recompute", 10.2);
  why = explore::deciding_term(fast, slow);
  EXPECT_TRUE(has(why, "compute: 0.200 s more compute-stream time")) << why;
  // The same 0.2 s, of which the expected slowest rank adds 0.1 s more than
  // in the fast plan (at least half the difference): stragglers.
  slow.stragglers_s = 0.15;
  explore::PlanTerms fast_varies = fast;
  fast_varies.stragglers_s = 0.05;
  why = explore::deciding_term(fast_varies, slow);
  EXPECT_TRUE(has(why, "stragglers: the expected slowest rank adds 0.150 s to its step against 0.050 s")) << why;
  slow.stragglers_s = 0.14;  // 0.09 s: less than half of it
  why = explore::deciding_term(fast_varies, slow);
  EXPECT_TRUE(has(why, "compute: 0.200 s more")) << why;
}

TEST(Why, JudgesAgainstTheFastestPlanThatFitsAndMarksTies) {
  explore::PlanTerms ddp = terms("ddp", 9);  // fastest, but 100 GiB of 80
  ddp.fits = false;
  ddp.reserved_GiB = 100;
  ddp.largest_memory = "optimizer_states";
  ddp.largest_memory_GiB = 60;
  const explore::PlanTerms fsdp = terms("fsdp", 10);
  explore::PlanTerms hzp = terms("hzp", 10.2);  // 2 %: a tie at 3 %
  explore::PlanTerms hpz = terms("hpz", 11);    // 10 %: not a tie
  const std::string why = explore::why_text({ddp, fsdp, hzp, hpz}, 80, 0.03);
  EXPECT_TRUE(has(why, "against fsdp, the fastest plan that fits")) << why;
  EXPECT_TRUE(has(why,
                  "    ddp  memory: needs 100.0 GiB a device where 80 GiB fit; the largest part at the peak is "
                  "optimizer_states (60.0 GiB); it would be 1.000 s faster"))
      << why;
  EXPECT_TRUE(has(why,
                  "  = fsdp ties with hzp (0.200 s faster as predicted, within the expected error); hzp pays compute: "
                  "0.200 s more"))
      << why;
  EXPECT_TRUE(has(why, "  = hzp  +0.200 s (+2.0 %): compute")) << why;
  EXPECT_TRUE(has(why, "    hpz  +1.000 s (+10.0 %): compute: 1.000 s more")) << why;
  // One plan: what its step is made of (latency 0.2 of 1.2 s of sharding collectives: 17 %).
  EXPECT_EQ(explore::why_text({fsdp}, 80, 0.03),
            "why: fsdp's step, nothing to compare with: compute stream busy 9.900 s of 10.000 s, dp_shard collectives "
            "exposed 0.100 s; its sharding collectives are 17 % NCCL latency\n");
}

}  // namespace
}  // namespace hzp
