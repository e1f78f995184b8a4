// The analytic engine on Schedules small enough to work out by hand.
#include "sim/analytic/analytic_engine.hpp"

#include <gtest/gtest.h>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "sim/metrics.hpp"

namespace hzp::sim {
namespace {

core::Op gemm(int id, std::int64_t n) {
  core::Op op = core::Op::of(core::OpKind::Compute);
  op.id = id;
  op.name = "gemm";
  op.compute().kind = core::ComputeKind::Gemm;
  op.compute().gemm = core::GemmShape{n, n, n, 1};
  op.compute().flops = core::Flops(2.0 * static_cast<double>(n * n * n));
  op.compute().bytes = core::Bytes(3 * n * n * 2);
  return op;
}

// Rank class of 8 ranks (one DGX H100): GEMM 8192³ on compute while a 1 GiB
// all-gather runs on its own stream; then a second GEMM waits for the gather.
core::Schedule overlap_schedule() {
  core::Schedule s;
  s.name = "overlap";
  s.step = core::StepInfo{"m", "dgx-h100", "x", 8, 8192, 8, 1, core::Flops(8 * 4.0 * 8192.0 * 8192 * 8192)};
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 1, 2, 3, 4, 5, 6, 7}});
  core::Program p;
  p.id = 0;
  p.name = "dp";
  p.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  p.threads.push_back(core::Thread{0, "main", core::Duration::ns(0)});
  core::Stream comp{0, "compute", core::StreamKind::Compute, 0, {}};
  core::Stream ag{1, "ag", core::StreamKind::ParamGather, 0, {}};
  core::Op coll = core::Op::of(core::OpKind::Collective);
  coll.id = 0;
  coll.name = "ag";
  coll.collective().kind = core::CollectiveKind::AllGather;
  coll.collective().group = 0;
  coll.collective().seq = 0;
  coll.collective().bytes = core::Bytes(1LL << 30);
  ag.ops.push_back(coll);
  core::Op rec = core::Op::of(core::OpKind::Record);
  rec.id = 1;
  rec.name = "rec";
  rec.event().id = 0;
  ag.ops.push_back(rec);
  comp.ops.push_back(gemm(2, 8192));
  core::Op wait = rec;
  wait.id = 3;
  wait.kind = core::OpKind::Wait;
  comp.ops.push_back(wait);
  comp.ops.push_back(gemm(4, 8192));
  p.streams = {comp, ag};
  s.programs.push_back(p);
  return s;
}

TEST(AnalyticEngine, OverlapAndExposedCommunication) {
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  core::Schedule s = overlap_schedule();
  AnalyticEngine engine(pm, Contention::none());
  traces::TimelineRecorder rec;
  engine.run(s, {}, rec);
  const traces::Timeline& t = rec.timeline();

  const double g = 2.0 * 8192.0 * 8192 * 8192 / (989e12 * 0.806 * 0.825);  // one GEMM, sustained
  // The all-gather: NCCL's ring, Simple at 1 GiB: 8.4 + 7 · 3.4 µs, then 7/8 N
  // at the NVLink ring's bandwidth.
  const double ring = 450e9 * pm.topology().spec().scale_up.ring_efficiency;
  const double a = 32.2e-6 + 7.0 / 8.0 * 1073741824.0 / ring;
  ASSERT_GT(a, g);  // the gather outlasts the first GEMM: a - g is exposed
  Metrics m = compute_metrics(s, t, pm.topology().spec().device);
  EXPECT_NEAR(m.step_time.to_seconds(), a + g, 2e-9);
  EXPECT_NEAR(m.exposed_comm.at("dp_shard").to_seconds(), a - g, 2e-9);
  EXPECT_EQ(t.header.engine, "analytic");
  EXPECT_EQ(t.header.schedule_sha256, core::schedule_hash(s));
  EXPECT_NEAR(m.mfu, (s.step.model_flops.count() / (a + g) / 8 / 1e12) / 989, 1e-6);  // step rounded to ns
}

