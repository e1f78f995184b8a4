// Aggregated flows of each algorithm, by hand: per-rank bytes B of the ring
// ((P−1)/P·N all-gather/reduce-scatter, 2(P−1)/P·N all-reduce, N broadcast),
// divided by the link class's efficiency at the message size.
#include "sim/simgrid/flows.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "sim/simgrid/platform.hpp"
#include "topologies/catalog.hpp"

namespace hzp::sim::simgrid {
namespace {

using core::Bytes;
using core::CollectiveKind;

cost::PerfModel h100(int gpus) {
  return cost::PerfModel(topologies::Topology(topologies::load_cluster("dgx-h100"), gpus));
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
  const double eff = pm.collective_cost(CollectiveKind::AllGather, n, pm.span(iota(0, 8))).scale_up_efficiency;
  EXPECT_DOUBLE_EQ(eff, pm.topology().spec().scale_up.ring_efficiency);  // Simple, every channel
  const double expect = 7.0 / 8.0 * (1 << 30) / eff;
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
  auto cost = pm.collective_cost(CollectiveKind::ReduceScatter, n, pm.span(iota(0, 16)));
  // 16 scale-up flows (each member to the next in its node, PXN hop included)
  // and 16 NIC flows: 2 channels per local index, B/16 each, node 0 <-> node 1 on the same rail.
  ASSERT_EQ(fs.flows.size(), 32u);
  for (int j = 0; j < 8; ++j) {
    EXPECT_DOUBLE_EQ(bytes_between(fs, j, (j + 1) % 8), B / cost.scale_up_efficiency);
    EXPECT_DOUBLE_EQ(bytes_between(fs, j, 8 + j), 2 * B / 16 / cost.scale_out_efficiency);
    EXPECT_DOUBLE_EQ(bytes_between(fs, 8 + j, j), 2 * B / 16 / cost.scale_out_efficiency);
  }
  // Each NIC carries B/8 and each NVLink B: the slower of the two at their
  // rates is the α-β transfer time.
  EXPECT_NEAR(std::max(B / 8 / cost.scale_out_efficiency / 50e9, B / cost.scale_up_efficiency / 450e9), cost.transfer_s,
              1e-12);
}

TEST(Flows, OneMemberPerNodeIsANicRing) {
  auto pm = h100(32);
  const Bytes n(64 << 20);
  FlowSet fs = lower_collective(pm, CollectiveKind::AllReduce, n, iota(0, 4, 8), 4);
  ASSERT_EQ(fs.shape, cost::FlowShape::Ring);
  const double eff = pm.collective_cost(CollectiveKind::AllReduce, n, pm.span(iota(0, 4, 8))).scale_out_efficiency;
  ASSERT_EQ(fs.flows.size(), 4u);
  const double B = 2.0 * 3.0 / 4.0 * (64 << 20);
  for (int d = 0; d < 4; ++d) {
    EXPECT_DOUBLE_EQ(bytes_between(fs, 8 * d, 8 * ((d + 1) % 4)), B / eff);
  }
}

TEST(Flows, AllToAllIsDirectPairwise) {
  auto pm = h100(16);
  const Bytes n(8 << 20);
  std::vector<int> ranks{0, 1, 8, 9};
  FlowSet fs = lower_collective(pm, CollectiveKind::AllToAll, n, ranks, 16);
  EXPECT_EQ(fs.shape, cost::FlowShape::Pairwise);
  ASSERT_EQ(fs.flows.size(), 12u);
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 1), (8 << 20) / 4.0 / pm.scale_up_efficiency());
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 9), (8 << 20) / 4.0 / pm.scale_out_efficiency());
}

TEST(Flows, SmallAllReduceAcrossManyNodesTakesTheTree) {
  auto pm = h100(512);
  const Bytes n(64 << 10);
  auto ranks = iota(0, 64, 8);
  FlowSet fs = lower_collective(pm, CollectiveKind::AllReduce, n, ranks, 16);
  ASSERT_EQ(fs.shape, cost::FlowShape::Tree);
  // Tree: the same rail-aligned links, 2N per member, at the chosen protocol's share.
  const double eff = pm.collective_cost(CollectiveKind::AllReduce, n, pm.span(ranks)).scale_out_efficiency;
  EXPECT_LT(eff, pm.scale_out_efficiency());
  EXPECT_DOUBLE_EQ(bytes_between(fs, 0, 8), 2.0 * (64 << 10) / eff);
}

TEST(Flows, BroadcastCarriesTheWholeMessage) {
  auto pm = h100(8);
  const Bytes n(1 << 20);
  FlowSet fs = lower_collective(pm, CollectiveKind::Broadcast, n, iota(0, 4), 16);
  const double eff = pm.collective_cost(CollectiveKind::Broadcast, n, pm.span(iota(0, 4))).scale_up_efficiency;
  EXPECT_DOUBLE_EQ(bytes_between(fs, 3, 0), (1 << 20) / eff);
}

