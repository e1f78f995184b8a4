// Expert and context parallelism, workload variability, NCCL buffers and the
// overlap options, each against its closed form.
#include "plan/plan.hpp"

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "cost/perf_model.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"
#include "stacks/stack_spec.hpp"

namespace hzp::plan {
namespace {
using test_util::alone;
using test_util::ddp_two_stages;
using test_util::four_layers;
using test_util::measure;
using test_util::options;
using test_util::Timing;
using test_util::totals;
using test_util::Totals;
}  // namespace
}  // namespace hzp::plan

namespace hzp::plan {
namespace {

// Expert parallelism: every MoE layer dispatches and combines by all-to-all
// over the ep group (twice forward, twice backward, each buffer
// ceil(T·top_k/E)·E·h·2 bytes), and expert parameters are sharded over the
// DP / ep expert-data-parallel ranks apart from the dense ones:
// model state = (2/g_p + 4/g_g + 12/g_o)·Ψ_dense + (2/e_p + 4/e_g + 12/e_o)·Ψ_experts / ep.
TEST(ExpertParallel, AllToAllsAndExpertShards) {
  models::ModelSpec m = models::load_model("mixtral-8x7b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  PlanOptions o = options(Strategy::Fsdp, 32 * 4096);
  o.seq_len = 4096;
  o.ep = 8;
  core::Schedule s = lower({m, topo}, o);
  Totals t = totals(s);
  const std::int64_t T = 4096, rows = T * 2 / 8, a2a = rows * 8 * 4096 * 2;
  EXPECT_EQ(t.bytes["all_to_all/ep"], 4 * 32 * a2a);  // 4 per layer, 32 layers, 1 micro-batch
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::Ep) {
        EXPECT_EQ(s.group(op.collective().group).ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
      }
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::Edp) {
        EXPECT_EQ(s.group(op.collective().group).ranks, (std::vector<int>{0, 8, 16, 24}));  // DP / ep = 4, stride ep
      }
    }
  }
  models::StepGraph g = models::build_step_graph(m, models::GraphOptions{.seq_len = 4096, .micro_batch = 1, .ep = 8});
  std::int64_t dense = 0, experts = 0;
  for (const auto& u : g.units) {
    dense += (u.params + 31) / 32 * 32;
    experts += (u.expert_params + 3) / 4 * 4;
  }
  EXPECT_EQ(experts, 32LL * 8 / 8 * 3 * 4096 * 14336);  // one local expert per layer and rank
  EXPECT_EQ(t.static_alloc, (2 + 4 + 12) * dense / 32 + (2 + 4 + 12) * experts / 4);
}

// MoE parallel folding: DeepSeek-V3 with TP 2, PP 16 (an uneven layout: 61
// layers) on 1,024 GPUs, 32 data-parallel ranks, each stage's 64 ranks (rank
// = i + 64·p, i = t + 2·d) re-split for experts as etp innermost, then ep,
// then the expert-data-parallel index.
TEST(ExpertParallel, FoldingOverTensorAndDataParallelRanks) {
  const models::ModelSpec m = models::load_model("deepseek-v3");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 1024);
  PlanOptions o = options(Strategy::Zero1, 0);
  o.global_batch_tokens.reset();
  o.global_batch_sequences = 32;
  o.seq_len = 4096;
  o.tp = 2;
  o.pp = 16;
  o.pipeline_layout = "Et*3|t*3|(t*4|)*13t*3L";
  auto groups_of = [](const core::Schedule& s, core::GroupKind k, int rank) {
    for (const auto& g : s.groups) {
      if (g.kind == k && std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end()) return g.ranks;
    }
    return std::vector<int>{};
  };
  auto range = [](int first, int n, int stride) {
    std::vector<int> r;
    for (int k = 0; k < n; ++k) r.push_back(first + k * stride);
    return r;
  };
  // EP 64 x ETP 1: one expert group per stage, all 64 ranks; expert data parallelism 64 / 64 = 1.
  o.ep = 64;
  o.expert_tp = 1;
  core::Schedule s = lower({m, topo}, o);
  EXPECT_EQ(groups_of(s, core::GroupKind::Ep, 0), range(0, 64, 1));
  EXPECT_EQ(groups_of(s, core::GroupKind::Ep, 1000), range(960, 64, 1));  // stage 15
  EXPECT_TRUE(groups_of(s, core::GroupKind::Edp, 0).empty());             // one-rank groups are none
  // EP 32 x ETP 1: ranks i and i + 32 of a stage hold the same experts (expert data parallelism 2).
  o.ep = 32;
  s = lower({m, topo}, o);
  EXPECT_EQ(groups_of(s, core::GroupKind::Ep, 65), range(64, 32, 1));
  EXPECT_EQ(groups_of(s, core::GroupKind::EdpOptim, 65), (std::vector<int>{65, 97}));
  // EP 16 x ETP 4 (attention keeps tp 2): ranks i .. i + 3 share an expert
  // slice, ep runs over every fourth rank, 64 / (4 x 16) = 1 expert replica.
  o.ep = 16;
  o.expert_tp = 4;
  s = lower({m, topo}, o);
  EXPECT_EQ(groups_of(s, core::GroupKind::Etp, 5), range(4, 4, 1));
  EXPECT_EQ(groups_of(s, core::GroupKind::Ep, 5), range(1, 16, 4));
  EXPECT_TRUE(groups_of(s, core::GroupKind::EdpOptim, 5).empty());  // 64 / (4 x 16) = 1
  // The configurations refused without folding: EP 64 with TP 2, PP 16, DP 32.
  o.expert_tp.reset();
  o.ep = 64;
  EXPECT_THROW((void)lower({m, topo}, o), core::ProblemError);
  o.expert_tp = 1;
  o.sequence_parallel = false;  // Megatron-Core folds with tp > 1 only under sequence parallelism
  EXPECT_THROW((void)lower({m, topo}, o), core::ProblemError);
}