TEST(AnalyticEngine, ComputeSlowsUnderACollectiveOnItsDevice) {
  // The first GEMM runs wholly under the all-gather (g · 1.189 < a), so it
  // takes g · 1.189; the second starts after the gather, alone, and takes g.
  // The step is still a + g; the GEMM model time stays uncontended (2g).
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const double slow = pm.topology().spec().device.comm_compute_slowdown;
  ASSERT_DOUBLE_EQ(slow, 1.189);
  const core::Schedule s = overlap_schedule();
  AnalyticEngine engine(pm);
  traces::TimelineRecorder rec;
  engine.run(s, {}, rec);
  const double g = 2.0 * 8192.0 * 8192 * 8192 / (989e12 * 0.806 * 0.825);
  const double a = 32.2e-6 + 7.0 / 8.0 * 1073741824.0 / (450e9 * pm.topology().spec().scale_up.ring_efficiency);
  ASSERT_LT(g * slow, a);
  std::map<int, double> took;
  for (const auto& op : rec.timeline().ops) took[op.op_id] = (op.end - op.start).to_seconds();
  EXPECT_NEAR(took.at(2), g * slow, 2e-9);
  EXPECT_NEAR(took.at(4), g, 2e-9);
  EXPECT_NEAR(engine.estimate(s).step.to_seconds(), a + g, 2e-9);
  EXPECT_NEAR(engine.estimate(s).model_compute.to_seconds(), 2 * g, 2e-9);
  // Without interference the first GEMM takes g.
  traces::TimelineRecorder plain;
  AnalyticEngine(pm, Contention{.interference = false}).run(s, {}, plain);
  for (const auto& op : plain.timeline().ops) {
    if (op.op_id == 2) {
      EXPECT_NEAR((op.end - op.start).to_seconds(), g, 2e-9);
    }
  }
}

// A recorder that wants no names gets the same times and metrics without
// them, and is told every op and memory point before the first arrives.
TEST(AnalyticEngine, NamelessRecorderKeepsTimesAndMetrics) {
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const core::Schedule s = overlap_schedule();
  AnalyticEngine engine(pm);
  traces::TimelineRecorder named, nameless(/*names=*/false);
  engine.run(s, {}, named);
  engine.run(s, {}, nameless);
  const traces::Timeline &a = named.timeline(), &b = nameless.timeline();
  ASSERT_EQ(a.ops.size(), b.ops.size());
  EXPECT_EQ(b.ops.capacity(), b.ops.size());
  EXPECT_EQ(b.memory.capacity(), b.memory.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_FALSE(a.ops[i].name.empty());
    EXPECT_TRUE(b.ops[i].name.empty() && b.ops[i].what.empty());
    EXPECT_EQ(std::tie(a.ops[i].op_id, a.ops[i].start, a.ops[i].end),
              std::tie(b.ops[i].op_id, b.ops[i].start, b.ops[i].end));
  }
  const Metrics ma = compute_metrics(s, a, pm.topology().spec().device);
  const Metrics mb = compute_metrics(s, b, pm.topology().spec().device);
  EXPECT_EQ(ma.step_time, mb.step_time);
  EXPECT_EQ(ma.exposed_comm, mb.exposed_comm);
  EXPECT_EQ(ma.peak_memory(), mb.peak_memory());
}

TEST(AnalyticEngine, EstimateWithFreeOps) {
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const core::Schedule s = overlap_schedule();
  const AnalyticEngine engine(pm);
  const double g = 2.0 * 8192.0 * 8192 * 8192 / (989e12 * 0.806 * 0.825);
  const double a = 32.2e-6 + 7.0 / 8.0 * 1073741824.0 / (450e9 * pm.topology().spec().scale_up.ring_efficiency);
  EXPECT_NEAR(engine.estimate(s).step.to_seconds(), a + g, 2e-9);
  EXPECT_NEAR(engine.estimate(s).model_compute.to_seconds(), 2 * g, 2e-9);
  // The all-gather free: the GEMMs run back to back.
  auto free_collectives = [](const core::Op& op) { return op.kind == core::OpKind::Collective; };
  EXPECT_NEAR(engine.estimate(s, free_collectives).step.to_seconds(), 2 * g, 2e-9);
  // Everything free: nothing takes time.
  EXPECT_EQ(engine.estimate(s, [](const core::Op&) { return true; }).step.count_ns(), 0);
}

