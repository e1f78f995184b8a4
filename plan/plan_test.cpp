// Lowering hierarchical ZeRO plans: batch splitting, group sizes, and per-rank
// communication volumes and model-state memory against their closed forms.
#include "plan/plan.hpp"

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"
#include "sim/metrics.hpp"
#include "stacks/stack_spec.hpp"

namespace hzp::plan {
namespace {

using test_util::options;
using test_util::totals;
using test_util::Totals;

TEST(SplitBatch, DividesOrNamesTheOption) {
  models::ModelSpec m = models::load_model("llama3-70b");
  BatchSplit b = split_batch(m, 1024, options(Strategy::Fsdp, 16 << 20));
  EXPECT_EQ(b.seq_len, 8192);
  EXPECT_EQ(b.sequences, 2048);
  EXPECT_EQ(b.micro_batches, 2);
  try {
    (void)split_batch(m, 1024, options(Strategy::Fsdp, 1000));
    FAIL();
  } catch (const core::ProblemError& e) {
    // The problem names the option's key; whoever knows the source maps it to a flag or a file's key.
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0], (core::Problem{"global_batch_tokens",
                                              "expected a positive multiple of the sequence length 8192, got 1000"}));
  }
  PlanOptions o = options(Strategy::Fsdp, 16 << 20);
  o.micro_batch = 4;
  try {
    (void)split_batch(m, 1024, o);
    FAIL();
  } catch (const core::ProblemError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a multiple of 4096 sequences"), std::string::npos);
  }
}

// Whether a stack runs a plan (issue 43, item 2): its strategies, then each
// model-parallel dimension over 1; the names a stack file takes are plan's.
TEST(NotRunnable, TheStacksStrategiesAndModelParallelism) {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(Strategy::Hzp); ++i) names.emplace_back(to_string(static_cast<Strategy>(i)));
  names.emplace_back("zero3");
  std::vector<std::string> stack_names = stacks::strategy_names();
  std::sort(names.begin(), names.end());
  std::sort(stack_names.begin(), stack_names.end());
  EXPECT_EQ(names, stack_names);

  stacks::StackSpec s;
  s.name = "fsdp2";
  PlanOptions o;
  o.strategy = Strategy::Hzp;
  o.tp = 8;
  o.pp = 4;
  EXPECT_EQ(not_runnable(s, o), std::nullopt);  // no "runs": everything
  s.runs.strategies = std::vector<std::string>{"ddp", "zero3", "hsdp"};
  s.runs.parallelism = std::vector<std::string>{"tp"};
  EXPECT_EQ(not_runnable(s, o), "fsdp2 runs ddp, zero3 and hsdp, not hzp");
  o.strategy = Strategy::Fsdp;  // zero3 is fsdp
  EXPECT_EQ(not_runnable(s, o), "fsdp2 runs model parallelism tp, not pp 4");
  o.pp = 1;
  EXPECT_EQ(not_runnable(s, o), std::nullopt);
  s.runs.parallelism = std::vector<std::string>{};
  EXPECT_EQ(not_runnable(s, o), "fsdp2 runs no model parallelism, not tp 8");
}

