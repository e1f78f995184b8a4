// Plan search's pieces with values derived by hand: the threads screening
// runs on, the closed-form bound on the model states, and screening's memory
// against the exact simulation where the reduced models mislead.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "explore/parallel_map.hpp"
#include "explore/search_internal.hpp"
#include "models/model_spec.hpp"
#include "refine_util.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp {
namespace {

TEST(ThreadMap, ResultsInOrderForAnyNumberOfThreads) {
  for (int jobs : {1, 2, 7, 5000}) {
    const auto out = explore::thread_map<long>(1000, jobs, [](std::size_t i) { return static_cast<long>(i * i); });
    ASSERT_EQ(out.size(), 1000u);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<long>(i * i)) << "jobs " << jobs;
  }
  EXPECT_TRUE(explore::thread_map<int>(0, 4, [](std::size_t) { return 1; }).empty());
}

TEST(ThreadMap, RethrowsWhatACallThrows) {
  auto fn = [](std::size_t i) {
    if (i == 500) throw std::runtime_error("call 500");
    return 0;
  };
  for (int jobs : {1, 3}) {
    try {
      (void)explore::thread_map<int>(1000, jobs, fn);
      ADD_FAILURE() << "no exception with jobs " << jobs;
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "call 500");
    }
  }
}

// Experts shard over their own expert-data-parallel ranks: TP 2, EP 8,
// expert TP 1 on 8 GPUs leaves 4 data-parallel ranks and 4 x 2 / (1 x 8) = 1
// expert-data-parallel rank, so (1, 2, 2) shards the dense states only.
TEST(PlanSearch, ExpertStatesShardOverTheirOwnGroups) {
  plan::PlanOptions o;
  o.tp = 2;
  o.ep = 8;
  o.expert_tp = 1;
  const plan::ShardSizes sh{1, 2, 2};
  const plan::ShardSizes expert = plan::expert_shard_sizes(o, 4, sh);
  EXPECT_EQ(expert, (plan::ShardSizes{1, 1, 1}));
  // 2^30 dense parameters: 2 / 1 + 4 / 2 + 12 / 2 = 10 bytes each; 2^30
  // expert parameters: 2 + 4 + 12 = 18 bytes each (fp32 gradients).
  EXPECT_DOUBLE_EQ(explore::search::memory_lower_bound_GiB({1 << 30, 1 << 30}, o, sh, expert), 28.0);
  // On 32 GPUs: 16 x 2 / 8 = 4 expert-data-parallel ranks cap (8, 8, 8).
  EXPECT_EQ(plan::expert_shard_sizes(o, 16, {8, 8, 8}), (plan::ShardSizes{4, 4, 4}));
  o.offload_optimizer = true;  // Adam's 12 bytes in host memory
  EXPECT_DOUBLE_EQ(explore::search::memory_lower_bound_GiB({1 << 30, 1 << 30}, o, sh, expert), 4.0 + 6.0);
  // Host: 12 + 2 staging + 4 gradient bytes over g_o: 18 / 2 = 9 dense, 18 expert.
  EXPECT_DOUBLE_EQ(explore::search::host_states_GiB({1 << 30, 1 << 30}, o, sh, expert), 9.0 + 18.0);
  o.offload_params = true;  // and the bf16 parameters: only the gradients stay
  EXPECT_DOUBLE_EQ(explore::search::memory_lower_bound_GiB({1 << 30, 1 << 30}, o, sh, expert), 2.0 + 4.0);
  // Host, dense: 9 + 2 / 1 (g_o 2 > g_p 1: the update is staged); experts
  // (1, 1, 1) take the CPU's update in place: 12 + 4 + 2 = 18.
  EXPECT_DOUBLE_EQ(explore::search::host_states_GiB({1 << 30, 1 << 30}, o, sh, expert), 11.0 + 18.0);
}

