// End-to-end through the library: plan -> Schedule JSON -> engine, and
// determinism of the bytes every output carries.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/report.hpp"
#include "core/error.hpp"
#include "explore/cases.hpp"
#include "explore/scenario.hpp"
#include "models/model_spec.hpp"
#include "plan/plan_file.hpp"
#include "schedule/check.hpp"
#include "schedule/schedule.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/timeline.hpp"
#include "validation/cases.hpp"

namespace hzp {
namespace {

explore::Scenario small() {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-h100";
  sc.gpus = 16;
  sc.plan.global_batch_tokens = 32 * 8192;
  return sc;
}

TEST(EndToEnd, ScheduleRoundTripsThroughJson) {
  core::Schedule s = explore::build_schedule(small(), plan::Strategy::Fsdp);
  std::string text = core::to_canonical_json(s);
  core::Schedule back = core::schedule_from_json(text, "s.json");
  EXPECT_NO_THROW(core::check_schedule(back));
  EXPECT_EQ(core::to_canonical_json(back), text);
}

TEST(EndToEnd, RerunsAreByteIdentical) {
  auto a = explore::run_scenario(small());
  auto b = explore::run_scenario(small());
  ASSERT_EQ(a.runs.size(), plan::all_strategies().size());
  for (std::size_t i = 0; i < a.runs.size(); ++i) {
    EXPECT_EQ(traces::to_chrome_trace(a.runs[i].timeline), traces::to_chrome_trace(b.runs[i].timeline));
    EXPECT_EQ(core::to_canonical_json(a.runs[i].schedule), core::to_canonical_json(b.runs[i].schedule));
  }
  EXPECT_EQ(cli::summary_json(a, "x"), cli::summary_json(b, "x"));
}

TEST(EndToEnd, FsdpShardsMemoryDdpDoesNot) {
  explore::Scenario sc = small();
  sc.strategies = {plan::Strategy::Ddp, plan::Strategy::Fsdp};
  auto r = explore::run_scenario(sc);
  const auto& ddp = r.runs[0].metrics;
  const auto& fsdp = r.runs[1].metrics;
  EXPECT_GT(ddp.peak_memory(), fsdp.peak_memory());
  // DDP holds 18 bytes per parameter; FSDP 18/16 plus two gathered units.
  EXPECT_GT(ddp.peak_memory().count(), 18 * 8030261248LL);
  EXPECT_GT(fsdp.step_time, core::Duration{});
  EXPECT_GT(fsdp.mfu, 0.2);
  EXPECT_LT(fsdp.mfu, 0.9);
}

// A validation case may say the power limit its devices ran under: the
// prediction moves with the cap's tensor clock (GEMM-bound here, so nearly
// 1830 / 1610 slower), and a limit the profile does not list names the
// case's key, not the command-line flag.
TEST(EndToEnd, ACaseRunsUnderItsPowerLimit) {
  plan::PlanOptions fsdp;
  fsdp.strategy = plan::Strategy::Fsdp;
  fsdp.seq_len = 8192;
  fsdp.global_batch_sequences = 8;
  fsdp.global_batch_tokens.reset();
  nlohmann::json j = {{"schema_version", 1},
                      {"name", "capped"},
                      {"group", "g"},
                      {"source", "test"},
                      {"notes", ""},
                      {"model", nlohmann::json::parse(models::model_text("llama3-8b").text)},
                      {"cluster", "dgx-h100"},
                      {"stack", "hzp-async"},
                      {"gpus", 8},
                      {"plan", nlohmann::json::parse(plan::plan_to_json(fsdp))},
                      {"measured", {{"quantity", "iteration_time_s"}, {"value", 1.0}, {"flops_convention", nullptr}}},
                      {"tolerance", 0.5}};
  const double rated = explore::run_case(validation::case_from_json(j.dump(), "capped.json")).predicted;
  j["power_limit"] = 500;
  const double capped = explore::run_case(validation::case_from_json(j.dump(), "capped.json")).predicted;
  EXPECT_GT(capped / rated, 1.08) << rated << " s rated, " << capped << " s at 500 W";
  EXPECT_LT(capped / rated, 1830.0 / 1610.0 + 1e-9) << rated << " s rated, " << capped << " s at 500 W";
  j["power_limit"] = 450;
  try {
    (void)explore::run_case(validation::case_from_json(j.dump(), "capped.json"));
    ADD_FAILURE() << "450 W accepted";
  } catch (const core::InputError& e) {
    EXPECT_EQ(e.file(), "capped.json");
    EXPECT_EQ(e.key(), "power_limit");
  }
}

}  // namespace
}  // namespace hzp