TEST(ResolveShards, PresetsAndValidation) {
  auto mesh = topologies::load_cluster("mesh16-roce200");  // domain 8, node 16
  auto sizes = [&](Strategy s, int dp, int p = 0, int g = 0, int o = 0) {
    PlanOptions opt;
    opt.strategy = s;
    opt.param_shard = p;
    opt.grad_shard = g;
    opt.optim_shard = o;
    return resolve_shards(opt, dp, mesh);
  };
  EXPECT_EQ(sizes(Strategy::Ddp, 64), (ShardSizes{1, 1, 1}));
  EXPECT_EQ(sizes(Strategy::Zero1, 64), (ShardSizes{1, 1, 64}));
  EXPECT_EQ(sizes(Strategy::Zero2, 64), (ShardSizes{1, 64, 64}));
  EXPECT_EQ(sizes(Strategy::Fsdp, 64), (ShardSizes{64, 64, 64}));
  EXPECT_EQ(sizes(Strategy::Hsdp, 64), (ShardSizes{16, 16, 16}));
  EXPECT_EQ(sizes(Strategy::Hsdp, 64, 32), (ShardSizes{32, 32, 32}));
  EXPECT_EQ(sizes(Strategy::Hsdp2, 64), (ShardSizes{1, 16, 16}));  // PyTorch's _HYBRID_SHARD_ZERO2
  EXPECT_EQ(sizes(Strategy::Hsdp2, 64, 32), (ShardSizes{1, 32, 32}));
  EXPECT_EQ(sizes(Strategy::Hpz, 64), (ShardSizes{16, 64, 64}));
  EXPECT_EQ(sizes(Strategy::Hzp, 64), (ShardSizes{8, 16, 64}));  // domain, node, DP
  EXPECT_EQ(sizes(Strategy::Hzp, 64, 8, 16, 32), (ShardSizes{8, 16, 32}));
  EXPECT_THROW(sizes(Strategy::Hzp, 64, 8, 16, 48), core::ProblemError);  // 48 does not divide 64
  EXPECT_THROW(sizes(Strategy::Hzp, 64, 3, 16, 64), core::ProblemError);  // 3 does not divide g_o
  EXPECT_THROW(sizes(Strategy::Fsdp, 64, 8), core::ProblemError);         // presets take no sizes
  PlanOptions o;
  o.strategy = Strategy::Hzp;
  const stacks::StackSpec& stack = stacks::default_stack()->spec;
  EXPECT_TRUE(resolve_async(o, stack));
  o.strategy = Strategy::Fsdp;
  EXPECT_FALSE(resolve_async(o, stack));
}

// check_plan returns every problem at once, each naming its option's key, and
// the resolved plan when there is none: the way plan search filters candidates
// without exceptions.
TEST(CheckPlan, EveryProblemAtOnceAndTheResolvedPlan) {
  const auto m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o;
  o.strategy = Strategy::Hzp;
  o.global_batch_sequences = 32;
  o.optim_shard = 12;      // not a divisor of DP = 16
  o.prefetch_depth = 100;  // above 64
  o.ep = 2;                // a dense model
  const std::vector<core::Problem> ps = check_plan({m, topo}, o);
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[0], (core::Problem{"optim_shard", "expected a divisor of the data-parallel size (16), got 12"}));
  EXPECT_EQ(ps[1], (core::Problem{"prefetch_depth", "expected 0..64, got 100"}));
  EXPECT_EQ(ps[2], (core::Problem{"ep", "llama3-8b has no experts: expected ep 1"}));

  o.optim_shard = 0;
  o.prefetch_depth = 1;
  o.ep = 1;
  ResolvedPlan r;
  ASSERT_TRUE(check_plan({m, topo}, o, &r).empty());
  // hzp's defaults on dgx-h100 x 16: (scale-up domain 8, node 8, DP 16); async; 32 sequences of 8,192.
  EXPECT_EQ(r.shards, (ShardSizes{8, 8, 16}));
  EXPECT_EQ(r.options.param_shard, 8);
  EXPECT_EQ(r.options.optim_shard, 16);
  EXPECT_EQ(r.options.async, std::optional<bool>(true));
  EXPECT_FALSE(r.options.sequence_parallel);  // tp 1: no sequence parallelism runs
  EXPECT_EQ(r.options.seq_len, 8192);
  EXPECT_EQ(r.options.global_batch_sequences, std::optional<std::int64_t>(32));
  EXPECT_FALSE(r.options.global_batch_tokens.has_value());
  EXPECT_EQ(r.batch.micro_batches, 2);
}

struct Case {
  Strategy strategy;
  int p, g, o;  // requested sizes (hzp only)
  bool async;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << to_string(c.strategy) << " (" << c.p << ", " << c.g << ", " << c.o << ")" << (c.async ? " async" : " sync");
}

class ClosedForm : public ::testing::TestWithParam<Case> {};