// One program of 16 ranks (two DGX H100) with a collective on each of two
// streams, both issued at 0: a 256 MiB all-gather over all 16 ranks on one,
// and on the other a 1 GiB all-gather over the same ranks (`across`) or over
// the first node's 8 (inside).
core::Schedule two_stream_schedule(bool across) {
  core::Schedule s;
  s.name = "two-streams";
  s.step = core::StepInfo{"m", "dgx-h100", "x", 16, 8192, 16, 1, core::Flops(1e12)};
  std::vector<int> all(16), node(8);
  for (int i = 0; i < 16; ++i) all[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < 8; ++i) node[static_cast<std::size_t>(i)] = i;
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, all});
  s.groups.push_back(core::Group{1, core::GroupKind::DpGrad, across ? all : node});
  core::Program p;
  p.id = 0;
  p.name = "dp";
  p.ranks = all;
  p.threads.push_back(core::Thread{0, "main", core::Duration::ns(0)});
  for (int k = 0; k < 2; ++k) {
    core::Stream st{
        k, k == 0 ? "ag" : "rs", k == 0 ? core::StreamKind::ParamGather : core::StreamKind::GradReduce, 0, {}};
    core::Op c = core::Op::of(core::OpKind::Collective);
    c.id = k;
    c.name = st.name;
    c.collective().kind = core::CollectiveKind::AllGather;
    c.collective().group = k;
    c.collective().seq = 0;
    c.collective().bytes = core::Bytes(k == 0 ? 256LL << 20 : 1LL << 30);
    st.ops.push_back(c);
    p.streams.push_back(st);
  }
  s.programs.push_back(p);
  return s;
}

std::map<int, std::pair<std::int64_t, std::int64_t>> op_times(const cost::PerfModel& pm, Contention c,
                                                              const core::Schedule& s) {
  traces::TimelineRecorder rec;
  AnalyticEngine(pm, c).run(s, {}, rec);
  std::map<int, std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& op : rec.timeline().ops) out[op.op_id] = {op.start.count_ns(), op.end.count_ns()};
  return out;
}

TEST(AnalyticEngine, CollectivesOfOneLinkClassShareItsBandwidth) {
  // Both gathers cross the NICs and start together. After its latency L each
  // moves its bytes (x1 < x2 ns uncontended) at half the bandwidth while the
  // other runs: the small one ends at L + 2 x1 (2 x1 < x2), the large one then
  // has x2 - x1 left at full speed and ends at L + x1 + x2.
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Schedule s = two_stream_schedule(/*across=*/true);
  const auto span = pm.span(s.groups[0].ranks);
  ASSERT_EQ(span.domains, 2);
  const auto c1 = pm.collective_cost(core::CollectiveKind::AllGather, core::Bytes(256LL << 20), span);
  const auto c2 = pm.collective_cost(core::CollectiveKind::AllGather, core::Bytes(1LL << 30), span);
  ASSERT_EQ(c1.latency_s, c2.latency_s);  // the same algorithm and protocol
  const std::int64_t L = core::Duration::seconds(c1.latency_s).count_ns();
  const std::int64_t x1 = core::Duration::seconds(c1.seconds()).count_ns() - L;
  const std::int64_t x2 = core::Duration::seconds(c2.seconds()).count_ns() - L;
  ASSERT_LT(2 * x1, x2);
  const auto shared = op_times(pm, {}, s);
  EXPECT_EQ(shared.at(0), std::pair(std::int64_t{0}, L + 2 * x1));
  EXPECT_EQ(shared.at(1), std::pair(std::int64_t{0}, L + x1 + x2));
  EXPECT_EQ(AnalyticEngine(pm).estimate(s).step.count_ns(), L + x1 + x2);
  // Without link sharing each takes its uncontended time.
  const auto alone = op_times(pm, Contention{.link_sharing = false}, s);
  EXPECT_EQ(alone.at(0).second, L + x1);
  EXPECT_EQ(alone.at(1).second, L + x2);
}