namespace hzp {
namespace {

// Every preset and hzp on every catalog model and cluster: lowers, passes the
// checker, simulates, and reports a positive step time.
TEST(EndToEnd, EveryStrategyOnEveryModelAndCluster) {
  for (const auto& cluster : topologies::cluster_catalog_names()) {
    const int gpus = cluster == "gb200-nvl72" ? 144 : 64;
    for (const auto& model : models::model_catalog_names()) {
      explore::Scenario sc;
      sc.model = model;
      sc.cluster = cluster;
      sc.gpus = gpus;
      sc.plan.seq_len = 2048;
      sc.plan.global_batch_sequences = gpus;
      sc.plan.recompute = models::Recompute::Full;
      explore::ScenarioResult r = explore::run_scenario(sc);
      ASSERT_EQ(r.runs.size(), plan::all_strategies().size());
      for (const auto& run : r.runs) {
        EXPECT_GT(run.metrics.step_time, core::Duration{})
            << model << " " << cluster << " " << plan::to_string(run.strategy);
        EXPECT_GT(run.metrics.mfu, 0.0) << model << " " << cluster;
      }
      // And inside a Megatron layout: tp 4, two pipeline stages where the layers split evenly.
      sc.plan.tp = 4;
      sc.plan.pp = models::load_model(model).layers % 2 == 0 ? 2 : 1;
      sc.plan.global_batch_sequences = gpus / (4 * sc.plan.pp) * 2;
      sc.strategies = {plan::Strategy::Zero1, plan::Strategy::Hzp};
      for (const auto& run : explore::run_scenario(sc).runs) {
        EXPECT_GT(run.metrics.step_time, core::Duration{})
            << model << " " << cluster << " tp4 " << plan::to_string(run.strategy);
      }
    }
  }
}

}  // namespace
}  // namespace hzp

#include "explore/adaptive.hpp"
#include "explore/search_internal.hpp"

