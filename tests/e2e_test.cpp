// End-to-end through the library: plan -> Schedule JSON -> engine, and
// determinism of the bytes every output carries.
#include <gtest/gtest.h>

#include "cli/report.hpp"
#include "cli/scenario.hpp"
#include "core/schedule.hpp"
#include "core/schedule_check.hpp"
#include "models/model_spec.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/timeline.hpp"

namespace hzp {
namespace {

cli::Scenario small() {
  cli::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-h100";
  sc.gpus = 16;
  sc.plan.global_batch_tokens = 32 * 8192;
  return sc;
}

TEST(EndToEnd, ScheduleRoundTripsThroughJson) {
  core::Schedule s = cli::build_schedule(small(), plan::Strategy::Fsdp);
  std::string text = core::to_canonical_json(s);
  core::Schedule back = core::schedule_from_json(text, "s.json");
  EXPECT_NO_THROW(core::check_schedule(back));
  EXPECT_EQ(core::to_canonical_json(back), text);
}

TEST(EndToEnd, RerunsAreByteIdentical) {
  auto a = cli::run_scenario(small());
  auto b = cli::run_scenario(small());
  ASSERT_EQ(a.runs.size(), plan::all_strategies().size());
  for (std::size_t i = 0; i < a.runs.size(); ++i) {
    EXPECT_EQ(traces::to_chrome_trace(a.runs[i].timeline), traces::to_chrome_trace(b.runs[i].timeline));
    EXPECT_EQ(core::to_canonical_json(a.runs[i].schedule), core::to_canonical_json(b.runs[i].schedule));
  }
  EXPECT_EQ(cli::summary_json(a, "x"), cli::summary_json(b, "x"));
}

TEST(EndToEnd, FsdpShardsMemoryDdpDoesNot) {
  cli::Scenario sc = small();
  sc.strategies = {plan::Strategy::Ddp, plan::Strategy::Fsdp};
  auto r = cli::run_scenario(sc);
  const auto& ddp = r.runs[0].metrics;
  const auto& fsdp = r.runs[1].metrics;
  EXPECT_GT(ddp.peak_memory(), fsdp.peak_memory());
  // DDP holds 18 bytes per parameter; FSDP 18/16 plus two gathered units.
  EXPECT_GT(ddp.peak_memory().count(), 18 * 8030261248LL);
  EXPECT_GT(fsdp.step_time, core::Duration{});
  EXPECT_GT(fsdp.mfu, 0.2);
  EXPECT_LT(fsdp.mfu, 0.9);
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
      cli::Scenario sc;
      sc.model = model;
      sc.cluster = cluster;
      sc.gpus = gpus;
      sc.plan.seq_len = 2048;
      sc.plan.global_batch_sequences = gpus;
      sc.plan.recompute = models::Recompute::Full;
      cli::ScenarioResult r = cli::run_scenario(sc);
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
      for (const auto& run : cli::run_scenario(sc).runs) {
        EXPECT_GT(run.metrics.step_time, core::Duration{})
            << model << " " << cluster << " tp4 " << plan::to_string(run.strategy);
      }
    }
  }
}

}  // namespace
}  // namespace hzp