TEST(AnalyticEngine, CollectivesOfDifferentLinkClassesDoNotShare) {
  // The large gather stays inside the first node (NVLink), the small one
  // crosses the NICs: each runs at its uncontended cost.
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Schedule s = two_stream_schedule(/*across=*/false);
  ASSERT_EQ(pm.span(s.groups[1].ranks).domains, 1);
  const auto t = op_times(pm, {}, s);
  EXPECT_EQ(
      t.at(0).second,
      pm.collective(core::CollectiveKind::AllGather, core::Bytes(256LL << 20), pm.span(s.groups[0].ranks)).count_ns());
  EXPECT_EQ(
      t.at(1).second,
      pm.collective(core::CollectiveKind::AllGather, core::Bytes(1LL << 30), pm.span(s.groups[1].ranks)).count_ns());
}

// Three 64 MiB broadcasts over 16 ranks (two nodes) on one stream, as a
// stack that regathers by broadcast issues them; with `apart`, an event
// record between the first two.
core::Schedule broadcasts(bool apart) {
  core::Schedule s;
  s.name = "broadcasts";
  s.step = core::StepInfo{"m", "dgx-h100", "x", 16, 8192, 16, 1, core::Flops(1)};
  core::Group g{0, core::GroupKind::DpShard, {}};
  for (int r = 0; r < 16; ++r) g.ranks.push_back(r);
  s.groups.push_back(g);
  core::Program p;
  p.id = 0;
  p.name = "dp";
  p.ranks = g.ranks;
  p.threads.push_back(core::Thread{0, "main", core::Duration::ns(0)});
  core::Stream st{0, "params", core::StreamKind::ParamGather, 0, {}};
  int id = 0;
  for (int i = 0; i < 3; ++i) {
    core::Op b = core::Op::of(core::OpKind::Collective);
    b.id = id++;
    b.name = "broadcast";
    b.collective().kind = core::CollectiveKind::Broadcast;
    b.collective().group = 0;
    b.collective().seq = i;
    b.collective().bytes = core::Bytes(64LL << 20);
    st.ops.push_back(b);
    if (apart && i == 0) {
      core::Op rec = core::Op::of(core::OpKind::Record);
      rec.id = id++;
      rec.name = "rec";
      rec.event().id = 0;
      st.ops.push_back(rec);
    }
  }
  p.streams = {st};
  s.programs.push_back(p);
  return s;
}

TEST(AnalyticEngine, BackToBackBroadcastsPayTheirChainOnce) {
  // The first pays its whole cost (latency L and transfer); each one that
  // directly follows pays its transfer and the back-to-back latency B < L.
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Schedule s = broadcasts(false);
  const auto c =
      pm.collective_cost(core::CollectiveKind::Broadcast, core::Bytes(64LL << 20), pm.span(s.groups[0].ranks));
  const std::int64_t total = core::Duration::seconds(c.seconds()).count_ns();
  const std::int64_t L = core::Duration::seconds(c.latency_s).count_ns();
  const std::int64_t B = core::Duration::seconds(c.back_to_back_latency_s).count_ns();
  ASSERT_LT(B, L);
  const AnalyticEngine engine(pm);
  EXPECT_EQ(engine.estimate(s).step.count_ns(), total + 2 * (total - L + B));
  // An op between the first two breaks the run: the second starts a chain of its own.
  EXPECT_EQ(engine.estimate(broadcasts(true)).step.count_ns(), 2 * total + (total - L + B));
}