TEST(ExpertParallel, RejectsImpossibleSizes) {
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  PlanOptions o = options(Strategy::Fsdp, 32 * 4096);
  o.seq_len = 4096;
  o.ep = 8;
  EXPECT_THROW((void)lower({models::load_model("llama3-8b"), topo}, o), core::ProblemError);  // no experts
  o.ep = 3;
  EXPECT_THROW((void)lower({models::load_model("mixtral-8x7b"), topo}, o), core::ProblemError);  // 3 does not divide 32
  o.ep = 16;
  EXPECT_THROW((void)lower({models::load_model("mixtral-8x7b"), topo}, o), core::ProblemError);  // 8 experts
}

}  // namespace
}  // namespace hzp::plan

namespace hzp::plan {
namespace {

struct Simulated {
  core::Schedule schedule;
  std::int64_t step = 0;
  std::vector<std::int64_t> busy;  // compute-stream compute time per program
};

Simulated simulate(const models::ModelSpec& m, int gpus, const PlanOptions& o) {
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), gpus));
  Simulated run{lower({m, pm.topology()}, o), 0, {}};
  Timing t = measure(run.schedule, alone(pm));
  run.step = t.step;
  run.busy = std::move(t.busy);
  return run;
}

TEST(Workload, FactorsAreBoundedAndSeeded) {
  PlanOptions o;
  o.doc_mean_tokens = 512;
  o.compute_jitter = 0.1;
  WorkloadShape w;
  w.seq_len = 8192;
  w.classes = 2;
  const Stragglers s = expected_stragglers(o, w);
  EXPECT_EQ(s.attention, expected_stragglers(o, w).attention);
  Workload a = class_workload(o, s, 4, 0, 0, 1, 0);
  Workload c = class_workload(o, s, 4, 1, 0, 1, 0);
  EXPECT_NE(a.attention, c.attention);
  for (double f : a.attention) {
    EXPECT_GT(f, 0.0);
    EXPECT_LT(f, 0.5);  // ~16 documents of ~512 tokens: Σ len² far below seq²
  }
  // Nearly one document per sequence when documents are far longer than the
  // sequence (one in 120 starts shorter than 8,192 tokens of 1e6 on average).
  o.doc_mean_tokens = 1e6;
  for (double f : class_workload(o, expected_stragglers(o, w), 2, 0, 0, 1, 0).attention) {
    EXPECT_GT(f, 0.99);
    EXPECT_LE(f, 1.0);
  }
  // Zipf routing over 8 experts on 4 ranks: rank 0 holds experts 0 and 1.
  o.moe_skew = 1.0;
  const double h8 = 1 + 1 / 2.0 + 1 / 3.0 + 1 / 4.0 + 1 / 5.0 + 1 / 6.0 + 1 / 7.0 + 1 / 8.0;
  EXPECT_NEAR(class_workload(o, expected_stragglers(o, w), 1, 0, 0, 4, 8).experts, (1 + 1 / 2.0) / h8 * 4, 1e-12);
}