// Per-rank buffer bytes per step, Ψ'_u = unit parameters padded to a multiple
// of g_o, M micro-batches, acc = bytes of the accumulation dtype (4):
//   all_gather/dp_shard      g_p > 1:       M · 2 · 2Ψ'          (before forward and backward)
//   reduce_scatter/dp_grad   g_g > 1:       M · 2Ψ'              (bf16, every micro-batch)
//   reduce_scatter/dp_optim  g_o/g_g > 1:   acc · Ψ' / g_g       (once, 1/g_g -> 1/g_o)
//   all_reduce/dp_replica    DP/g_o > 1:    acc · Ψ' / g_o       (once, across replicas)
//   all_gather/dp_regather   g_o/g_p > 1:   2 · Ψ' / g_p         (once, 1/g_o -> 1/g_p)
// and each rank sends (P−1)/P of a ring all-gather/reduce-scatter buffer and
// 2(P−1)/P of an all-reduce buffer. Model state: (2/g_p + acc/g_g + 12/g_o)·Ψ'.
TEST_P(ClosedForm, VolumesAndModelState) {
  const Case c = GetParam();
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  const std::int64_t DP = 32, M = 2;
  PlanOptions o = options(c.strategy, 64 * 8192);
  o.param_shard = c.p;
  o.grad_shard = c.g;
  o.optim_shard = c.o;
  o.async = c.async;
  core::Schedule s = lower({m, topo}, o);
  ASSERT_EQ(s.step.micro_batches, M);
  const ShardSizes sh = resolve_shards(o, static_cast<int>(DP), topo.spec());
  models::StepGraph graph = models::build_step_graph(m, models::GraphOptions{.seq_len = 8192, .micro_batch = 1});
  std::int64_t weights = 0, owned = 0;
  for (const auto& u : graph.units) {
    weights += (u.weight_params + sh.optim - 1) / sh.optim * sh.optim;
    owned += (u.params + sh.optim - 1) / sh.optim * sh.optim;
  }
  std::map<std::string, std::int64_t> expect;
  std::map<std::string, std::int64_t> wire;
  auto add = [&](const std::string& k, std::int64_t bytes, std::int64_t P, std::int64_t factor) {
    if (P <= 1) return;
    expect[k] = bytes;
    wire[k] = factor * (P - 1) * bytes / P;
  };
  add("all_gather/dp_shard", M * 2 * 2 * weights, sh.param, 1);
  add("reduce_scatter/dp_grad", M * 2 * weights, sh.grad, 1);
  add("reduce_scatter/dp_optim", 4 * owned / sh.grad, sh.optim / sh.grad, 1);
  add("all_reduce/dp_replica", 4 * owned / sh.optim, DP / sh.optim, 2);
  add("all_gather/dp_regather", 2 * owned / sh.param, sh.optim / sh.param, 1);
  Totals t = totals(s);
  EXPECT_EQ(t.bytes, expect);
  // Per-op rounding of (P−1)/P: compare the sums within a byte per collective.
  for (const auto& [k, v] : wire) EXPECT_NEAR(static_cast<double>(t.wire[k]), static_cast<double>(v), 400.0) << k;
  std::int64_t state = 2 * owned / sh.param + 4 * owned / sh.grad + 12 * owned / sh.optim;
  std::int64_t pool_bytes = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Alloc && (op.buffer().buffer_class == core::BufferClass::GatheredPool ||
                                             op.buffer().buffer_class == core::BufferClass::GradBucketPool)) {
        pool_bytes += op.buffer().bytes.count();
      }
    }
  }
  EXPECT_EQ(t.static_alloc, state);
  // async: no per-use buffers, so no host syncs; sync: a host sync per reused gather slot.
  if (c.async) {
    EXPECT_EQ(t.syncs, 0);
    EXPECT_EQ(pool_bytes > 0, sh.param > 1 || sh.grad > 1);
  } else {
    EXPECT_EQ(pool_bytes, 0);
    EXPECT_EQ(t.syncs > 0, sh.param > 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, ClosedForm,
                         ::testing::Values(Case{Strategy::Ddp, 0, 0, 0, false}, Case{Strategy::Zero1, 0, 0, 0, false},
                                           Case{Strategy::Zero2, 0, 0, 0, false}, Case{Strategy::Fsdp, 0, 0, 0, false},
                                           Case{Strategy::Hsdp, 0, 0, 0, false}, Case{Strategy::Hpz, 0, 0, 0, false},
                                           Case{Strategy::Hzp, 0, 0, 0, true}, Case{Strategy::Hzp, 4, 8, 16, true},
                                           Case{Strategy::Hzp, 8, 2, 16, false}, Case{Strategy::Fsdp, 0, 0, 0, true}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           const Case& c = param.param;
                           return std::string(to_string(c.strategy)) + "_" + std::to_string(c.p) + "_" +
                                  std::to_string(c.g) + "_" + std::to_string(c.o) + (c.async ? "_async" : "_sync");
                         });

// The ZeRO paper's model-state memory per rank with 2-byte gradients:
// stage 1: 2Ψ + 2Ψ + 12Ψ/N; stage 2: 2Ψ + (2 + 12)Ψ/N; stage 3: (2 + 2 + 12)Ψ/N.
TEST(ModelState, ZeroPaperForms) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  const std::int64_t N = 32;
  auto state = [&](Strategy st) {
    PlanOptions o = options(st, 64 * 8192);
    o.grad_dtype = core::Dtype::Bf16;
    return totals(lower({m, topo}, o)).static_alloc;
  };
  models::StepGraph graph = models::build_step_graph(m, models::GraphOptions{.seq_len = 8192, .micro_batch = 1});
  std::int64_t psi = 0;  // padded to a multiple of N: what ZeRO stages 1-3 partition
  for (const auto& u : graph.units) psi += (u.params + N - 1) / N * N;
  EXPECT_EQ(state(Strategy::Zero1), 2 * psi + 2 * psi + 12 * psi / N);
  EXPECT_EQ(state(Strategy::Zero2), 2 * psi + (2 + 12) * psi / N);
  EXPECT_EQ(state(Strategy::Fsdp), (2 + 2 + 12) * psi / N);
}