// Llama-3 70B on 8 GPUs in 48 GiB each: fully sharded, its fp32 gradients
// take 70.6e9 x 4 / 8 = 32.9 GiB and its bf16 parameters 16.4 GiB more, so
// only plans with the parameters in host memory (and the optimizer, whose
// 12 bytes would take 98.6 GiB) pass the bound; the search offloads them
// rung by rung and its answer is such a plan.
TEST(PlanSearch, OffloadsParametersWhenNothingElseFits) {
  explore::PlanQuery q;
  q.model = "llama3-70b";
  q.clusters = {"dgx-h100"};
  q.gpus = {8};
  q.base.seq_len = 4096;
  q.base.global_batch_sequences = 64;
  q.memory_limit_GiB = 48;
  q.top = 3;
  q.jobs = 2;
  const explore::PlanSearch r = explore::search_plans(q);
  ASSERT_FALSE(r.best.empty());
  for (const auto& c : r.best) {
    EXPECT_TRUE(c.options.offload_params && c.options.offload_optimizer) << explore::describe_plan(c);
    EXPECT_LE(c.peak_reserved_GiB, 48.0) << explore::describe_plan(c);
  }
}

// Offloaded activations: the device holds those in flight, so the peak stops
// growing with the layers; screening measured its growth from two to three
// layers (one more layer's activations each) and extrapolated 80 of them.
TEST(PlanSearch, ScreenedMemoryWithOffloadedActivations) {
  const models::ModelSpec m = models::load_model("llama3-70b");
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-a100"), 64));
  const explore::search::Target target{{m, pm.topology()}, pm};
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Fsdp;
  o.tp = 8;
  o.micro_batch = 8;
  o.seq_len = 4096;
  o.global_batch_sequences = 64;
  o.recompute = models::Recompute::Selective;
  o.offload_optimizer = o.offload_params = o.offload_activations = true;
  sim::Metrics exact;
  const explore::search::Estimate full = explore::search::simulate(target, o, exact);
  const explore::search::Estimate screened = explore::search::screen(target, o, false);
  ASSERT_TRUE(full.ok && screened.ok);
  EXPECT_NEAR(screened.reserved_GiB / full.reserved_GiB, 1.0, 0.1);
  EXPECT_NEAR(screened.step_s / full.step_s, 1.0, 0.05);
}

// Llama-3 70B on 1,024 H100s, TP 8, 32 stages of 2 or 3 layers (4
// data-parallel ranks), 64 micro-batches each: screened on 4 and 8 stages of
// the same balanced pattern (10 and 20 layers on 128 and 256 GPUs), its step
// extrapolated to 32 stages lands within 3 % of the screen on its own 32
// stages, and the peak it gives is a lower bound of that screen's.
TEST(PlanSearch, LongPipelinesAreScreenedOnFewerStages) {
  const models::ModelSpec m = models::load_model("llama3-70b");
  const topologies::ClusterSpec spec = topologies::load_cluster("dgx-h100");
  const cost::PerfModel pm(topologies::Topology(spec, 1024));
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Zero1;
  o.tp = 8;
  o.pp = 32;
  o.pipeline_layout = plan::balanced_layout(m.layers, 32, 1).text();
  o.recompute = models::Recompute::Selective;
  o.global_batch_sequences = 64 * 4;
  const auto f = explore::search::fewer_stages(m, o, pm.topology());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->pp1, 4);
  EXPECT_EQ(f->pp2, 8);
  EXPECT_EQ(f->gpus1, 128);
  EXPECT_EQ(f->gpus2, 256);
  explore::search::SmallerClusters smaller;
  for (int g : {f->gpus1, f->gpus2})
    smaller.emplace(g, std::make_unique<cost::PerfModel>(topologies::Topology(spec, g)));
  const explore::search::Target own{{m, pm.topology()}, pm};
  const explore::search::Target fewer{{m, pm.topology()}, pm, plan::kDefaultMaxOps, &smaller};
  const explore::search::Estimate exact = explore::search::screen(own, o, false);
  const explore::search::Estimate screened = explore::search::screen(fewer, o, false);
  ASSERT_TRUE(exact.ok && screened.ok);
  EXPECT_FALSE(exact.fewer_stages);
  EXPECT_TRUE(screened.fewer_stages);
  EXPECT_NEAR(screened.step_s / exact.step_s, 1.0, 0.03);
  EXPECT_LE(screened.reserved_GiB, exact.reserved_GiB);

  // Not so: fewer micro-batches than stages, a short pipeline, a zero-bubble
  // schedule, a layout other than the balanced one, an MoE model.
  plan::PlanOptions few = o;
  few.global_batch_sequences = 16 * 4;
  EXPECT_FALSE(explore::search::fewer_stages(m, few, pm.topology()));
  plan::PlanOptions shorter = o;
  shorter.pp = 8;
  shorter.pipeline_layout.reset();
  EXPECT_FALSE(explore::search::fewer_stages(m, shorter, pm.topology()));
  plan::PlanOptions zb = o;
  zb.pipeline_schedule = plan::PipelineSchedule::ZbH1;
  EXPECT_FALSE(explore::search::fewer_stages(m, zb, pm.topology()));
  plan::PlanOptions other = o;
  other.pipeline_layout.reset();
  other.first_stage_layers = 10;  // 60 layers on the 30 stages between: 2 each
  other.last_stage_layers = 10;
  EXPECT_FALSE(explore::search::fewer_stages(m, other, pm.topology()));
  // 20 layers on 18 stages: 4 stages cannot hold a whole share of them.
  models::ModelSpec short_model = m;
  short_model.layers = 20;
  plan::PlanOptions eighteen = o;
  eighteen.pp = 18;
  eighteen.pipeline_layout = plan::balanced_layout(20, 18, 1).text();
  eighteen.global_batch_sequences = 18;
  EXPECT_FALSE(explore::search::fewer_stages(short_model, eighteen, topologies::Topology(spec, 144)));
  const models::ModelSpec moe = models::load_model("qwen3-235b-a22b");
  plan::PlanOptions experts = o;
  experts.pipeline_layout = plan::balanced_layout(moe.layers, 32, 1).text();
  EXPECT_FALSE(explore::search::fewer_stages(moe, experts, pm.topology()));
}

