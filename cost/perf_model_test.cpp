// The performance model's closed forms: collectives bounded by the NICs and
// links a group spans, GEMMs by how their tiles fill the device, the sustained
// and power-capped clocks, bandwidth-bound kernels.
#include "cost/perf_model.hpp"

#include <gtest/gtest.h>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "topologies/overlay.hpp"

namespace hzp::cost {
namespace {

using topologies::cluster_from_json;
using topologies::cluster_text;
using topologies::ClusterOverlay;
using topologies::load_cluster;
using topologies::resolve_cluster;

std::vector<int> iota(int n, int start = 0) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(Topology, TiersAndSpans) {
  PerfModel pm(Topology(load_cluster("dgx-h100"), 1024));
  const Topology& t = pm.topology();
  EXPECT_EQ(t.nodes(), 128);
  EXPECT_EQ(t.nodes_per_tier_domain()[0], 32);  // 64-port leaf: 32 down
  EXPECT_EQ(t.tier_between(0, 31), 0);
  EXPECT_EQ(t.tier_between(0, 32), 1);
  GroupSpan all = pm.span(iota(1024));
  EXPECT_EQ(all.domains, 128);
  EXPECT_EQ(all.min_ranks_per_domain, 8);
  EXPECT_EQ(all.top_tier, 1);
  GroupSpan node = pm.span(iota(8));
  EXPECT_EQ(node.domains, 1);
  EXPECT_EQ(node.top_tier, -1);
  // mesh16: two islands per node meet at the leaf.
  PerfModel mesh(Topology(load_cluster("mesh16-roce200"), 16));
  GroupSpan both = mesh.span(iota(16));
  EXPECT_EQ(both.domains, 2);
  EXPECT_EQ(both.top_tier, 0);
  // A strided group (one rank a node, as a data-parallel group under TP 8)
  // and a sparse one, whose domains span far more than it has ranks:
  // counted in runs. Ranks 0, 1, 2 (domain 0), 1,000 (125) and 1,023 (127).
  std::vector<int> strided;
  for (int r = 3; r < 1024; r += 8) strided.push_back(r);
  const GroupSpan s = pm.span(strided);
  EXPECT_EQ(s.domains, 128);
  EXPECT_EQ(s.min_ranks_per_domain, 1);
  EXPECT_EQ(s.max_ranks_per_domain, 1);
  const GroupSpan sparse = pm.span({0, 1, 2, 1000, 1023});
  EXPECT_EQ(sparse.domains, 3);
  EXPECT_EQ(sparse.min_ranks_per_domain, 1);
  EXPECT_EQ(sparse.max_ranks_per_domain, 3);
  EXPECT_EQ(sparse.top_tier, 1);
}

TEST(PerfModel, RingAcrossNodesIsNicBound) {
  // 16 nodes x 8 ranks: the ring leaves each node once per channel, so its bus
  // bandwidth is the node's 8 NICs (8 x 50 GB/s at the Simple ring's
  // efficiency), below NVLink's 450 GB/s at its own.
  ClusterSpec spec = load_cluster("dgx-h100");
  spec.scale_up.ring_efficiency = 0.9;
  spec.scale_out.ring_efficiency = 0.8;
  PerfModel pm(Topology(spec, 128));
  EXPECT_NEAR(pm.nccl().ring_GBps(pm.span(iota(128))), 8 * 50 * 0.8, 1e-9);
  EXPECT_NEAR(pm.nccl().ring_GBps(pm.span(iota(8))), 450 * 0.9, 1e-9);
  // Large transfers are bandwidth-bound: Simple, every channel.
  const CollectiveCost c =
      pm.collective_cost(core::CollectiveKind::ReduceScatter, core::Bytes(1LL << 32), pm.span(iota(128)));
  EXPECT_EQ(c.protocol, NcclProtocol::Simple);
  EXPECT_NEAR(c.transfer_s, 127.0 / 128.0 * (1LL << 32) / (320e9), 1e-12);
}

TEST(PerfModel, AllToAllLatencyGrowsWithThePeersAcrossNodes) {
  // 4 nodes x 8: one p2p latency plus 31 peers at (1977.9 − 67.6) / 992 µs
  // each; inside one node, the p2p latency alone. Bandwidth: 24 of each
  // rank's 32 blocks leave the node over its NIC (8 x 50 GB/s x 0.8 a node,
  // 40 GB/s a GPU).
  ClusterSpec spec = load_cluster("dgx-h100");
  spec.scale_out.ring_efficiency = 0.8;
  PerfModel pm(Topology(spec, 32));
  const double per_peer_us = (1977.9 - 67.6) / (1023 - 31);
  EXPECT_NEAR(pm.nccl().tuning().all_to_all_per_peer_us, per_peer_us, 1e-12);
  const double N = 32 << 20;
  const CollectiveCost across = pm.collective_cost(core::CollectiveKind::AllToAll, core::Bytes(N), pm.span(iota(32)));
  EXPECT_NEAR(across.latency_s * 1e6, pm.nccl().p2p_latency_us(0) + 31 * per_peer_us, 1e-9);
  EXPECT_NEAR(across.transfer_s, N * 24 / 32 / 40e9, 1e-12);
  const CollectiveCost inside = pm.collective_cost(core::CollectiveKind::AllToAll, core::Bytes(N), pm.span(iota(8)));
  EXPECT_NEAR(inside.latency_s * 1e6, pm.nccl().p2p_latency_us(-1), 1e-9);
}

TEST(PerfModel, OneRankPerNodeUsesOneNic) {
  ClusterSpec spec = load_cluster("dgx-h100");
  spec.scale_out.ring_efficiency = 0.8;
  PerfModel pm(Topology(spec, 64));
  std::vector<int> ranks;
  for (int n = 0; n < 8; ++n) ranks.push_back(8 * n);
  EXPECT_NEAR(pm.nccl().ring_GBps(pm.span(ranks)), 50 * 0.8, 1e-9);
}

TEST(PerfModel, OversubscriptionDividesTheNicAboveTheLeaf) {
  ClusterSpec spec = load_cluster("dgx-h100");
  spec.scale_out.ring_efficiency = 1.0;
  spec.scale_out.tiers[0].oversubscription = 4;
  PerfModel pm(Topology(spec, 1024));
  EXPECT_NEAR(pm.nccl().nic_GBps(0), 50, 1e-9);        // inside one leaf
  EXPECT_NEAR(pm.nccl().nic_GBps(1), 50 / 4.0, 1e-9);  // through the spine
}

// A bf16 GEMM of n x n x n (2n^3 FLOPs, three n x n bf16 matrices).
core::Op square_gemm(std::int64_t n) {
  core::Op op = core::Op::of(core::OpKind::Compute);
  op.compute().kind = core::ComputeKind::Gemm;
  op.compute().gemm = core::GemmShape{n, n, n, 1};
  op.compute().flops = core::Flops(2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n));
  op.compute().bytes = core::Bytes(3 * n * n * 2);
  return op;
}

// An elementwise kernel that moves `bytes` of HBM.
core::Op bandwidth_kernel(std::int64_t bytes) {
  core::Op op = core::Op::of(core::OpKind::Compute);
  op.compute().kind = core::ComputeKind::Elementwise;
  op.compute().bytes = core::Bytes(bytes);
  return op;
}

// Under a power cap the device profile lists, tensor-core work runs at the
// cap's measured clock over the compute clock the peaks are quoted at, on top
// of the sustained fraction (dgx-h100: 0.825 x 1610 / 1830 MHz at 500 W),
// bandwidth-bound kernels as before.
TEST(PerfModel, APowerCapRunsTensorCoreWorkAtItsClock) {
  ClusterOverlay capped;
  capped.power_limit_w = 500;
  const ClusterSpec spec = resolve_cluster("dgx-h100", capped).spec;
  ASSERT_TRUE(spec.device.power.has_value());
  EXPECT_EQ(spec.device.power->limit_W, 500);
  EXPECT_DOUBLE_EQ(spec.device.tensor_clock_scale, 0.825 * 1610.0 / 1830.0);
  PerfModel rated(Topology(load_cluster("dgx-h100"), 8)), low(Topology(spec, 8));
  const core::Op gemm = square_gemm(8192);
  EXPECT_NEAR(low.compute(gemm).to_seconds(), gemm.compute().flops.count() / (989e12 * 0.806 * 0.825 * 1610 / 1830),
              1e-9);
  core::Op attention = gemm;
  attention.compute().kind = core::ComputeKind::Attention;
  attention.compute().gemm.reset();
  attention.compute().attention_kernel = core::AttentionKernel::Flash3;
  EXPECT_NEAR(low.compute(attention).to_seconds() / rated.compute(attention).to_seconds(), 1830.0 / 1610.0, 1e-6);
  const core::Op ew = bandwidth_kernel(3350000000LL);
  EXPECT_EQ(low.compute(ew), rated.compute(ew));
  // The rated limit is the catalog's own profile.
  ClusterOverlay rated_limit;
  rated_limit.power_limit_w = 700;
  EXPECT_EQ(resolve_cluster("dgx-h100", rated_limit).spec.device.tensor_clock_scale, 0.825);
}

// A training run holds tensor-core work at the sustained fraction of the
// burst curves (H100/H200: 0.825, measured on an H200 at 700 W); a device
// without a measured fraction (A100) keeps the curves; the fraction must be
// in (0, 1].
TEST(PerfModel, TensorCoreWorkRunsAtTheSustainedFraction) {
  EXPECT_EQ(load_cluster("dgx-h200").device.power->sustained_fraction, 0.825);
  EXPECT_EQ(load_cluster("dgx-a100").device.tensor_clock_scale, 1.0);
  const core::Op gemm = square_gemm(8192);
  PerfModel a100(Topology(load_cluster("dgx-a100"), 8)), h200(Topology(load_cluster("dgx-h200"), 8));
  // 2 * 8192^3 = 1.0995e12 FLOP at 989 TFLOP/s x 0.806 x 0.825 = 657.6 TFLOP/s: 1.672 ms.
  EXPECT_NEAR(h200.compute(gemm).to_seconds(), 1.0995116e12 / 657.6e12, 2e-7);
  const double a100_eff = load_cluster("dgx-a100").device.gemm.at(8192);
  EXPECT_NEAR(a100.compute(gemm).to_seconds(), gemm.compute().flops.count() / (312e12 * a100_eff), 1e-9);
  for (const char* bad : {"0", "1.2"}) {
    auto [text, file] = cluster_text("dgx-h200");
    const std::string from = "\"sustained_fraction\": 0.825";
    text.replace(text.find(from), from.size(), std::string("\"sustained_fraction\": ") + bad);
    try {
      (void)cluster_from_json(text, "sustained.json");
      ADD_FAILURE() << bad << " accepted";
    } catch (const core::InputError& e) {
      EXPECT_EQ(e.key(), "device.power.sustained_fraction") << e.what();
    }
  }
}

TEST(PerfModel, GemmRoofline) {
  PerfModel pm(Topology(load_cluster("dgx-h100"), 8));
  const core::Op op = square_gemm(8192);
  EXPECT_NEAR(pm.compute(op).to_seconds(), op.compute().flops.count() / (989e12 * 0.806 * 0.825), 1e-9);
  // A bandwidth kernel: bytes / (3.35 TB/s · 0.85) and its 5 us tail.
  const core::Op ew = bandwidth_kernel(3350000000LL);
  EXPECT_NEAR(3.35e9 / (3350e9 * 0.85) + 5e-6, pm.compute(ew).to_seconds(), 1e-9);
}

// Bandwidth-bound ops pay the device's kernel tail once per kernel (H200:
// 5 us, measured): a 64 MiB element-wise op of one kernel, and an eager
// RMSNorm of seven kernels moving the same bytes; GEMMs and attention
// (efficiencies measured with their tails) pay none. Durations are whole
// nanoseconds.
TEST(PerfModel, BandwidthKernelsPayATailPerKernel) {
  PerfModel pm(Topology(load_cluster("dgx-h200"), 8));
  const std::int64_t bytes = 64LL << 20;
  const double stream_s = static_cast<double>(bytes) / (4800e9 * 0.88);  // 15.89 us
  core::Op one = bandwidth_kernel(bytes);
  EXPECT_NEAR(pm.compute(one).to_seconds(), stream_s + 5e-6, 1e-9);
  core::Op norm = one;
  norm.compute().kind = core::ComputeKind::Norm;
  norm.compute().kernels = 7;
  EXPECT_NEAR(pm.compute(norm).to_seconds(), stream_s + 35e-6, 1e-9);
  const core::Op gemm = square_gemm(8192);
  EXPECT_NEAR(pm.compute(gemm).to_seconds(), gemm.compute().flops.count() / (989e12 * 0.806 * 0.825), 1e-9);
  core::Op attention = gemm;
  attention.compute().kind = core::ComputeKind::Attention;
  attention.compute().gemm.reset();
  attention.compute().attention_kernel = core::AttentionKernel::Flash2;
  attention.role = core::OpRole::Backward;
  EXPECT_NEAR(pm.compute(attention).to_seconds(), gemm.compute().flops.count() / (989e12 * 0.248 * 0.825), 1e-9);
}

// GEMMs cost by how their output tiles fill the device (issue 37, item 1).
// H100: 132 SMs, 128x256 tiles at the full per-SM rate or 128x128 at 0.6.
TEST(PerfModel, GemmCostByHowItsTilesFillTheDevice) {
  const ClusterSpec h100 = load_cluster("dgx-h100");
  const DeviceProfile::GemmTiling& tiling = *h100.device.gemm_tiling;
  ASSERT_EQ(tiling.sms, 132);
  // Exactly one wave: 12 x 11 = 132 tiles of 128x256, each full.
  EXPECT_DOUBLE_EQ(PerfModel::gemm_fill(tiling, 1536, 2816), 1.0);
  // 1.08 waves: 13 x 11 = 143 tiles; the partial second wave is spread over
  // every SM (stream-K), so no cliff: still 1.
  EXPECT_DOUBLE_EQ(PerfModel::gemm_fill(tiling, 1664, 2816), 1.0);
  // 1024 x 1024: 32 big tiles (32 / 132 = 0.242) or 64 small ones at 0.6 (0.6 x 64 / 132 = 0.2909).
  EXPECT_NEAR(PerfModel::gemm_fill(tiling, 1024, 1024), 0.6 * 64 / 132, 1e-12);
  // 1000 rows pad the last row of tiles: 1000 / 1024 of each tile is useful.
  EXPECT_NEAR(PerfModel::gemm_fill(tiling, 1000, 1024), 0.6 * 64 / 132 * 1000 / 1024, 1e-12);
  // A grouped GEMM of 4 such experts: 128 big tiles, 128 / 132 of the SMs.
  EXPECT_NEAR(PerfModel::gemm_fill(tiling, 1024, 1024, 4), 128.0 / 132, 1e-12);
  EXPECT_EQ(PerfModel::gemm_fill(tiling, 0, 1024), 1.0);  // an empty GEMM is not judged (no 0 / 0)

  // The cost: the curve at the cube root of m.n.k, times this shape's fill
  // over the fill of the square of that size. 1024 x 1024 x 4096: size
  // 2^(32/3) = 1625.5, curve 0.179 + (2/3)(0.684 - 0.179) = 0.5157; the
  // square fills 91 big tiles (13 x 7) at 1625.5^2 / (91 x 128 x 256) = 0.8861
  // of their area: 91 / 132 x 0.8861 = 0.6109. Efficiency 0.5157 x 0.2909 /
  // 0.6109 = 0.2456, at the sustained 0.825: 8.59 GFLOP / (989 TFLOP/s x
  // 0.2026) = 42.9 us (the size curve alone gave 0.5157: 20.4 us; measured
  // on an H200 in bursts, 38.3 us).
  PerfModel pm(Topology(load_cluster("dgx-h100"), 8));
  core::Op op = square_gemm(1024);
  op.compute().gemm = core::GemmShape{1024, 1024, 4096, 1};
  op.compute().flops = core::Flops(2.0 * 1024 * 1024 * 4096);
  const double eff = (0.179 + 2.0 / 3.0 * (0.684 - 0.179)) * (0.6 * 64 / 132) / (91.0 / 132 * 0.8861);
  EXPECT_NEAR(pm.compute(op).to_seconds(), op.compute().flops.count() / (989e12 * eff * 0.825), 5e-8);
  // A square GEMM keeps the curve's rate, and nothing runs above the curve's best.
  EXPECT_NEAR(pm.compute(square_gemm(8192)).to_seconds(),
              square_gemm(8192).compute().flops.count() / (989e12 * 0.806 * 0.825), 1e-9);
  core::Op wide = square_gemm(1024);
  wide.compute().gemm = core::GemmShape{1536, 2816, 4096, 1};  // one full wave; its square (2606.6) pads to 0.898
  wide.compute().flops = core::Flops(2.0 * 1536 * 2816 * 4096);
  EXPECT_GE(pm.compute(wide).to_seconds(), wide.compute().flops.count() / (989e12 * 0.806 * 0.825) - 1e-12);
}

}  // namespace
}  // namespace hzp::cost
