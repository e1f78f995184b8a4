// Lowering DDP and FSDP: batch splitting, and collective volumes and static
// memory against their closed forms.
#include "plan/plan.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace hzp::plan {
namespace {

struct Totals {
  std::int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0;
  int collectives = 0;
  std::int64_t static_alloc = 0;
};

Totals totals(const core::Schedule& s) {
  Totals t;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective) {
        ++t.collectives;
        if (op.collective == core::CollectiveKind::AllGather) t.all_gather += op.bytes.count();
        if (op.collective == core::CollectiveKind::ReduceScatter) t.reduce_scatter += op.bytes.count();
        if (op.collective == core::CollectiveKind::AllReduce) t.all_reduce += op.bytes.count();
      }
      if (op.kind == core::OpKind::Alloc && op.buffer.find('.') == std::string::npos)
        t.static_alloc += op.bytes.count();
    }
  }
  return t;
}

PlanOptions options(Strategy s, std::int64_t tokens) {
  PlanOptions o;
  o.strategy = s;
  o.global_batch_tokens = tokens;
  return o;
}

TEST(SplitBatch, DividesOrNamesTheOption) {
  models::ModelSpec m = models::load_model("llama3-70b");
  BatchSplit b = split_batch(m, 1024, options(Strategy::Fsdp, 16 << 20));
  EXPECT_EQ(b.seq_len, 8192);
  EXPECT_EQ(b.sequences, 2048);
  EXPECT_EQ(b.micro_batches, 2);
  try {
    (void)split_batch(m, 1024, options(Strategy::Fsdp, 1000));
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "command line: --global-batch-tokens: expected a positive multiple of the sequence length 8192, got 1000");
  }
  PlanOptions o = options(Strategy::Fsdp, 16 << 20);
  o.micro_batch = 4;
  try {
    (void)split_batch(m, 1024, o);
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a multiple of 4096 sequences"), std::string::npos);
  }
}

TEST(LowerFsdp, VolumesAndMemoryMatchClosedForm) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  const std::int64_t D = 16, M = 4;  // 64 sequences of 8192 over 16 ranks: 4 micro-batches
  core::Schedule s = lower(m, topo, options(Strategy::Fsdp, 64 * 8192));
  ASSERT_EQ(s.step.micro_batches, M);
  models::StepGraph g = models::build_step_graph(m, models::GraphOptions{.seq_len = 8192, .micro_batch = 1});
  std::int64_t padded = 0, shard = 0;
  for (const auto& u : g.units) {
    padded += (u.weight_params + D - 1) / D * D;
    shard += (u.params + D - 1) / D;
  }
  Totals t = totals(s);
  // Every unit gathered (bf16) before forward and before backward of every micro-batch.
  EXPECT_EQ(t.all_gather, 2 * M * 2 * padded);
  // Every micro-batch's bf16 gradients reduce-scattered once.
  EXPECT_EQ(t.reduce_scatter, M * 2 * padded);
  EXPECT_EQ(t.all_reduce, 0);
  EXPECT_EQ(t.collectives, 3 * M * static_cast<int>(g.units.size()));
  // bf16 parameter shard + fp32 gradient shard + fp32 master and Adam moments.
  EXPECT_EQ(t.static_alloc, (2 + 4 + 12) * shard);
}

TEST(LowerDdp, OneAllReducePerUnitAfterLastMicroBatch) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  core::Schedule s = lower(m, topo, options(Strategy::Ddp, 64 * 8192));
  std::int64_t params = models::count_params(m).total;
  Totals t = totals(s);
  EXPECT_EQ(t.all_reduce, 4 * params);  // fp32 gradients, once per step
  EXPECT_EQ(t.all_gather + t.reduce_scatter, 0);
  EXPECT_EQ(t.static_alloc, (2 + 4 + 12) * params);
}

TEST(Lower, HashIsDeterministic) {
  models::ModelSpec m = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  auto a = core::schedule_hash(lower(m, topo, options(Strategy::Fsdp, 16 * 8192)));
  auto b = core::schedule_hash(lower(m, topo, options(Strategy::Fsdp, 16 * 8192)));
  EXPECT_EQ(a, b);
  PlanOptions o = options(Strategy::Fsdp, 16 * 8192);
  o.prefetch_depth = 2;
  EXPECT_NE(core::schedule_hash(lower(m, topo, o)), a);
}

}  // namespace
}  // namespace hzp::plan