// Rank classes break the symmetry; synchronising collectives make every class
// wait for the slowest.
TEST(Workload, VariabilityPropagatesTheSlowestClass) {
  models::ModelSpec m = models::load_model("llama3-8b");
  PlanOptions o;
  o.strategy = Strategy::Fsdp;
  o.global_batch_sequences = 32;
  o.seq_len = 8192;
  Simulated base = simulate(m, 16, o);
  o.variability_classes = 4;
  Simulated same = simulate(m, 16, o);  // classes without variability: the same step
  ASSERT_EQ(same.schedule.programs.size(), 4u);
  EXPECT_EQ(same.step, base.step);
  o.compute_jitter = 0.2;
  o.doc_mean_tokens = 1024;
  Simulated varied = simulate(m, 16, o);
  std::int64_t slowest = *std::max_element(varied.busy.begin(), varied.busy.end());
  std::int64_t fastest = *std::min_element(varied.busy.begin(), varied.busy.end());
  EXPECT_GT(slowest, fastest);
  EXPECT_GE(varied.step, slowest);  // nobody finishes before the slowest class's compute
  o.seed = 2;
  EXPECT_NE(core::schedule_hash(simulate(m, 16, o).schedule), core::schedule_hash(varied.schedule));
}

TEST(Workload, RoutingSkewMakesExpertRanksUneven) {
  models::ModelSpec m = models::load_model("mixtral-8x7b");
  PlanOptions o;
  o.strategy = Strategy::Zero1;
  o.global_batch_sequences = 16;
  o.seq_len = 4096;
  o.ep = 8;
  o.recompute = models::Recompute::Full;
  Simulated uniform = simulate(m, 16, o);
  ASSERT_EQ(uniform.schedule.programs.size(), 1u);
  o.moe_skew = 1.2;
  Simulated skewed = simulate(m, 16, o);
  ASSERT_EQ(skewed.schedule.programs.size(), 8u);  // one class per expert-parallel rank index
  EXPECT_GT(skewed.busy[0], skewed.busy[7]);       // expert 0 is the most popular
  EXPECT_GT(skewed.step, uniform.step);
  auto a2a_bytes = [&](std::size_t program) {
    for (const auto& op : skewed.schedule.programs[program].streams[0].ops) {
      if (op.kind == core::OpKind::Collective && op.collective().kind == core::CollectiveKind::AllToAll)
        return op.collective().bytes.count();
    }
    return std::int64_t{0};
  };
  EXPECT_GT(a2a_bytes(0), a2a_bytes(7));
}

}  // namespace
}  // namespace hzp::plan

namespace hzp::plan {
namespace {

// Ring attention over cp ranks: every attention op becomes cp chunks and cp − 1
// K/V blocks of 2·(s/cp)·b·G·(d_qk + d_v) bytes (twice that in backward) pass
// to the next rank; each cp index is its own rank class.
TEST(ContextParallel, RingAttention) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o;
  o.strategy = Strategy::Fsdp;
  o.seq_len = 8192;
  o.global_batch_sequences = 8;
  o.cp = 4;
  core::Schedule s = lower({m, topo}, o);  // checked: the ring's sends and receives pair up
  ASSERT_EQ(s.programs.size(), 4u);
  const std::int64_t block = 2 * (8192 / 4) * 8 * (128 + 128);
  int sends = 0, chunks = 0;
  std::int64_t bytes = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Send && st.name == "cp_send") {
        ++sends;
        bytes += op.transfer().bytes.count();
        EXPECT_EQ(op.transfer().peer, 1);  // the next context-parallel rank
      }
      if (op.kind == core::OpKind::Compute && op.compute().kind == core::ComputeKind::Attention) ++chunks;
    }
  }
  const int layers = 32, micro_batches = 2;  // 8 sequences over 16 / 4 = 4 data-parallel ranks
  EXPECT_EQ(sends, layers * micro_batches * 2 * 3);
  EXPECT_EQ(chunks, layers * micro_batches * 2 * 4);
  EXPECT_EQ(bytes, layers * micro_batches * 3 * (block + 2 * block));
  o.flash_attention = false;
  EXPECT_THROW((void)lower({m, topo}, o), core::ProblemError);
}