// Two 32-stage candidates of Llama-3 70B on 1,024 H100s (TP 8, 4
// data-parallel ranks, ZeRO-1) as if screened on fewer stages: the one that
// leads is screened again on its own stages before verification, and the
// other, then 50 % behind it, stays as it was screened.
TEST(PlanSearch, OnlyCandidatesNearTheTopAreScreenedAgainOnTheirOwnStages) {
  explore::PlanQuery q;  // llama3-70b on 1,024 dgx-h100 GPUs
  q.top = 1;
  explore::search::Search s(q);
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Zero1;
  o.tp = 8;
  o.pp = 32;
  o.pipeline_layout = plan::balanced_layout(s.m.layers, 32, 1).text();
  o.recompute = models::Recompute::Selective;
  o.global_batch_sequences = 64 * 4;
  plan::PlanOptions behind = o;
  behind.recompute = models::Recompute::Full;
  explore::search::Target own = s.target(0);
  own.smaller = nullptr;
  const explore::search::Estimate exact = explore::search::screen(own, o, false);
  ASSERT_TRUE(exact.ok);
  ASSERT_LT(exact.reserved_GiB, 80.0);
  s.alive = {{0, 0, o, false}, {0, 1, behind, false}};
  s.screened = {{1, 0.9 * exact.step_s, 10, 0, 0}, {1, 1.5 * exact.step_s, 10, 0, 0}};
  s.on_fewer_stages = {true, true};
  explore::search::rescreen_near_the_top(s);
  EXPECT_FALSE(s.on_fewer_stages[0]);
  EXPECT_DOUBLE_EQ(s.screened[0][1], exact.step_s);
  EXPECT_DOUBLE_EQ(s.screened[0][2], exact.reserved_GiB);
  EXPECT_TRUE(s.on_fewer_stages[1]);
  EXPECT_DOUBLE_EQ(s.screened[1][1], 1.5 * exact.step_s);
}