TEST(Lower, HashIsDeterministic) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  auto a = core::schedule_hash(lower({m, topo}, options(Strategy::Fsdp, 16 * 8192)));
  auto b = core::schedule_hash(lower({m, topo}, options(Strategy::Fsdp, 16 * 8192)));
  EXPECT_EQ(a, b);
  PlanOptions o = options(Strategy::Fsdp, 16 * 8192);
  o.prefetch_depth = 2;
  EXPECT_NE(core::schedule_hash(lower({m, topo}, o)), a);
}

// Lowered without names (plan search), a pipelined hzp plan holds the same
// ops in the same order, each with an empty name, and the same buffers
// under the same names; over --max-ops, lower_within returns nothing where
// lower_resolved throws.
TEST(Lower, WithoutNamesTheSameOpsAndBuffers) {
  PlanOptions o = options(Strategy::Hzp, 32 * 8192);
  o.param_shard = o.pp = o.tp = 2;
  const models::ModelSpec m = models::load_model("llama3-8b");
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  const Inputs in{m, topo};
  ResolvedPlan rp;
  ASSERT_TRUE(check_plan(in, o, &rp).empty());
  const core::Schedule named = lower_resolved(in, o, rp, {}).schedule;
  const std::optional<LoweredPlan> nameless = lower_within(in, o, rp, {.names = false});
  ASSERT_TRUE(nameless.has_value());
  const core::Schedule& s = nameless->schedule;
  ASSERT_EQ(s.programs.size(), named.programs.size());
  std::size_t ops = 0, buffers = 0;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    ASSERT_EQ(s.programs[p].streams.size(), named.programs[p].streams.size());
    for (std::size_t k = 0; k < s.programs[p].streams.size(); ++k) {
      const auto& a = s.programs[p].streams[k].ops;
      const auto& b = named.programs[p].streams[k].ops;
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].id, b[i].id);
        EXPECT_EQ(a[i].kind, b[i].kind);
        EXPECT_TRUE(a[i].name.empty());
        EXPECT_FALSE(b[i].name.empty());
        if (a[i].kind == core::OpKind::Alloc || a[i].kind == core::OpKind::Free) {
          EXPECT_EQ(a[i].buffer().name, b[i].buffer().name);
          ++buffers;
        }
        ++ops;
      }
    }
  }
  EXPECT_GT(ops, 1000u);
  EXPECT_GT(buffers, 100u);
  EXPECT_FALSE(lower_within(in, o, rp, {.max_ops = 100}).has_value());
  EXPECT_THROW((void)lower_resolved(in, o, rp, {.max_ops = 100}), core::InputError);
}