namespace hzp {
namespace {

// Adaptive resharding picks the fastest plan that fits, and a tighter budget
// forces more sharding.
TEST(Adaptive, FastestPlanWithinBudget) {
  explore::Scenario sc = small();
  sc.plan.recompute = models::Recompute::Full;
  explore::AdaptiveChoice loose = explore::choose_shards(sc, 80);
  ASSERT_FALSE(loose.candidates.empty());
  // (g_p, g_g, g_o) nested in 16 ranks: the sum over g_o in {1, 2, 4, 8, 16} of divisors(g_o)^2 = 1 + 4 + 9 + 16 + 25.
  EXPECT_EQ(loose.candidates.size(), 55u);
  const explore::ShardCandidate& best = loose.candidates.front();
  EXPECT_TRUE(best.fits);
  for (const auto& c : loose.candidates) {
    if (c.fits) {
      EXPECT_LE(best.step, c.step);
    }
  }
  EXPECT_EQ(loose.plan.param_shard, best.dense.param);
  // A budget just above the smallest plan leaves only it.
  core::Bytes smallest = loose.candidates.front().reserved;
  for (const auto& c : loose.candidates) smallest = std::min(smallest, c.reserved);
  explore::AdaptiveChoice squeezed = explore::choose_shards(sc, smallest.gib() + 0.01);
  EXPECT_EQ(squeezed.candidates.front().reserved, smallest);
  EXPECT_THROW((void)explore::choose_shards(sc, 1), core::InfeasibleError);
}

// The terms --adaptive explains a choice by: DDP gathers nothing; gathering
// over more ranks pays more ring steps of latency (NCCL's model: one per rank).
TEST(Adaptive, ExplainsByLatencyBandwidthAndOverlap) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-h100";
  sc.gpus = 16;
  sc.plan.global_batch_sequences = 32;
  sc.plan.seq_len = 2048;
  sc.plan.recompute = models::Recompute::Full;
  const explore::AdaptiveChoice c = explore::choose_shards(sc, 80);
  auto find = [&](int p, int g, int o) {
    for (const auto& x : c.candidates) {
      if (x.dense == plan::ShardSizes{p, g, o}) return x;
    }
    ADD_FAILURE() << "no candidate " << p << "," << g << "," << o;
    return explore::ShardCandidate{};
  };
  const auto ddp = find(1, 1, 1);
  EXPECT_EQ(ddp.terms.gather_latency_s + ddp.terms.gather_bandwidth_s, 0.0);
  EXPECT_GT(ddp.terms.reduce_latency_s, 0.0);
  EXPECT_GT(ddp.terms.reduce_bandwidth_s, 0.0);
  EXPECT_GT(find(16, 16, 16).terms.gather_latency_s, find(2, 2, 16).terms.gather_latency_s);
  EXPECT_NE(c.explanation.find("decides"), std::string::npos);
  EXPECT_NE(c.explanation.find("not hidden by compute"), std::string::npos);
}

// hzp plan's bottleneck column: the exposed collective kind, its share of the
// step, and how much of the sharding collectives' time is NCCL's latency term.
TEST(PlanSearch, BottleneckNamesTheExposedKindAndTheLatencyShare) {
  sim::Metrics m;
  m.step_time = core::Duration::seconds(10);
  m.exposed_comm["dp_shard"] = core::Duration::seconds(2);
  m.compute_idle = core::Duration::seconds(0.5);
  explore::ShardingTerms t;
  t.gather_latency_s = 2;
  t.reduce_latency_s = 1;
  t.gather_bandwidth_s = 1;
  EXPECT_EQ(explore::search::bottleneck(m, t, false),
            "dp_shard collectives exposed (20% of the step; sharding 75% latency)");
  m.exposed_comm["dp_shard"] = core::Duration::seconds(0.1);  // hidden: idle decides, a bubble only with a pipeline
  m.compute_idle = core::Duration::seconds(1);
  EXPECT_EQ(explore::search::bottleneck(m, t, true), "compute stream idle (10%: pipeline bubble or waits)");
  EXPECT_EQ(explore::search::bottleneck(m, t, false), "compute stream idle (10%: waits on communication or the host)");
  // Stragglers: the expected slowest rank's extra 1.5 s shows on the others
  // as the 1 s of idle compute; named when at least as large as the waits.
  EXPECT_EQ(explore::search::bottleneck(m, t, false, 1.5),
            "stragglers (the expected slowest rank adds 15% of the step)");
  EXPECT_EQ(explore::search::bottleneck(m, t, false, 0.8),
            "compute stream idle (10%: waits on communication or the host)");
  m.compute_idle = core::Duration{};
  m.mfu = 0.5;
  EXPECT_EQ(explore::search::bottleneck(m, t, false), "compute (50% MFU)");
  EXPECT_EQ(explore::search::bottleneck(m, t, false, 0.4), "compute (50% MFU)");  // under 5 % of the step
}

TEST(Adaptive, ExpertShardsChosenSeparately) {
  explore::Scenario sc;
  sc.model = "mixtral-8x7b";
  sc.cluster = "dgx-h100";
  sc.gpus = 16;
  sc.plan.seq_len = 4096;
  sc.plan.global_batch_sequences = 16;
  sc.plan.ep = 4;
  sc.plan.recompute = models::Recompute::Full;
  explore::AdaptiveChoice c = explore::choose_shards(sc, 80);
  ASSERT_TRUE(c.plan.expert_shards.has_value());
  EXPECT_EQ(4 % c.plan.expert_shards->optim, 0);  // over the 16 / 4 expert-data-parallel ranks
  EXPECT_NE(c.explanation.find("experts"), std::string::npos);
}

}  // namespace
}  // namespace hzp