TEST(Flows, PointToPointIsOneFlowWithThePathLatency) {
  auto pm = h100(16);
  const Bytes n(1 << 20);
  FlowSet fs = lower_p2p(pm, n, 3, 11);
  ASSERT_EQ(fs.flows.size(), 1u);
  EXPECT_DOUBLE_EQ(fs.flows[0].wire_bytes, (1 << 20) / pm.scale_out_efficiency());
  EXPECT_NEAR(fs.latency_s + fs.flows[0].wire_bytes / 50e9, pm.p2p(n, 3, 11).to_seconds(), 1e-9);
}

TEST(Flows, SingleRankOrEmptyMessageMovesNothing) {
  auto pm = h100(8);
  EXPECT_TRUE(lower_collective(pm, CollectiveKind::AllGather, Bytes(1 << 20), {3}, 16).flows.empty());
  EXPECT_TRUE(lower_collective(pm, CollectiveKind::AllGather, Bytes(0), iota(0, 8), 16).flows.empty());
}

}  // namespace
}  // namespace hzp::sim::simgrid

namespace hzp::sim::simgrid {
namespace {

// The fat tree's shape: rails put NIC r of consecutive nodes under one leaf;
// uplinks are down ports / oversubscription; every device sits at one leaf.
TEST(Platform, RailOptimizedFatTreeShape) {
  auto pm = h100(512);  // 64 nodes; a leaf holds rail r of 32 nodes
  const FatTreeShape s = fat_tree_shape(pm.topology());
  EXPECT_EQ(s.down, (std::vector<unsigned>{32, 16}));
  EXPECT_EQ(s.up, (std::vector<unsigned>{1, 32}));
  ASSERT_EQ(s.device_at.size(), 512u);
  EXPECT_EQ(s.device_at[0], 0);   // node 0, rail 0
  EXPECT_EQ(s.device_at[1], 8);   // node 1, rail 0
  EXPECT_EQ(s.device_at[32], 1);  // node 0, rail 1
  std::vector<int> seen(512, 0);
  for (int d : s.device_at) ++seen.at(static_cast<std::size_t>(d));
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  const auto leaf = s.leaf_of_device();
  EXPECT_EQ(leaf[0], leaf[8]);  // same rail, neighbouring nodes
  EXPECT_NE(leaf[0], leaf[1]);  // other rail
}

// A node count that leaves the last block of leaves partly empty (21 nodes of
// DGX A100, 20 a leaf with rails): the last node's eight rails need their own
// eight leaves, and every device still sits at exactly one position.
TEST(Platform, RailOptimizedPartialLastBlockPlacesEveryDevice) {
  topologies::Topology topo(topologies::cluster_from_json(topologies::cluster_text("dgx-a100").first, "a100.json"),
                            168);
  const FatTreeShape s = fat_tree_shape(topo);
  ASSERT_EQ(s.down.size(), 2u);
  EXPECT_EQ(s.down, (std::vector<unsigned>{20, 16}));  // 2 blocks x 8 rails
  std::vector<int> seen(168, 0);
  for (int d : s.device_at) {
    if (d >= 0) ++seen.at(static_cast<std::size_t>(d));
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  const auto leaf = s.leaf_of_device();
  EXPECT_NE(leaf[160], leaf[161]);  // node 20's rails 0 and 1
  EXPECT_EQ(leaf[160], 8);          // the second block's rail-0 leaf
}

TEST(Platform, OneNodeNeedsOneSwitchAndOversubscriptionThinsUplinks) {
  EXPECT_EQ(fat_tree_shape(h100(8).topology()).down, (std::vector<unsigned>{8}));
  auto [text, file] = topologies::cluster_text("dgx-h100");
  std::string over = text;
  const std::string from = "{\"name\": \"leaf\", \"radix\": 64, \"oversubscription\": 1.0";
  const auto at = over.find(from);
  ASSERT_NE(at, std::string::npos);
  over.replace(at, from.size(), "{\"name\": \"leaf\", \"radix\": 12, \"oversubscription\": 2.0");
  topologies::Topology topo(topologies::cluster_from_json(over, "test.json"), 128);
  const FatTreeShape s = fat_tree_shape(topo);
  ASSERT_EQ(s.down.size(), 2u);
  EXPECT_EQ(s.down[0], 8u);  // 12 ports at 2:1 -> 8 down, 4 up
  EXPECT_EQ(s.up[1], 4u);
}

}  // namespace
}  // namespace hzp::sim::simgrid