// The compute stream is sized once, from the walk's uses, before any pass
// emits: it holds every op with little to spare (a vector grown op by op
// has doubled past what it holds); where the estimate falls short (context
// parallelism) the stream grows by an eighth of it, not twice over.
TEST(Lower, SizesTheComputeStreamOnce) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions zb = options(Strategy::Zero1, 64 * 8192);
  zb.tp = 2;
  zb.pp = 2;
  zb.pipeline_schedule = PipelineSchedule::ZbH1;
  PlanOptions cp = options(Strategy::Zero1, 64 * 8192);
  cp.tp = 2;
  cp.cp = 2;
  for (const PlanOptions& o : {options(Strategy::Fsdp, 16 * 8192), zb, cp}) {
    for (const core::Program& p : lower({m, topo}, o).programs) {
      const auto& ops = p.streams.at(0).ops;
      ASSERT_EQ(p.streams.at(0).name, "compute");
      EXPECT_GE(ops.capacity(), ops.size()) << p.name;
      EXPECT_LE(ops.capacity(), ops.size() + ops.size() / 5) << p.name;
    }
  }
}

// Schema 2: the roles and classes of a synchronous FSDP step of a 2-layer
// model on 8 GPUs, 2 micro-batches per rank. Units: embedding, 2 layers, head
// (4, each with parameters); FSDP gathers every unit before its forward and
// again before its backward, reduce-scatters its gradients after every
// backward and needs no step-end reduction (g_g = g_o = DP).
TEST(Lower, RolesAndClassesOfAnFsdpStep) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 2;
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = options(Strategy::Fsdp, 16 * 1024);
  o.seq_len = 1024;
  const core::Schedule s = lower({m, topo}, o);
  ASSERT_EQ(s.programs.size(), 1u);
  ASSERT_EQ(s.step.micro_batches, 2);
  const int units = 4, mbs = 2;
  std::map<core::OpRole, int> roles;
  std::map<core::BufferClass, int> allocs;
  int sharding = 0, model_kernels = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      roles[op.role]++;
      if (op.kind == core::OpKind::Alloc) allocs[op.buffer().buffer_class]++;
      if (is_sharding_op(s, op)) {
        ++sharding;
        EXPECT_EQ(op.param_class,
                  op.role == core::OpRole::ZeroGrads ? core::ParamClass::None : core::ParamClass::Dense);
      }
      if (op.role == core::OpRole::Forward || op.role == core::OpRole::Backward) {
        ++model_kernels;
        EXPECT_EQ(op.kind, core::OpKind::Compute);
        EXPECT_EQ(op.param_class, core::ParamClass::Dense);
      }
    }
  }
  EXPECT_EQ(roles[core::OpRole::GradAccumulate], units * mbs);
  EXPECT_EQ(roles[core::OpRole::GradReduce], units * mbs);
  EXPECT_EQ(roles[core::OpRole::ParamGather], 2 * units * mbs);
  EXPECT_EQ(roles[core::OpRole::Optimizer], units);
  EXPECT_EQ(roles[core::OpRole::ZeroGrads], 1);
  EXPECT_EQ(roles[core::OpRole::Recompute], 0);
  EXPECT_EQ(roles[core::OpRole::Pipeline] + roles[core::OpRole::ModelParallel], 0);
  EXPECT_EQ(sharding, units * mbs * 4 + units + 1);
  EXPECT_GT(model_kernels, 0);
  // Model state once; per use: activations and full gradients per backward,
  // gathered parameters per gather (no pools: fsdp issues inline).
  using BC = core::BufferClass;
  EXPECT_EQ(allocs, (std::map<BC, int>{{BC::Params, 1},
                                       {BC::Grads, 1},
                                       {BC::OptimizerStates, 1},
                                       {BC::NcclBuffers, 1},
                                       {BC::Gathered, 2 * units * mbs},
                                       {BC::GradBucket, units * mbs},
                                       {BC::Activations, units * mbs}}));
}