namespace hzp {
namespace {

// `hzp simulate --strategy hzp --param-shard 8 --grad-shard 16 --optim-shard 256
// [--async|--no-async]` on every catalog model and cluster.
TEST(EndToEnd, HierarchicalZeroOnEveryModelAndCluster) {
  for (const auto& cluster : topologies::cluster_catalog_names()) {
    const int gpus = cluster == "gb200-nvl72" ? 2304 : 1024;  // whole NVL72 racks, divisible by 256
    for (const auto& model : models::model_catalog_names()) {
      for (bool async : {true, false}) {
        explore::Scenario sc;
        sc.model = model;
        sc.cluster = cluster;
        sc.gpus = gpus;
        sc.strategies = {plan::Strategy::Hzp};
        sc.plan.param_shard = 8;
        sc.plan.grad_shard = 16;
        sc.plan.optim_shard = 256;
        sc.plan.async = async;
        sc.plan.seq_len = 2048;
        sc.plan.global_batch_sequences = gpus;
        sc.plan.recompute = models::Recompute::Full;
        explore::ScenarioResult r = explore::run_scenario(sc);
        EXPECT_GT(r.runs.at(0).metrics.step_time, core::Duration{}) << model << " " << cluster << " async " << async;
      }
    }
  }
}

}  // namespace
}  // namespace hzp

// The straggler term of `--explain` and `plan --compare` (issue 38 item 5):
// with packed documents and jitter, the plan's step less the same plan with
// every rank at the mean of its work; FSDP's ranks meet every micro-batch
// (its gathers), ZeRO-2's once a step, so the expected slowest rank costs
// FSDP more. Without variability there is no term.
#include "explore/why.hpp"

namespace hzp {
namespace {

TEST(Why, StragglersAreTheStepAgainstEveryRankAtTheMean) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "mesh16-roce200";
  sc.gpus = 64;
  sc.plan.seq_len = 8192;
  sc.plan.global_batch_sequences = 128;
  sc.strategies = {plan::Strategy::Zero2, plan::Strategy::Fsdp};
  const auto plain = explore::run_scenario(sc);
  for (const auto& t : explore::plan_terms(plain, cost::PerfModel(topologies::Topology(plain.cluster, 64)))) {
    EXPECT_EQ(t.stragglers_s, 0.0) << t.name;
  }
  sc.plan.doc_lengths = "dolma-v1";
  sc.plan.compute_jitter = 0.02;
  const auto r = explore::run_scenario(sc);
  const auto terms = explore::plan_terms(r, cost::PerfModel(topologies::Topology(r.cluster, 64)));
  ASSERT_EQ(terms.size(), 2u);
  EXPECT_GT(terms[0].stragglers_s, 0.0);
  EXPECT_GT(terms[1].stragglers_s, terms[0].stragglers_s);
  EXPECT_LT(terms[1].stragglers_s, terms[1].step_s);
  EXPECT_NE(explore::why_text(terms, 60, 0.08).find("fsdp pays stragglers"), std::string::npos)
      << explore::why_text(terms, 60, 0.08);
  // --adaptive: from g_p = 1 to 2 the ranks meet every micro-batch; the
  // expected slowest rank decides that step, and says so.
  sc.strategies = {};
  const explore::AdaptiveChoice a = explore::choose_shards(sc, 59.6);
  EXPECT_EQ(a.plan.param_shard, 1);
  EXPECT_NE(a.explanation.find("g_p 1 -> 2"), std::string::npos) << a.explanation;
  EXPECT_NE(a.explanation.find("stragglers decide"), std::string::npos) << a.explanation;
}

}  // namespace
}  // namespace hzp
