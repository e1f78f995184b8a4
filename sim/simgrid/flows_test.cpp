// Aggregated flows of each algorithm, by hand: per-rank bytes B of the ring
// ((P−1)/P·N all-gather/reduce-scatter, 2(P−1)/P·N all-reduce, N broadcast),
// divided by the link class's efficiency at the message size.
#include "sim/simgrid/flows.hpp"

#include <gtest/gtest.h>

#include "topologies/catalog.hpp"

namespace hzp::sim::simgrid {
namespace {

using core::Bytes;
using core::CollectiveKind;

topologies::PerfModel h100(int gpus) {
  return topologies::PerfModel(topologies::Topology(topologies::load_cluster("dgx-h100"), gpus));
}

std::vector<int> iota(int from, int n, int stride = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i * stride);
  return v;
}

double bytes_between(const FlowSet& fs, int src, int dst) {
  double b = 0;
  for (const auto& f : fs.flows) {
    if (f.src == src && f.dst == dst) b += f.wire_bytes;
  }
  return b;
}

TEST(Flows, RingInsideOneNodeSendsToTheNextMember) {
  auto pm = h100(8);
  const Bytes n(1 << 30);
  FlowSet fs = lower_collective(pm, CollectiveKind::AllGather, n, iota(0, 8), 16);
  ASSERT_EQ(fs.flows.size(), 8u);
  const double expect = 7.0 / 8.0 * (1 << 30) / pm.scale_up_efficiency(n);
  for (int j = 0; j < 8; ++j) EXPECT_DOUBLE_EQ(bytes_between(fs, j, (j + 1) % 8), expect);
  EXPECT_DOUBLE_EQ(fs.latency_s, pm.collective_cost(CollectiveKind::AllGather, n, pm.span(iota(0, 8))).latency_s);
  // Uncontended, the busiest link (450 GB/s) carries exactly the α-β bandwidth term.
  EXPECT_NEAR(expect / 450e9, pm.collective_cost(CollectiveKind::AllGather, n, pm.span(iota(0, 8))).transfer_s, 1e-12);
}

TEST(Flows, RingAcrossNodesUsesEveryNicRailAligned) {
  auto pm = h100(16);
  const Bytes n(1 << 30);
  FlowSet fs = lower_collective(pm, CollectiveKind::ReduceScatter, n, iota(0, 16), 16);
  const double B = 15.0 / 16.0 * (1 << 30);
  // 16 scale-up flows (each member to the next in its node, PXN hop included)
  // and 16 NIC flows: 2 channels per local index, B/16 each, node 0 <-> node 1 on the same rail.
  ASSERT_EQ(fs.flows.size(), 32u);
  for (int j = 0; j < 8; ++j) {
    EXPECT_DOUBLE_EQ(bytes_between(fs, j, (j + 1) % 8), B / pm.scale_up_efficiency(n));
    EXPECT_DOUBLE_EQ(bytes_between(fs, j, 8 + j), 2 * B / 16 / pm.scale_out_efficiency(n));
    EXPECT_DOUBLE_EQ(bytes_between(fs, 8 + j, j), 2 * B / 16 / pm.scale_out_efficiency(n));
  }
  // Each NIC carries B/8: at 50 GB/s that is the α-β transfer time (NIC-bound: 8 × 50 < 450).
  auto cost = pm.collective_cost(CollectiveKind::ReduceScatter, n, pm.span(iota(0, 16)));
  EXPECT_NEAR(B / 8 / pm.scale_out_efficiency(n) / 50e9, cost.transfer_s, 1e-12);
}

TEST(Flows, OneMemberPerNodeIsANicRing) {
  auto pm = h100(32);
  const Bytes n(64 << 20);
  FlowSet fs = lower_collective(pm, CollectiveKind::AllReduce, n, iota(0, 4, 8), 4);
  ASSERT_EQ(fs.algorithm, topologies::Algorithm::Ring);
  ASSERT_EQ(fs.flows.size(), 4u);
  const double B = 2.0 * 3.0 / 4.0 * (64 << 20);
  for (int d = 0; d < 4; ++d) {
    EXPECT_DOUBLE_EQ(bytes_between(fs, 8 * d, 8 * ((d + 1) % 4)), B / pm.scale_out_efficiency(n));
  }
}

TEST(Flows, AllToAllIsDirectPairwise) {
  auto pm = h100(16);
  const Bytes n(8 << 20);
  std::vector<int> ranks{0, 1, 8, 9};
  FlowSet fs = lower_collective(pm, CollectiveKind::AllToAll, n, ranks, 16);
  EXPECT_EQ(fs.algorithm, topologies::Algorithm::Pairwise);
  ASSERT_EQ(fs.flows.size(), 12u);
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 1), (8 << 20) / 4.0 / pm.scale_up_efficiency(n));
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 9), (8 << 20) / 4.0 / pm.scale_out_efficiency(n));
}

TEST(Flows, SmallAllReduceAcrossManyNodesTakesTheTree) {
  auto pm = h100(512);
  const Bytes n(64 << 10);
  auto ranks = iota(0, 64, 8);
  FlowSet fs = lower_collective(pm, CollectiveKind::AllReduce, n, ranks, 16);
  ASSERT_EQ(fs.algorithm, topologies::Algorithm::Tree);
  // Tree: the same rail-aligned links, 2N per member.
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 8), 2.0 * (64 << 10) / pm.scale_out_efficiency(n));
}

TEST(Flows, BroadcastCarriesTheWholeMessage) {
  auto pm = h100(8);
  const Bytes n(1 << 20);
  FlowSet fs = lower_collective(pm, CollectiveKind::Broadcast, n, iota(0, 4), 16);
  EXPECT_DOUBLE_EQ(bytes_between(fs, 3, 0), (1 << 20) / pm.scale_up_efficiency(n));
}

TEST(Flows, PointToPointIsOneFlowWithThePathLatency) {
  auto pm = h100(16);
  const Bytes n(1 << 20);
  FlowSet fs = lower_p2p(pm, n, 3, 11);
  ASSERT_EQ(fs.flows.size(), 1u);
  EXPECT_DOUBLE_EQ(fs.flows[0].wire_bytes, (1 << 20) / pm.scale_out_efficiency(n));
  EXPECT_NEAR(fs.latency_s + fs.flows[0].wire_bytes / 50e9, pm.p2p(n, 3, 11).to_seconds(), 1e-9);
}

TEST(Flows, SingleRankOrEmptyMessageMovesNothing) {
  auto pm = h100(8);
  EXPECT_TRUE(lower_collective(pm, CollectiveKind::AllGather, Bytes(1 << 20), {3}, 16).flows.empty());
  EXPECT_TRUE(lower_collective(pm, CollectiveKind::AllGather, Bytes(0), iota(0, 8), 16).flows.empty());
}

}  // namespace
}  // namespace hzp::sim::simgrid