// Full recomputation re-runs every layer's forward kernels in its backward;
// MoE expert kernels and their sharding ops are the expert class.
TEST(Lower, RecomputeAndExpertClasses) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 2;
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = options(Strategy::Fsdp, 16 * 1024);
  o.seq_len = 1024;
  o.recompute = models::Recompute::Full;
  const core::Schedule s = lower({m, topo}, o);
  int forward_layer_kernels = 0, recomputed = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) recomputed += op.role == core::OpRole::Recompute;
  }
  models::GraphOptions go;
  go.seq_len = 1024;
  go.recompute = models::Recompute::Full;
  for (const auto& u : models::build_step_graph(m, go).units) {
    if (u.kind == models::UnitKind::Layer) forward_layer_kernels += static_cast<int>(u.forward.size());
  }
  EXPECT_EQ(recomputed, forward_layer_kernels * 2);  // 2 micro-batches

  models::ModelSpec moe = models::load_model("mixtral-8x7b");
  moe.layers = 2;
  PlanOptions e = options(Strategy::Fsdp, 16 * 1024);
  e.seq_len = 1024;
  e.ep = 2;
  const core::Schedule x = lower({moe, topo}, e);
  std::map<std::pair<core::OpRole, core::ParamClass>, int> n;
  for (const auto& st : x.programs[0].streams) {
    for (const auto& op : st.ops) n[{op.role, op.param_class}]++;
  }
  // Two layers with experts, 2 micro-batches: each gathers twice and reduces once per micro-batch.
  EXPECT_EQ((n[{core::OpRole::ParamGather, core::ParamClass::Expert}]), 2 * 2 * 2);
  EXPECT_EQ((n[{core::OpRole::GradAccumulate, core::ParamClass::Expert}]), 2 * 2);
  EXPECT_EQ((n[{core::OpRole::Optimizer, core::ParamClass::Expert}]), 2);
  EXPECT_GT((n[{core::OpRole::Forward, core::ParamClass::Expert}]), 0);
  // Dispatch and combine all-to-all per layer and micro-batch, forward and backward.
  EXPECT_EQ((n[{core::OpRole::ModelParallel, core::ParamClass::Expert}]), 2 * 2 * 2 * 2);
}

TEST(Lower, ShardingOpsAreTheDataParallelOnes) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 2;
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  PlanOptions o = options(Strategy::Hzp, 32 * 8192);
  o.tp = 2;
  o.param_shard = 2;
  o.grad_shard = 4;
  o.optim_shard = 16;
  const core::Schedule s = lower({m, topo}, o);
  std::map<std::string, int> sharding, other;  // by collective "kind/group" or compute name suffix
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      std::string key;
      if (op.kind == core::OpKind::Collective) {
        key = std::string(core::to_string(s.group(op.collective().group).kind));
      } else if (op.kind == core::OpKind::Compute) {
        key = std::string(core::to_string(op.compute().kind));
        if (op.name == "zero_grads" || op.name.ends_with(".grad_accumulate"))
          key += ":" + op.name.substr(op.name.rfind('.') + 1);
      } else {
        EXPECT_FALSE(is_sharding_op(s, op)) << op.name;
        continue;
      }
      (is_sharding_op(s, op) ? sharding : other)[key]++;
    }
  }
  for (const char* k : {"dp_shard", "dp_grad", "dp_optim", "dp_regather", "optimizer", "elementwise:grad_accumulate",
                        "elementwise:zero_grads"}) {
    EXPECT_GT(sharding[k], 0) << k;
    EXPECT_EQ(other[k], 0) << k;
  }
  for (const char* k : {"tp", "gemm", "attention"}) {
    EXPECT_GT(other[k], 0) << k;
    EXPECT_EQ(sharding[k], 0) << k;
  }
}

