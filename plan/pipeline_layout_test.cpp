// Uneven pipelines: layouts from Megatron's text, from first/last-stage layer
// counts and balanced ones, and what lowering makes of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"

namespace hzp::plan {
namespace {

std::vector<int> counts(const PipelineLayout& l) {
  std::vector<int> c;
  for (int v = 0; v < l.virtual_stages(); ++v) c.push_back(l.layers_of(v));
  return c;
}

std::vector<int> stage_counts(const PipelineLayout& l) {
  std::vector<int> c;
  for (int p = 0; p < l.pp; ++p) c.push_back(l.stage_layers(p));
  return c;
}

PlanOptions pipeline(int pp, int vpp) {
  PlanOptions o;
  o.pp = pp;
  o.vpp = vpp;
  return o;
}

// Llama 3.1 405B's 126 layers on 16 stages: 16 x 8 = 128, so the first and
// the last stage (which also carry the embedding and the head) hold 7.
TEST(PipelineLayout, MegatronTextFor126LayersOn16Stages) {
  const models::ModelSpec m = models::load_model("llama3.1-405b");
  ASSERT_EQ(m.layers, 126);
  PlanOptions o = pipeline(16, 1);
  o.pipeline_layout = "Et*7|(t*8|)*14t*7L";
  const PipelineLayout l = pipeline_layout(m, o);
  std::vector<int> want(16, 8);
  want.front() = want.back() = 7;
  EXPECT_EQ(counts(l), want);
  EXPECT_EQ(l.first_layer[1], 7);     // stage 1 starts at layer 7
  EXPECT_EQ(l.first_layer[15], 119);  // 7 + 14 x 8
  EXPECT_EQ(l.virtual_stage_of(6), 0);
  EXPECT_EQ(l.virtual_stage_of(7), 1);
  EXPECT_EQ(l.virtual_stage_of(125), 15);
  EXPECT_EQ(l.max_stage_layers(), 8);
  EXPECT_FALSE(l.even());
  // The text round-trips, and the balanced layout is this one.
  EXPECT_EQ(l.text(), "Et*7|(t*8|)*14t*7L");
  EXPECT_EQ(balanced_layout(126, 16, 1), l);
  // Spelled out stage by stage, with spaces, it is the same layout.
  std::string flat = "E t t t t t t t";
  for (int s = 0; s < 14; ++s) flat += " | tttttttt";
  o.pipeline_layout = flat + " | tttttttL";
  EXPECT_EQ(pipeline_layout(m, o), l);
}

// Megatron's --decoder-first/last-pipeline-num-layers: the rest split evenly
// over the stages between.
TEST(PipelineLayout, FirstAndLastStageLayers) {
  const models::ModelSpec m = models::load_model("llama3.1-405b");
  PlanOptions o = pipeline(16, 1);
  o.first_stage_layers = 6;
  o.last_stage_layers = 8;  // 126 - 14 = 112 over 14 stages: 8 each
  std::vector<int> want(16, 8);
  want.front() = 6;
  EXPECT_EQ(counts(pipeline_layout(m, o)), want);
  // Only the first given: 126 - 6 = 120 over 15 stages.
  o.last_stage_layers.reset();
  want.back() = 8;
  EXPECT_EQ(counts(pipeline_layout(m, o)), want);
  // Interleaved: 94 layers (Qwen3-235B-A22B) on pp 8 x vpp 2, the first
  // stage 10 layers (5 a chunk), the last 12 (6 a chunk).
  const models::ModelSpec q = models::load_model("qwen3-235b-a22b");
  ASSERT_EQ(q.layers, 94);
  PlanOptions qo = pipeline(8, 2);
  qo.first_stage_layers = 10;
  qo.last_stage_layers = 12;  // 72 over 6 x 2 chunks: 6 each
  const PipelineLayout ql = pipeline_layout(q, qo);
  // Virtual stages v = chunk x 8 + stage: stage 0 holds v 0 and 8 (5 each), stage 7 holds v 7 and 15 (6 each).
  EXPECT_EQ(counts(ql), (std::vector<int>{5, 6, 6, 6, 6, 6, 6, 6, 5, 6, 6, 6, 6, 6, 6, 6}));
  EXPECT_EQ(stage_counts(ql), (std::vector<int>{10, 12, 12, 12, 12, 12, 12, 12}));
  // First and last 10 each: the 74 others do not split over 6 stages x 2 chunks.
  qo.last_stage_layers = 10;
  PipelineLayout unused;
  const auto ps = check_pipeline_layout(q, qo, unused);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "first_stage_layers");
  // More layers in the first and last stages than the model has: said so, not "the other -10 layers".
  qo.first_stage_layers = 50;
  qo.last_stage_layers = 50;
  const auto over = check_pipeline_layout(q, qo, unused);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_NE(over[0].message.find("the first and last stages hold 100 layers; qwen3-235b-a22b has 94"),
            std::string::npos)
      << over[0].message;
}

// A stage between the first and the last with no layer (issue 42, item 3:
// it used to deadlock the lowering) is refused, naming the field that made
// it; a first stage of only the embedding or a last of only the head runs.
TEST(PipelineLayout, RefusesAnEmptyMiddleStage) {
  const models::ModelSpec m = models::load_model("llama3-8b");  // 32 layers
  PlanOptions o = pipeline(4, 1);
  o.first_stage_layers = 16;
  o.last_stage_layers = 16;  // 0 layers over the 2 stages between
  PipelineLayout unused;
  auto ps = check_pipeline_layout(m, o, unused);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "first_stage_layers");
  EXPECT_NE(ps[0].message.find("virtual stage 1 (stage 1, chunk 0)"), std::string::npos) << ps[0].message;
  PlanOptions l = pipeline(4, 1);
  l.pipeline_layout = "Et*16||t*16|L";
  ps = check_pipeline_layout(m, l, unused);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "pipeline_layout");
  l.pipeline_layout = "E|t*16|t*16|L";
  EXPECT_TRUE(check_pipeline_layout(m, l, unused).empty());
  EXPECT_EQ(counts(unused), (std::vector<int>{0, 16, 16, 0}));
}

