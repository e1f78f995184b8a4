// Pipelines: 1F1B and interleaved orders, their bubbles, and the transfers
// between stages.
#include "plan/plan.hpp"

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"

namespace hzp::plan {
namespace {

TEST(PipelineOrder, OneFOneB) {
  // Stage 0 of 4 with 8 micro-batches: 3 warm-up forwards, 5 forward/backward pairs, 3 backwards.
  std::vector<PipelineSlot> o = pipeline_order(0, 4, 1, 8);
  std::string text;
  for (const auto& s : o) text += (s.backward ? "B" : "F") + std::to_string(s.micro_batch) + " ";
  EXPECT_EQ(text, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  // The last stage alternates from the start.
  text.clear();
  for (const auto& s : pipeline_order(3, 4, 1, 3))
    text += (s.backward ? "B" : "F") + std::to_string(s.micro_batch) + " ";
  EXPECT_EQ(text, "F0 B0 F1 B1 F2 B2 ");
}

TEST(PipelineOrder, InterleavedCoversEveryChunkAndMicroBatchOnce) {
  for (int stage = 0; stage < 4; ++stage) {
    auto o = pipeline_order(stage, 4, 2, 8);
    ASSERT_EQ(o.size(), 2u * 2 * 8);
    std::set<std::tuple<std::int64_t, int, bool>> seen;
    for (const auto& s : o) EXPECT_TRUE(seen.insert({s.micro_batch, s.chunk, s.backward}).second);
    // Every backward comes after its forward.
    for (std::size_t i = 0; i < o.size(); ++i) {
      if (!o[i].backward) continue;
      auto f = std::find(o.begin(), o.end(), PipelineSlot{o[i].micro_batch, o[i].chunk, false});
      EXPECT_LT(f - o.begin(), static_cast<std::ptrdiff_t>(i));
    }
  }
}

// Replays a Schedule: the step time and each program's compute time on its
// compute stream (stream 0), in ns.
using test_util::ddp_two_stages;
using test_util::four_layers;
using test_util::measure;
using test_util::Timing;
// stages, measured from a replayed timeline.
double bubble_fraction(int pp, int vpp, int m) {
  models::ModelSpec model = models::load_model("llama3-8b");  // 32 layers
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), pp);
  PlanOptions o = test_util::ddp_pipeline(pp, m);
  o.vpp = vpp;
  core::Schedule s = lower({model, topo}, o);
  test_util::without_launch_latency(s);
  core::ReplayCosts costs;
  // Layers cost their FLOPs (1 ns per GFLOP); the embedding, head and optimizer
  // cost nothing so that every stage does the same work.
  costs.compute = [](const core::Program&, const core::Op& op) {
    bool free = op.compute().kind == core::ComputeKind::Optimizer || op.name.rfind("embedding.", 0) == 0 ||
                op.name.rfind("head.", 0) == 0 || op.name == "zero_grads";
    return free ? core::Duration{} : core::Duration::ns(std::llround(op.compute().flops.count() / 1e9));
  };
  Timing t = measure(s, costs);
  return 1.0 - static_cast<double>(t.busy[0]) / static_cast<double>(t.step);
}

// Narayanan et al. 2021: 1F1B idles (p−1)/(m+p−1) of the step; interleaving
// with v chunks per stage divides the bubble time by v.
TEST(Pipeline, OneFOneBBubble) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{4, 16}, std::pair{2, 8}, std::pair{8, 8}}) {
    EXPECT_NEAR(bubble_fraction(p, 1, m), (p - 1.0) / (m + p - 1.0), 1e-4) << "p=" << p << " m=" << m;
  }
}

TEST(Pipeline, InterleavingDividesTheBubbleByV) {
  for (auto [p, v, m] : {std::tuple{4, 2, 8}, std::tuple{4, 4, 8}, std::tuple{2, 2, 8}}) {
    double bubble = (p - 1.0) / v;  // in units of one micro-batch's forward + backward on a stage
    EXPECT_NEAR(bubble_fraction(p, v, m), bubble / (m + bubble), 1e-4) << "p=" << p << " v=" << v << " m=" << m;
  }
}

