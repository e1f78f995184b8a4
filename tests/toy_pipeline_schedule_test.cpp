// A pipeline schedule added in this one file (issue 40, item 3): GPipe
// (Huang et al. 2019, arXiv:1811.06965), every micro-batch's forward, then
// every backward. Registered at start-up, it is a choice of the plan option
// table (and so of the flags, plan files and sweeps that table generates),
// passes the plan check (which asks its own rule through the schedule's check
// hook), lowers and runs in both engines, and plan search
// tries it on a pipelined answer.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/option_flags.hpp"
#include "explore/scenario.hpp"
#include "explore/search_internal.hpp"
#include "models/model_spec.hpp"
#include "plan/options.hpp"
#include "plan/plan.hpp"
#include "refine_util.hpp"
#include "topologies/topology.hpp"

namespace hzp {
namespace {

std::vector<std::vector<plan::PipelineSlot>> gpipe(int pp, int, std::int64_t m, plan::PassTimes) {
  std::vector<std::vector<plan::PipelineSlot>> out(static_cast<std::size_t>(pp));
  for (auto& stage : out) {
    for (std::int64_t i = 0; i < m; ++i) stage.push_back({i, 0, false});
    for (std::int64_t i = 0; i < m; ++i) stage.push_back({i, 0, true});
  }
  return out;
}

// The toy's own legality, through the schedule's check hook: every stage
// holds every micro-batch's activations before its first backward, and a
// step shorter than the pipeline never fills it (a rule of this toy, to show
// that check_plan asks a registered schedule).
std::optional<core::Problem> gpipe_check(int pp, int, std::int64_t m) {
  if (m >= pp) return std::nullopt;
  return core::Problem{"pipeline_schedule",
                       fmt::format("gpipe needs at least pp ({}) micro-batches per rank, got {}", pp, m)};
}

// One chunk a stage, whole backwards, fill and drain exposed as 1F1B's.
const plan::PipelineSchedule kGpipe =
    plan::register_pipeline_schedule({{}, "gpipe", false, false, false, 1, true, 1, &gpipe, &gpipe_check});

TEST(ToyPipelineSchedule, EveryChannelOffersIt) {
  EXPECT_EQ(plan::to_string(kGpipe), "gpipe");
  EXPECT_EQ(plan::parse_pipeline_schedule("gpipe"), kGpipe);
  const auto& choices = plan::find_plan_option("pipeline_schedule")->spec.choices;
  EXPECT_NE(std::find(choices.begin(), choices.end(), "gpipe"), choices.end());
  // The command line's flag, generated from the table.
  CLI::App app;
  cli::OptionFlags flags;
  flags.add(&app, {&plan::find_plan_option("pipeline_schedule")->spec}, nlohmann::json::object());
  std::vector<const char*> argv{"hzp", "--pipeline-schedule", "gpipe"};
  app.parse(static_cast<int>(argv.size()), argv.data());
  std::vector<std::pair<std::string, nlohmann::json>> values;
  ASSERT_TRUE(flags.values(values).empty());
  ASSERT_EQ(values.size(), 1u);
  explore::Scenario sc;
  EXPECT_FALSE(explore::set_input(sc, values[0].first, values[0].second));
  EXPECT_EQ(sc.plan.pipeline_schedule, kGpipe);
}

// check_plan asks the schedule: 2 micro-batches a rank on 4 stages is refused
// under the schedule's key, 4 are accepted.
TEST(ToyPipelineSchedule, PlanCheckAsksItsHook) {
  const models::ModelSpec m = models::load_model("llama3-8b");
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Zero1;
  o.pp = 4;
  o.seq_len = 2048;
  o.pipeline_schedule = kGpipe;
  o.global_batch_sequences = 4;  // 2 data-parallel ranks: 2 micro-batches each
  const std::vector<core::Problem> ps = plan::check_plan({m, topo}, o);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0], (core::Problem{"pipeline_schedule", "gpipe needs at least pp (4) micro-batches per rank, got 2"}));
  o.global_batch_sequences = 8;
  EXPECT_TRUE(plan::check_plan({m, topo}, o).empty());
}

explore::Scenario pipelined(const std::string& engine, plan::PipelineSchedule schedule) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-h100";
  sc.gpus = 8;
  sc.strategies = {plan::Strategy::Zero1};
  sc.plan.pp = 2;
  sc.plan.seq_len = 2048;
  sc.plan.global_batch_sequences = 32;  // 8 micro-batches per stage
  sc.plan.pipeline_schedule = schedule;
  sc.engine = engine;
  return sc;
}

// Lowered and run by both engines. A GPipe stage holds all 8 micro-batches'
// activations before its first backward, 1F1B's first stage at most 2 (pp):
// the peak is higher by the activations of 6 micro-batches at least.
TEST(ToyPipelineSchedule, BothEnginesRunIt) {
  for (const std::string engine : {"analytic", "simgrid"}) {
    const explore::ScenarioResult g = explore::run_scenario(pipelined(engine, kGpipe));
    const explore::ScenarioResult one = explore::run_scenario(pipelined(engine, plan::PipelineSchedule::OneFOneB));
    const auto& gm = g.runs.at(0).metrics;
    const auto& om = one.runs.at(0).metrics;
    EXPECT_GT(gm.step_time.count_ns(), 0) << engine;
    EXPECT_GT(gm.peak_memory().count(), om.peak_memory().count()) << engine;
    EXPECT_EQ(plan::to_string(g.runs.at(0).plan.options.pipeline_schedule), "gpipe");
  }
}

// The search's variants of a pipelined answer include it (beside ZB-H1, ZB-V,
// DualPipe and the Ulysses ranks: the built-ins' test in search_test.cpp).
TEST(ToyPipelineSchedule, PlanSearchTriesIt) {
  // 4 micro-batches a rank: GPipe's 4 in flight fit.
  const auto refined = test_util::refine_pipelined_answer(2048, 16, 4);
  const explore::search::Search& s = *refined;
  std::set<std::string> found;
  for (const auto& pc : s.found) found.insert(std::string(plan::to_string(pc.options.pipeline_schedule)));
  EXPECT_TRUE(found.contains("gpipe")) << s.out.exact;
  EXPECT_TRUE(found.contains("zb-h1")) << s.out.exact;
}

}  // namespace
}  // namespace hzp