// 94 layers on pp 8 x vpp 4 = 32 virtual stages: ceil(94 / 32) = 3, two
// short, taken from the two ends: v 0 and v 31 hold 2. Stage 0 holds v 0, 8,
// 16, 24 (2 + 3 + 3 + 3 = 11), stage 7 holds v 7, 15, 23, 31 (11).
TEST(PipelineLayout, BalancedInterleavedLayout) {
  const PipelineLayout l = balanced_layout(94, 8, 4);
  std::vector<int> want(32, 3);
  want.front() = want.back() = 2;
  EXPECT_EQ(counts(l), want);
  EXPECT_EQ(stage_counts(l), (std::vector<int>{11, 12, 12, 12, 12, 12, 12, 11}));
  // DeepSeek-V3's 61 layers on 16 stages: 64 - 61 = 3 short: v 0, 15, 1.
  EXPECT_EQ(counts(balanced_layout(61, 16, 1)), (std::vector<int>{3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(balanced_layout(61, 16, 1).text(), "Et*3|t*3|(t*4|)*13t*3L");
  // Even counts fold to one group; the embedding and the head may sit alone.
  EXPECT_EQ(balanced_layout(32, 4, 1).text(), "Et*8|(t*8|)*2t*8L");
  PipelineLayout alone;
  ASSERT_TRUE(parse_pipeline_layout("E|t*4|t*4|L", 4, 1, 8, alone).empty());
  EXPECT_EQ(counts(alone), (std::vector<int>{0, 4, 4, 0}));
  EXPECT_EQ(alone.virtual_stage_of(0), 1);  // the empty stage 0 holds no layer
  EXPECT_EQ(alone.text(), "E|(t*4|)*2L");
  PipelineLayout again;
  ASSERT_TRUE(parse_pipeline_layout(alone.text(), 4, 1, 8, again).empty());
  EXPECT_EQ(again, alone);
}

TEST(PipelineLayout, BadLayoutsNameWhatIsWrong) {
  auto problem = [](std::string_view text, int pp, int vpp, int layers) {
    PipelineLayout l;
    const auto ps = parse_pipeline_layout(text, pp, vpp, layers, l);
    return ps.empty() ? std::string("ok") : ps.front().field + ": " + ps.front().message;
  };
  EXPECT_EQ(problem("Et*4|t*4L", 2, 1, 8), "ok");
  EXPECT_NE(problem("Et*4|t*4L", 4, 1, 8).find("expected pp x vpp = 4 x 1 = 4 virtual stages"), std::string::npos);
  EXPECT_NE(problem("t*4|Et*4L", 2, 1, 8).find("one 'E'"), std::string::npos);
  EXPECT_NE(problem("Et*4|t*4", 2, 1, 8).find("one 'L'"), std::string::npos);
  EXPECT_NE(problem("Et*4|t*3L", 2, 1, 8).find("expected 8 transformer layers ('t'), got 7"), std::string::npos);
  EXPECT_NE(problem("Et*4|t*3mL", 2, 1, 8).find("multi-token"), std::string::npos);
  EXPECT_NE(problem("Et*4|(t*4L", 2, 1, 8).find("unclosed '('"), std::string::npos);
  EXPECT_NE(problem("Et*|t*4L", 2, 1, 8).find("expected a count after '*'"), std::string::npos);
  EXPECT_NE(problem("Ex|t*4L", 2, 1, 8).find("unexpected 'x' at character 2"), std::string::npos);
  EXPECT_NE(problem("Et*4|t*4L)", 2, 1, 8).find("unexpected ')'"), std::string::npos);
  // A character beyond ASCII is quoted whole, not cut after its first byte (issue 42, item 13).
  EXPECT_NE(problem("Et*4|\u00e9|t*4L", 2, 1, 8).find("unexpected '\u00e9' at character 6"), std::string::npos)
      << problem("Et*4|\u00e9|t*4L", 2, 1, 8);
  EXPECT_NE(problem("E((t*1000)*1000)*1000L", 1, 1, 8).find("expands to more than"), std::string::npos);
  EXPECT_TRUE(problem("pipeline", 1, 1, 1).starts_with("pipeline_layout: \"pipeline\": "));

  const models::ModelSpec m = models::load_model("llama3.1-405b");
  PipelineLayout l;
  PlanOptions o = pipeline(16, 1);  // 126 does not divide by 16
  auto ps = check_pipeline_layout(m, o, l);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "pp");
  EXPECT_NE(ps[0].message.find("or a pipeline layout"), std::string::npos);  // says what to do instead
  o.pipeline_layout = "Et*7|(t*8|)*14t*7L";
  o.first_stage_layers = 7;
  ps = check_pipeline_layout(m, o, l);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "pipeline_layout");
  PlanOptions one = pipeline(1, 1);
  one.last_stage_layers = 3;
  ps = check_pipeline_layout(m, one, l);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].field, "last_stage_layers");
}