TEST(Lower, KeepGatheredHalvesParameterGathers) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o = options(Strategy::Fsdp, 16 * 8192);
  auto resharded = totals(lower({m, topo}, o)).bytes["all_gather/dp_shard"];
  o.reshard_after_forward = false;
  auto kept = totals(lower({m, topo}, o)).bytes["all_gather/dp_shard"];
  EXPECT_EQ(2 * kept, resharded);
}

// What the synchronous path's one host thread issues, and what the
// asynchronous path moves off it. llama3-8b cut to four layers has U = 6
// units (the embedding, four layers, the output layer); FSDP on 8 GPUs, one
// micro-batch, resharded after forward, prefetch depth 1, under hzp-async's
// runtime with host costs of 5 us a kernel, 40 us a collective, 2 us an
// event call, 1 us an allocator call and 100 us a return from a blocking
// wait. By hand, the sync path's main thread issues:
//  - 3U = 18 collectives: 2U all-gathers (every unit gathered again for its
//    backward) and U reduce-scatters;
//  - 2U - 2 = 10 blocking waits: every gather but the first two waits on the
//    host for the slot the gather two back frees;
//  - 6U - 2 = 34 allocator calls more than the async path's main thread: an
//    allocation and a free of each of the 2U gathered buffers and the U
//    gradient buckets, less the async path's two pools;
// and its host time is each count at its cost. The async path's param and
// grad threads issue the 2U gathers and U reduce-scatters instead.
TEST(HostIssue, SyncPathPaysEveryCollectiveEventAndAllocatorCallOnOneThread) {
  auto [text, file] = stacks::stack_text("hzp-async");
  const auto host = text.find("\"host\": ");
  const auto end = text.find('}', host) + 1;
  text.replace(host, end - host,
               "\"host\": {\"kernel_us\": 5, \"collective_us\": 40, \"event_us\": 2, \"alloc_us\": 1, "
               "\"sync_us\": 100}");
  const auto stack = stacks::stack_from_text(text, file);
  ASSERT_EQ(stack->spec.host.sync_us, 100);
  const auto topo = topologies::Topology(topologies::load_cluster("dgx-h100"), 8);
  const auto m = test_util::four_layers();
  PlanOptions o;
  o.strategy = Strategy::Fsdp;
  o.seq_len = 4096;
  o.global_batch_sequences = 8;
  const int U = 6;
  auto lowered = [&](bool async) {
    o.async = async;
    return sim::host_issue(lower({m, topo, stack}, o), 0);
  };
  const auto sync = lowered(false);
  ASSERT_EQ(sync.size(), 1u);
  const sim::HostIssue& main = sync[0];
  EXPECT_EQ(main.collectives, 3 * U);
  EXPECT_EQ(main.syncs, 2 * U - 2);
  const std::int64_t us = 5 * main.kernels + 40 * (3 * U) + 2 * main.events + 1 * main.allocs + 100 * (2 * U - 2);
  EXPECT_EQ(main.time.count_ns(), us * 1000);
  const auto async = lowered(true);
  ASSERT_EQ(async.size(), 3u);
  EXPECT_EQ(async[0].collectives, 0);
  EXPECT_EQ(async[0].syncs, 0);
  EXPECT_EQ(main.allocs - async[0].allocs, 6 * U - 2);
  EXPECT_EQ(async[1].thread, "param");
  EXPECT_EQ(async[1].collectives, 2 * U);
  EXPECT_EQ(async[2].thread, "grad");
  EXPECT_EQ(async[2].collectives, U);
  EXPECT_EQ(async[1].allocs + async[2].allocs, 0);
}

}  // namespace
}  // namespace hzp::plan