// DeepSpeed-Ulysses over u = 4 ranks (Jacobs et al. 2023): Llama-3 8B (32
// heads, 8 K/V heads of 128), s = 8192, so each rank holds T = s/u = 2048
// tokens outside attention. Per layer and micro-batch, forward: one
// all-to-all of Q, K, V, 2·T·(32·128 + 8·(128 + 128)) = 25,165,824 bytes, and
// one of the context, 2·T·32·128 = 16,777,216; backward the same two again.
// Each rank sends (u − 1)/u of each buffer. Attention covers all s tokens for
// 32/u = 8 heads: 1/u of the sequence's causal attention FLOPs,
// ½·2·8·s²·256. Parameters shard over DP × u = 16 ranks.
TEST(Ulysses, AllToAllsAroundAttention) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o;
  o.strategy = Strategy::Fsdp;
  o.seq_len = 8192;
  o.global_batch_sequences = 8;  // over 16 / 4 = 4 data-parallel ranks: 2 micro-batches
  o.ulysses = 4;
  LoweredPlan lp = lower_plan({m, topo}, o);
  const core::Schedule& s = lp.schedule;
  EXPECT_EQ(lp.plan.batch.data_parallel, 4);
  EXPECT_EQ(lp.plan.shard_ranks, 16);
  ASSERT_EQ(s.programs.size(), 1u);  // ulysses ranks are symmetric: one rank class
  const std::int64_t qkv = 2 * 2048 * (32 * 128 + 8 * 256), context = 2 * 2048 * 32 * 128;
  const int layers = 32, micro_batches = 2;
  Totals t = totals(s);
  EXPECT_EQ(qkv, 25'165'824);
  EXPECT_EQ(t.bytes["all_to_all/ulysses"], layers * micro_batches * 2 * (qkv + context));
  EXPECT_EQ(t.wire["all_to_all/ulysses"], layers * micro_batches * 2 * (qkv + context) * 3 / 4);
  double attention = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::Ulysses) {
        EXPECT_EQ(s.group(op.collective().group).ranks, (std::vector<int>{0, 1, 2, 3}));
      }
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::DpShard) {
        EXPECT_EQ(s.group(op.collective().group).ranks.size(), 16u);
      }
      if (op.kind == core::OpKind::Compute && op.compute().kind == core::ComputeKind::Attention &&
          op.name.find("bwd") == std::string::npos && op.name.find("l0.") == 0) {
        attention += op.compute().flops.count();
      }
    }
  }
  EXPECT_DOUBLE_EQ(attention, micro_batches * 0.5 * 2 * 8 * 8192.0 * 8192.0 * 256);
  // A size that does not divide the GPUs, or heads per tensor-parallel rank
  // that do not split ulysses ways (32 / tp 8 = 4 heads, ulysses 8), are refused by name.
  auto problem_keys = [&](const topologies::Topology& on, const PlanOptions& p) {
    return test_util::problem_fields(m, on, p);
  };
  o.ulysses = 3;
  EXPECT_EQ(problem_keys(topo, o), (std::set<std::string>{"ulysses"}));
  topologies::Topology big(topologies::load_cluster("dgx-h100"), 64);
  o.ulysses = 8;
  o.tp = 8;
  o.global_batch_sequences = 1;
  EXPECT_EQ(problem_keys(big, o), (std::set<std::string>{"ulysses"}));
  o.tp = 4;  // 8 heads a rank: they split (64 / (4 x 8) = 2 data-parallel ranks)
  o.global_batch_sequences = 2;
  EXPECT_TRUE(problem_keys(big, o).empty());
}

// Ulysses composes with ring CP: d' = c + cp·(u + ulysses·d), so with cp 2
// and ulysses 2 on 8 GPUs rank 0's ulysses group is {0, 2} and its ring
// neighbour rank 1; each rank holds s / 4 tokens outside attention.
TEST(Ulysses, ComposesWithRingAttention) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o;
  o.strategy = Strategy::Fsdp;
  o.seq_len = 8192;
  o.global_batch_sequences = 2;
  o.cp = 2;
  o.ulysses = 2;
  core::Schedule s = lower({m, topo}, o);
  ASSERT_EQ(s.programs.size(), 2u);  // one class per cp index
  Totals t = totals(s);
  const std::int64_t T = 8192 / 4, qkv = 2 * T * (32 * 128 + 8 * 256);
  std::int64_t block = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::Ulysses) {
        EXPECT_EQ(s.group(op.collective().group).ranks, (std::vector<int>{0, 2}));
      }
      if (op.kind == core::OpKind::Send && st.name == "cp_send" && block == 0) {
        block = op.transfer().bytes.count();
        EXPECT_EQ(op.transfer().peer, 1);
      }
    }
  }
  // The ring passes the cp chunk's K/V (s / cp tokens) of 8 / ulysses K/V heads.
  EXPECT_EQ(block, 2 * (8192 / 2) * (8 / 2) * (128 + 128));
  // One micro-batch (2 sequences over 8 / 4 = 2 data-parallel ranks), both passes.
  EXPECT_EQ(t.bytes["all_to_all/ulysses"], 32 * 2 * (qkv + 2 * T * 32 * 128));
}

}  // namespace
}  // namespace hzp::plan