// Qwen3-30B-A3B, hzp (2, 2, 2) without background threads, TP 2, EP 8
// folded over the 8 GPUs, no recomputation: the
// two-layer model's peak (the head's transients) is above the three-layer
// model's, so extrapolating the peak over the 48 layers fell to 10 GiB where
// the plan needs about 95 (and the search reported a slower plan than the
// best that fits). Screening now follows the states' exact growth and the
// growth one layer further on.
TEST(PlanSearch, ScreenedMemoryFollowsTheLayersWhereTheReducedPeaksDoNot) {
  const models::ModelSpec m = models::load_model("qwen3-30b-a3b");
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const explore::search::Target target{{m, pm.topology()}, pm};
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Hzp;
  o.async = false;
  o.param_shard = o.grad_shard = o.optim_shard = 2;
  o.tp = 2;
  o.ep = 8;
  o.expert_tp = 1;
  o.global_batch_tokens = 128 * 1024;
  sim::Metrics exact;
  const explore::search::Estimate full = explore::search::simulate(target, o, exact);
  const explore::search::Estimate screened = explore::search::screen(target, o, false);
  ASSERT_TRUE(full.ok && screened.ok);
  EXPECT_GT(full.reserved_GiB, 80.0);  // it does not fit an H100
  EXPECT_NEAR(screened.reserved_GiB / full.reserved_GiB, 1.0, 0.1);
  EXPECT_NEAR(screened.step_s / full.step_s, 1.0, 0.05);
}

// The answer's variants the grid has no axis for: a 1F1B pipeline of
// Llama-3 8B on 16 H100s (pp 4, 32 layers) is simulated again under ZB-H1,
// ZB-V (vpp 2) and DualPipe, and with 2 and 4 of its 4 data-parallel ranks
// turned into Ulysses ranks (32 heads split; 8 does not divide them, refused
// before simulating); all five fit, so all five are found beside it.
TEST(PlanSearch, TheAnswerIsTriedUnderTheSchedulesAndUlysses) {
  const auto refined = test_util::refine_pipelined_answer(4096, 64, 4);
  const explore::search::Search& s = *refined;
  EXPECT_EQ(s.out.exact, 5);
  std::set<std::string> found;
  for (const auto& pc : s.found) {
    if (&pc == &s.found.front()) continue;
    found.insert(std::string(plan::to_string(pc.options.pipeline_schedule)) + " vpp" + std::to_string(pc.options.vpp) +
                 " u" + std::to_string(pc.options.ulysses));
  }
  EXPECT_EQ(found, (std::set<std::string>{"zb-h1 vpp1 u1", "zb-v vpp2 u1", "dualpipe vpp1 u1", "1f1b vpp1 u2",
                                          "1f1b vpp1 u4"}));
}

// A plan too large to build (over max_ops) is no exact answer, not an
// error that ends the search.
TEST(PlanSearch, APlanOverTheOpLimitIsSkippedNotFatal) {
  const models::ModelSpec m = models::load_model("llama3-8b");
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const explore::search::Target target{{m, pm.topology()}, pm};
  plan::PlanOptions o;
  o.strategy = plan::Strategy::Fsdp;
  o.global_batch_sequences = 8;
  sim::Metrics metrics;
  EXPECT_TRUE(explore::search::simulate(target, o, metrics).ok);
  const explore::search::Target small{{m, pm.topology()}, pm, 100};
  EXPECT_FALSE(explore::search::simulate(small, o, metrics).ok);
}