TEST(AnalyticEngine, RejectsMoreRanksThanDevices) {
  // The Schedule is for 8 ranks; the cluster has 4 devices.
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 4));
  AnalyticEngine engine(pm);
  traces::TimelineRecorder rec;
  try {
    engine.run(overlap_schedule(), {}, rec);
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "schedule: groups[0].ranks: rank 4 does not exist on a cluster of 4 devices");
  }
}

TEST(AnalyticEngine, MemoryPeakFromAllocs) {
  core::Schedule s = overlap_schedule();
  auto& comp = s.programs[0].streams[0].ops;
  core::Op a = core::Op::of(core::OpKind::Alloc);
  a.name = "alloc";
  a.buffer().name = "x";
  a.buffer().bytes = core::Bytes(3LL << 30);
  a.id = 10;
  core::Op f = a;
  f.kind = core::OpKind::Free;
  f.id = 11;
  core::Op b = a;
  b.buffer().name = "y";
  b.buffer().bytes = core::Bytes(1LL << 30);
  b.id = 12;
  comp.insert(comp.begin(), a);      // x live during the first GEMM
  comp.insert(comp.begin() + 2, f);  // freed after it
  comp.push_back(b);                 // y stays
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  AnalyticEngine engine(pm);
  traces::TimelineRecorder rec;
  engine.run(s, {}, rec);
  Metrics m = compute_metrics(s, rec.timeline(), pm.topology().spec().device);
  EXPECT_EQ(m.peak_memory().count(), 3LL << 30);
  EXPECT_TRUE(m.fits());
}

// A host slower than its kernels (item 3 of the Hopper issue): five
// element-wise kernels of no bytes on an H200 cost its 5 us kernel tail each;
// a host thread that needs 20 us to issue each one starts kernel i at 20·i us,
// so the step is 4·20 + 5 = 85 us, of which 25 us run and 60 us are the
// device waiting on the host. A host at 2 us a kernel keeps it busy: 25 us.
TEST(AnalyticEngine, AHostSlowerThanItsKernelsLeavesTheDeviceWaiting) {
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h200"), 1));
  auto schedule = [](std::int64_t launch_us) {
    core::Schedule s;
    s.name = "host-bound";
    s.step = core::StepInfo{"m", "dgx-h200", "x", 1, 1, 1, 1, core::Flops(1)};
    core::Program p;
    p.name = "dp";
    p.ranks = {0};
    p.threads.push_back(core::Thread{0, "main", core::Duration::us(static_cast<double>(launch_us))});
    core::Stream comp{0, "compute", core::StreamKind::Compute, 0, {}};
    for (int i = 0; i < 5; ++i) {
      core::Op op = core::Op::of(core::OpKind::Compute);
      op.id = i;
      op.name = "ew";
      op.compute().kind = core::ComputeKind::Elementwise;
      op.role = core::OpRole::Forward;
      comp.ops.push_back(op);
    }
    p.streams = {comp};
    s.programs.push_back(p);
    return s;
  };
  for (auto [launch_us, step_us, host_us] : {std::tuple{20, 85, 60}, std::tuple{2, 25, 0}}) {
    const core::Schedule s = schedule(launch_us);
    AnalyticEngine engine(pm, Contention::none());
    traces::TimelineRecorder rec;
    engine.run(s, {}, rec);
    topologies::DeviceProfile d = pm.topology().spec().device;
    const Metrics m = compute_metrics(s, rec.timeline(), d);
    EXPECT_EQ(m.step_time.count_ns(), step_us * 1000LL) << launch_us;
    EXPECT_EQ(m.split.host_bound.count_ns(), host_us * 1000LL) << launch_us;
    EXPECT_EQ(m.split.waiting.count_ns(), 0) << launch_us;
    EXPECT_EQ(m.split.classes.at(3).first, "norm_rotary_activation");
    EXPECT_EQ(m.split.classes.at(3).second.count_ns(), 25000) << launch_us;
  }
}

}  // namespace
}  // namespace hzp::sim