TEST(Pipeline, ComposesWithTensorParallelAndShardedDataParallel) {
  models::ModelSpec model = models::load_model("llama3-8b");
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 64);
  PlanOptions o;
  o.strategy = Strategy::Hzp;
  o.global_batch_sequences = 64;
  o.seq_len = 4096;
  o.tp = 4;
  o.pp = 2;
  o.vpp = 2;
  core::Schedule s = lower({model, topo}, o);  // checked: collectives match, send/recv pair up, no deadlock
  ASSERT_EQ(s.programs.size(), 2u);
  EXPECT_EQ(s.programs[1].ranks.front(), 32);  // stage 1 = ranks 32..63
  int tp_collectives = 0, sends = 0;
  for (const auto& st : s.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective && s.group(op.collective().group).kind == core::GroupKind::Tp) {
        ++tp_collectives;
        EXPECT_EQ(s.group(op.collective().group).ranks, (std::vector<int>{0, 1, 2, 3}));
      }
      if (op.kind == core::OpKind::Send) ++sends;
    }
  }
  EXPECT_GT(tp_collectives, 0);
  // Stage 0 sends an activation for every (micro-batch, chunk) forward and a
  // gradient for every backward except chunk 0's: 8 micro-batches per rank.
  EXPECT_EQ(sends, 8 * 2 + 8 * 1);
}

// Tensor parallel without sequence parallelism: each rank sends its 1/tp
// slice of the boundary, s·b·h·2/tp bytes, and the receivers all-gather the
// s·b·h·2 bytes over their tp group (Megatron's scatter/gather).
TEST(Pipeline, ScatterGatherAcrossStagesWithoutSequenceParallel) {
  const models::ModelSpec model = four_layers();
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o = ddp_two_stages(8);
  o.micro_batch = 2;
  o.tp = 4;
  const std::int64_t activation = 4096 * 2 * model.hidden * 2;
  for (const bool sp : {true, false}) {
    o.sequence_parallel = sp;
    const core::Schedule s = lower({model, topo}, o);
    int recvs = 0, gathers = 0;
    for (const auto& st : s.programs[1].streams) {  // the last stage receives activations
      for (const auto& op : st.ops) {
        if (op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv) {
          EXPECT_EQ(op.transfer().bytes.count(), activation / 4) << op.name;
          recvs += op.kind == core::OpKind::Recv;
        }
        if (op.name.starts_with("gather act")) {
          ++gathers;
          EXPECT_EQ(op.collective().kind, core::CollectiveKind::AllGather);
          EXPECT_EQ(s.group(op.collective().group).kind, core::GroupKind::Tp);
          EXPECT_EQ(op.collective().bytes.count(), activation);
        }
      }
    }
    EXPECT_EQ(recvs, 2) << sp;  // one activation per micro-batch (8 / 2 data-parallel ranks / 2 per micro-batch)
    EXPECT_EQ(gathers, sp ? 0 : 2) << sp;
  }
}

// pipeline_p2p_sync: the compute thread blocks on every receive (a Sync on the
// event recorded after it), so the host cannot run ahead of a transfer.
TEST(Pipeline, P2pSyncBlocksTheHostOnEveryReceive) {
  const models::ModelSpec model = four_layers();
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o = ddp_two_stages(16);
  for (const bool sync : {false, true}) {
    o.pipeline_p2p_sync = sync;
    const core::Schedule s = lower({model, topo}, o);
    for (const auto& prog : s.programs) {
      int recvs = 0, host_waits = 0, last_recv_event = -1;
      for (const auto& st : prog.streams) {
        if (st.kind != core::StreamKind::Compute) continue;
        for (const auto& op : st.ops) {
          if (op.kind == core::OpKind::Recv) ++recvs;
          if (op.kind == core::OpKind::Record && op.name.ends_with(" received")) last_recv_event = op.event().id;
          if (op.kind == core::OpKind::Sync &&
              (op.name.starts_with("host waits act") || op.name.starts_with("host waits grad"))) {
            EXPECT_EQ(op.event().id, last_recv_event);
            ++host_waits;
          }
        }
      }
      EXPECT_EQ(recvs, 2) << prog.name;  // 16 sequences / 8 data-parallel ranks: 2 micro-batches of 1
      EXPECT_EQ(host_waits, sync ? recvs : 0) << prog.name;
    }
  }
}

}  // namespace
}  // namespace hzp::plan