namespace hzp::plan {
namespace {

// NCCL's buffers: kNcclBufferBytes for every communicator a rank uses.
TEST(Memory, NcclBuffersPerCommunicator) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 32);
  PlanOptions o = options(Strategy::Hzp, 64 * 8192);
  o.param_shard = 4;
  o.grad_shard = 8;
  o.optim_shard = 16;
  // Groups of rank 0: dp_shard (4), dp_grad (8), dp_optim (16/8 = 2), dp_replica (32/16 = 2), dp_regather (16/4 = 4).
  core::Schedule s = lower({m, topo}, o);
  std::int64_t nccl = 0;
  for (const auto& op : s.programs[0].streams[0].ops) {
    if (op.kind == core::OpKind::Alloc && op.buffer().buffer_class == core::BufferClass::NcclBuffers)
      nccl = op.buffer().bytes.count();
  }
  EXPECT_EQ(nccl, 5 * kNcclBufferBytes);
}

// Overlap options move communication off the critical path.
TEST(Overlap, ParamGatherAndTensorParallel) {
  models::ModelSpec m = models::load_model("llama3-8b");
  PlanOptions o;
  o.strategy = Strategy::Zero1;
  o.global_batch_sequences = 32;
  o.seq_len = 4096;
  Simulated plain = simulate(m, 16, o);
  o.overlap_param_gather = true;
  Simulated overlapped = simulate(m, 16, o);
  EXPECT_LT(overlapped.step, plain.step);
  // Tensor-parallel overlap at chunks large enough to fill an H100 (each
  // chunk 8,192 tokens of a 4 x 8,192 micro-batch: at 2,048 the chunked
  // GEMMs fill a third of the SMs and overlapping loses, as the tiling model
  // says it should).
  o = PlanOptions{};
  o.strategy = Strategy::Zero1;
  o.global_batch_sequences = 8;
  o.micro_batch = 4;
  o.seq_len = 8192;
  o.tp = 8;
  Simulated tp = simulate(m, 16, o);
  o.tp_comm_overlap = true;
  Simulated tp_overlapped = simulate(m, 16, o);
  EXPECT_LT(tp_overlapped.step, tp.step);
}

// hzp-async with these overlap knobs added (its catalog text, edited).
std::shared_ptr<const stacks::Stack> async_with(const std::string& knobs) {
  auto [text, file] = stacks::stack_text("hzp-async");
  const std::string key = "\"overlap\": ";
  text.insert(text.find(key) + key.size() + 1, knobs);  // past the object's opening brace
  return stacks::stack_from_text(text, file);
}

// llama3-8b's first four layers at tp 4 on 16 H100s, one micro-batch of
// 8,192 tokens per rank, tensor-parallel overlap on.
PlanOptions tp4_overlapped() {
  PlanOptions o;
  o.strategy = Strategy::Zero1;
  o.global_batch_sequences = 4;
  o.seq_len = 8192;
  o.tp = 4;
  o.tp_comm_overlap = true;
  return o;
}

// The ops of program 0's stream `name`, in issue order.
const std::vector<core::Op>& stream_ops(const core::Schedule& s, const std::string& name) {
  for (const auto& st : s.programs.at(0).streams) {
    if (st.name == name) return st.ops;
  }
  ADD_FAILURE() << "no stream " << name;
  static const std::vector<core::Op> none;
  return none;
}