// Lowering places the layers as the layout says: with 1 ns per GFLOP for the
// layers and nothing for the rest, each stage's compute is its layer count
// times one layer's, and the 1F1B step follows the slowest stage.
TEST(PipelineLayout, StagesComputeTheirLayers) {
  const models::ModelSpec model = models::load_model("llama3-8b");  // 32 layers
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 4);
  PlanOptions o = test_util::ddp_pipeline(4, 8);
  o.first_stage_layers = 5;
  o.last_stage_layers = 11;  // the 16 others: 8 and 8
  const LoweredPlan lp = lower_plan({model, topo}, o);
  EXPECT_EQ(counts(lp.plan.layout), (std::vector<int>{5, 8, 8, 11}));
  core::Schedule s = lp.schedule;
  test_util::without_launch_latency(s);
  core::ReplayCosts costs;
  costs.compute = [](const core::Program&, const core::Op& op) {
    // A layer's ops are named "l<layer>.<op>" (models/step_graph.cpp).
    const bool layer = op.name.size() > 1 && op.name[0] == 'l' && std::isdigit(op.name[1]) != 0 &&
                       op.compute().kind != core::ComputeKind::Optimizer;
    return layer ? core::Duration::ns(std::llround(op.compute().flops.count() / 1e9)) : core::Duration{};
  };
  const test_util::Timing t = test_util::measure(s, costs);
  ASSERT_EQ(t.busy.size(), 4u);
  const double per_layer = static_cast<double>(t.busy[1]) / 8;
  EXPECT_GT(per_layer, 0);
  EXPECT_NEAR(static_cast<double>(t.busy[0]) / per_layer, 5, 0.01);
  EXPECT_NEAR(static_cast<double>(t.busy[2]) / per_layer, 8, 0.01);
  EXPECT_NEAR(static_cast<double>(t.busy[3]) / per_layer, 11, 0.01);
  // 2 micro-batches through 4 stages: no stage can finish before the last
  // stage's 11 layers of both micro-batches.
  EXPECT_GE(t.step, t.busy[3]);
  // The same plan with the even layout has stages of 8 and a shorter step.
  o.first_stage_layers.reset();
  o.last_stage_layers.reset();
  core::Schedule even = lower({model, topo}, o);
  test_util::without_launch_latency(even);
  EXPECT_LT(test_util::measure(even, costs).step, t.step);
}

// The configurations issue 17 names are accepted: Llama 3.1 405B with pp 16,
// DeepSeek-V3 with pp 16 and with pp 4 x vpp 8, Qwen3-235B with pp 8 x vpp 4.
TEST(PipelineLayout, PublishedUnevenConfigurationsResolve) {
  struct Case {
    const char* model;
    int pp, vpp;
  };
  for (const Case c : {Case{"llama3.1-405b", 16, 1}, Case{"deepseek-v3", 16, 1}, Case{"deepseek-v3", 4, 8},
                       Case{"qwen3-235b-a22b", 8, 4}}) {
    const models::ModelSpec m = models::load_model(c.model);
    PlanOptions o = pipeline(c.pp, c.vpp);
    o.pipeline_layout = balanced_layout(m.layers, c.pp, c.vpp).text();
    PipelineLayout l;
    ASSERT_TRUE(check_pipeline_layout(m, o, l).empty()) << c.model << " " << *o.pipeline_layout;
    EXPECT_EQ(l.first_layer.back(), m.layers);
    int most = 0;
    for (int v = 0; v < l.virtual_stages(); ++v) most = std::max(most, l.layers_of(v));
    EXPECT_EQ(most, (m.layers + c.pp * c.vpp - 1) / (c.pp * c.vpp)) << c.model;
  }
}

}  // namespace
}  // namespace hzp::plan