// Several GPU counts: the larger one's plans are faster, and they must not
// hide the smaller one's: each gets its best plan and its own branch and
// bound, and says where its candidates went (issue 43, item 3).
TEST(PlanSearch, EveryGpuCountGetsItsBestPlanAndATally) {
  explore::PlanQuery q;
  q.model = "llama3-8b";
  q.gpus = {8, 64};
  q.base.global_batch_tokens = 512 * 1024;
  q.top = 2;
  q.jobs = 2;
  const explore::PlanSearch r = explore::search_plans(q);
  ASSERT_EQ(r.settings.size(), 2u);
  std::set<int> answered;
  for (const auto& c : r.best) answered.insert(c.gpus);
  EXPECT_EQ(answered, (std::set<int>{8, 64}));
  EXPECT_EQ(r.best.front().gpus, 64);  // the 8-GPU answer comes after the top 2
  EXPECT_EQ(r.best.back().gpus, 8);
  long long candidates = 0;
  for (const auto& t : r.settings) {
    candidates += t.candidates;
    EXPECT_GT(t.fit, 0) << t.gpus;
    EXPECT_GT(t.memory, 0) << t.gpus;  // DDP's 16 bytes a parameter do not fit 80 GiB
    EXPECT_EQ(t.op_limit, 0) << t.gpus;
  }
  EXPECT_EQ(candidates, r.candidates);
  // Progress: screening reports groups done of all, rising to the whole.
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  q.progress = [&calls](std::size_t done, std::size_t total) { calls.emplace_back(done, total); };
  (void)explore::search_plans(q);
  ASSERT_FALSE(calls.empty());
  for (std::size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GT(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, calls[0].second);
  }
  EXPECT_EQ(calls.back().first, calls.back().second);
  q.progress = nullptr;
  // Nothing may be built: every plan checked exactly is over the op limit, and says so.
  q.gpus = {8};
  q.max_ops = 100;
  const explore::PlanSearch none = explore::search_plans(q);
  EXPECT_TRUE(none.best.empty());
  EXPECT_GT(none.settings.at(0).op_limit, 0);
  EXPECT_EQ(none.settings.at(0).fit, 0);
}

// The cost objective without a batch on the command line: the default batch
// (16 Mi tokens) prices every plan, 2 $/GPU-hour x 64 GPUs x step / 3600 per
// 16 Mi tokens (before, no plan had a cost and the ranking was arbitrary).
TEST(PlanSearch, CostObjectiveWithTheDefaultBatch) {
  explore::PlanQuery q;
  q.model = "llama3-8b";
  q.gpus = {64};
  q.strategies = {plan::Strategy::Fsdp};
  q.objective = explore::Objective::Cost;
  q.price_per_gpu_hour = 2.0;
  q.top = 1;
  q.jobs = 2;
  const explore::PlanSearch r = explore::search_plans(q);
  ASSERT_FALSE(r.best.empty());
  const explore::PlanChoice& b = r.best.front();
  ASSERT_TRUE(b.usd_per_million_tokens.has_value());
  EXPECT_NEAR(*b.usd_per_million_tokens, 2.0 * 64 * b.step_s / 3600 / (16 << 20) * 1e6, 1e-12);
  q.objective = explore::Objective::Throughput;  // one price, one GPU count: the same best plan
  EXPECT_DOUBLE_EQ(explore::search_plans(q).best.front().step_s, b.step_s);
}

// Under a stack the search proposes only plans it runs (issue 43, item 2):
// torch-fsdp1 runs ddp, zero2, fsdp, hsdp and hsdp2 with tensor parallelism
// only; --strategy narrows further, and PyTorch's names reach it.
TEST(PlanSearch, ProposesOnlyWhatTheStackRuns) {
  explore::PlanQuery q;
  q.model = "llama3-8b";
  q.gpus = {16};
  q.base.global_batch_tokens = 512 * 1024;
  q.stack = "torch-fsdp1";
  q.top = 30;
  q.jobs = 2;
  const explore::PlanSearch r = explore::search_plans(q);
  ASSERT_FALSE(r.best.empty());
  std::set<std::string> strategies;
  for (const auto& c : r.best) {
    strategies.insert(std::string(plan::to_string(c.options.strategy)));
    EXPECT_EQ(c.options.pp, 1) << explore::describe_plan(c);
    EXPECT_EQ(c.options.ulysses, 1) << explore::describe_plan(c);
  }
  for (const auto& s : strategies) {
    EXPECT_TRUE(s == "ddp" || s == "zero2" || s == "fsdp" || s == "hsdp" || s == "hsdp2") << s;
  }
  EXPECT_GE(strategies.size(), 2u);
  q.strategies = {plan::Strategy::Hsdp};
  for (const auto& c : explore::search_plans(q).best) EXPECT_EQ(c.options.strategy, plan::Strategy::Hsdp);
  q.strategies = {plan::Strategy::Hzp};  // asked for by name, not run by the stack: refused
  EXPECT_THROW((void)explore::search_plans(q), core::ProblemError);
}

}  // namespace
}  // namespace hzp