// The split cut: a GEMM in 4 chunks along m; a stack that runs the chunks on
// 3 compute streams at once (Transformer Engine's userbuffers) judges a
// chunk's efficiency as 3 chunks together: its shape has m = 3 x m / 4, its
// FLOPs stay a quarter.
TEST(Overlap, TpChunksShareTheDeviceAsTheStackRunsThem) {
  const models::ModelSpec m = four_layers();
  PlanOptions o = tp4_overlapped();
  o.tp = 8;
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  auto first_chunk = [&](std::shared_ptr<const stacks::Stack> stack) {
    const core::Schedule s = lower({m, topo, std::move(stack)}, o);
    for (const auto& op : stream_ops(s, "compute")) {
      if (op.kind == core::OpKind::Compute && op.compute().gemm && op.name.ends_with(".chunk0")) return op;
    }
    ADD_FAILURE() << "no chunked GEMM";
    return core::Op{};
  };
  const core::Op one = first_chunk(stacks::resolve_stack("hzp-async"));
  const core::Op three = first_chunk(async_with("\"tp_gemm_streams\": 3,"));
  ASSERT_TRUE(one.compute().gemm && three.compute().gemm);
  EXPECT_EQ(one.name, three.name);
  EXPECT_EQ(three.compute().gemm->m, 3 * one.compute().gemm->m);
  EXPECT_EQ(three.compute().gemm->n, one.compute().gemm->n);
  EXPECT_DOUBLE_EQ(three.compute().flops.count(), one.compute().flops.count());
}

// The ring-exchange cut of an all-gather and its GEMM (Transformer Engine's
// ring_exchange, PyTorch's fused_all_gather_matmul): tp = 4 steps. The QKV
// GEMM (8,192 x 1,536 x 4,096 per rank: 12 of llama3-8b's 48 q/k/v heads of
// 128) runs in 4 chunks of a quarter of its FLOPs; the first is the rank's
// own shard and waits for nothing, each other waits for its shard. The
// gathered buffer (8,192 x 4,096 bf16 = 64 MiB) arrives in 3 steps, each an
// all-to-all of a third of it, of which each rank sends a quarter: one shard.
TEST(Overlap, RingExchangeStartsOnTheOwnShard) {
  const models::ModelSpec m = four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  const core::Schedule s = lower({m, topo, async_with("\"tp_gather_cut\": \"ring_exchange\",")}, tp4_overlapped());
  const std::int64_t gathered = 2LL * 8192 * 4096;
  const double qkv_flops = 2.0 * 8192 * 1536 * 4096;
  std::vector<std::int64_t> steps;
  for (const auto& op : stream_ops(s, "tp_comm")) {
    if (op.kind == core::OpKind::Collective && op.name.starts_with("l0.attn.tp_allgather.chunk")) {
      EXPECT_EQ(op.collective().kind, core::CollectiveKind::AllToAll);
      EXPECT_NE(op.name, "l0.attn.tp_allgather.chunk0");
      steps.push_back(op.collective().bytes.count());
    }
  }
  EXPECT_EQ(steps, std::vector<std::int64_t>(3, gathered / 3));
  const auto& comp = stream_ops(s, "compute");
  int chunks = 0;
  for (std::size_t i = 1; i < comp.size(); ++i) {
    if (!comp[i].name.starts_with("l0.qkv.chunk")) continue;
    ++chunks;
    EXPECT_DOUBLE_EQ(comp[i].compute().flops.count(), qkv_flops / 4) << comp[i].name;
    EXPECT_EQ(comp[i - 1].kind == core::OpKind::Wait, comp[i].name != "l0.qkv.chunk0") << comp[i].name;
  }
  EXPECT_EQ(chunks, 4);
  // A step costs what a point-to-point copy of one shard does.
  const cost::PerfModel pm(topo);
  const cost::GroupSpan tp = pm.span({0, 1, 2, 3});
  EXPECT_NEAR(pm.collective(core::CollectiveKind::AllToAll, core::Bytes(gathered / 3), tp).to_seconds(),
              pm.p2p(core::Bytes(gathered / 3 * 3 / 4), 0, 1).to_seconds(), 1e-9);
}

// Transformer Engine's bulk backward of a column-parallel linear: the input
// is all-gathered again (sequence parallelism saved only its shard) beside the
// input-gradient GEMM, whose result is then reduce-scattered beside the
// weight-gradient GEMM. Per layer and micro-batch two such linears (QKV, FFN
// up), and the output layer, each gather 8,192 x 4,096 bf16 more: over 4
// layers 9 x 64 MiB.
TEST(Overlap, BulkBackwardGathersTheInputAgainBesideTheInputGradient) {
  const models::ModelSpec m = four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  const PlanOptions o = tp4_overlapped();
  const core::Schedule split = lower({m, topo, stacks::resolve_stack("hzp-async")}, o);
  const core::Schedule bulk = lower({m, topo, async_with("\"tp_bulk_backward\": true,")}, o);
  const std::int64_t gathered = 2LL * 8192 * 4096;
  EXPECT_EQ(totals(bulk).bytes["all_gather/tp"] - totals(split).bytes["all_gather/tp"], 9 * gathered);
  EXPECT_EQ(totals(bulk).bytes["reduce_scatter/tp"], totals(split).bytes["reduce_scatter/tp"]);
  // On the tp stream: the regather, then the whole reduce-scatter after the input gradient.
  std::vector<std::string> tp;
  for (const auto& op : stream_ops(bulk, "tp_comm")) {
    if (op.kind == core::OpKind::Collective && op.name.starts_with("l0.attn.tp_allgather.bwd")) tp.push_back(op.name);
  }
  EXPECT_EQ(tp, (std::vector<std::string>{"l0.attn.tp_allgather.bwd.input_regather", "l0.attn.tp_allgather.bwd"}));
  // On the compute stream: the input gradient, a wait for the regathered
  // input, the weight gradient, a wait for the reduce-scatter.
  const auto& comp = stream_ops(bulk, "compute");
  auto at = std::find_if(comp.begin(), comp.end(), [](const core::Op& op) { return op.name == "l0.qkv.dgrad"; });
  ASSERT_TRUE(at != comp.end() && comp.end() - at >= 5);
  EXPECT_EQ(at[1].kind, core::OpKind::Record);
  EXPECT_EQ(at[2].kind, core::OpKind::Wait);
  EXPECT_EQ(at[3].name, "l0.qkv.wgrad");
  EXPECT_EQ(at[4].kind, core::OpKind::Wait);
}

}  // namespace
}  // namespace hzp::plan

namespace hzp::plan {
namespace {

// overlap_grad_reduce off: the final-gradient reductions wait for the whole
// backward pass, so none of their time hides behind it.
TEST(Overlap, GradReduceAfterTheWholeBackward) {
  const models::ModelSpec m = four_layers();
  PlanOptions o;
  o.strategy = Strategy::Ddp;
  o.global_batch_sequences = 16;
  o.seq_len = 4096;
  const Simulated overlapped = simulate(m, 16, o);
  o.overlap_grad_reduce = false;
  const Simulated after = simulate(m, 16, o);

  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Program& p = after.schedule.programs.at(0);
  const auto stream = [&](core::StreamKind k) -> const core::Stream& {
    return *std::find_if(p.streams.begin(), p.streams.end(), [&](const core::Stream& s) { return s.kind == k; });
  };
  // The last event the compute stream records in backward, and what the
  // reduce stream waits for before its first all-reduce.
  int last_bwd = -1;
  std::int64_t tail = 0;  // Adam and zeroing: compute that follows the reductions
  for (const auto& op : stream(core::StreamKind::Compute).ops) {
    if (op.kind == core::OpKind::Record && op.name.ends_with(".bwd_done")) last_bwd = op.event().id;
    if (op.kind == core::OpKind::Compute &&
        (op.compute().kind == core::ComputeKind::Optimizer || op.name == "zero_grads"))
      tail += pm.compute(op).count_ns();
  }
  int first_wait = -2;
  std::int64_t reductions = 0;
  int all_reduces = 0;
  for (const auto& op : stream(core::StreamKind::GradReduce).ops) {
    if (op.kind == core::OpKind::Wait && first_wait == -2) first_wait = op.event().id;
    if (op.kind == core::OpKind::Collective) {
      EXPECT_NE(first_wait, -2) << op.name << " issued before any wait";
      const core::Op::Collective& c = op.collective();
      reductions += pm.collective(c.kind, c.bytes, pm.span(after.schedule.group(c.group).ranks)).count_ns();
      ++all_reduces;
    }
  }
  EXPECT_EQ(all_reduces, 4 + 2);  // one per layer, embedding and head
  EXPECT_EQ(first_wait, last_bwd);
  // Every reduction is exposed: the step is the backward's end, then all of them, then the optimizer.
  EXPECT_GE(after.step, after.busy.at(0) - tail + reductions);
  EXPECT_GT(after.step, overlapped.step);
}

}  // namespace
}  // namespace hzp::plan
