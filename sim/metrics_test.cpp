// Exposed communication, busy fractions and the time split by kernel class
// from hand-made Timelines.
#include "sim/metrics.hpp"

#include <gtest/gtest.h>

#include <map>

namespace hzp::sim {
namespace {

TEST(Metrics, ExposedIsCommMinusCompute) {
  core::Schedule s;
  s.step = core::StepInfo{"m", "c", "x", 1, 100, 10, 1, core::Flops(1e12)};
  core::Program p;
  p.ranks = {0};
  p.streams = {core::Stream{0, "compute", core::StreamKind::Compute, 0, {}},
               core::Stream{1, "comm", core::StreamKind::GradReduce, 0, {}}};
  s.programs.push_back(p);
  traces::Timeline t;
  auto op = [](int stream, core::OpKind kind, std::int64_t a, std::int64_t b) {
    traces::OpRecord r;
    r.stream = stream;
    r.kind = kind;
    r.group_kind = core::GroupKind::DpShard;
    r.start = core::TimePoint::ns(a);
    r.end = core::TimePoint::ns(b);
    return r;
  };
  // compute [0,40) [60,100); comm [30,70) [90,120): exposed = [40,60) + [100,120) = 40 ns.
  t.ops = {op(0, core::OpKind::Compute, 0, 40), op(0, core::OpKind::Compute, 60, 100),
           op(1, core::OpKind::Collective, 30, 70), op(1, core::OpKind::Collective, 90, 120)};
  topologies::DeviceProfile d;
  d.peak_tflops[core::Dtype::Bf16] = 1000;
  d.hbm_GiB = 1;
  Metrics m = compute_metrics(s, t, d);
  EXPECT_EQ(m.step_time.count_ns(), 120);
  EXPECT_EQ(m.exposed_comm.at("dp_shard").count_ns(), 40);
  EXPECT_EQ(m.compute_idle.count_ns(), 40);
  ASSERT_EQ(m.busy.size(), 2u);
  EXPECT_DOUBLE_EQ(m.busy[0].fraction, 80.0 / 120.0);
  EXPECT_DOUBLE_EQ(m.busy[1].fraction, 70.0 / 120.0);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 1000 / 120e-9);
}

// The compute stream's step by class: a GEMM [0,10), a forward norm [10,15),
// then the host issues the backward attention at 20 and it waits on nothing
// else until 25 (host-bound 5, waiting 5), attention [25,40), an FSDP
// copy-out (element-wise, ParamGather role) [40,42), a receive on the compute
// stream [42,44); the step ends at 50 with the other stream (waiting 6). The
// other stream's work (busier in wall time, but not a compute stream) is not
// split. Every nanosecond of the step lands in exactly one bucket.
TEST(Metrics, TimeSplitByKernelClassAndHostBoundGaps) {
  core::Schedule s;
  s.step = core::StepInfo{"m", "c", "x", 1, 100, 10, 1, core::Flops(1e12)};
  core::Program p;
  p.ranks = {0};
  auto compute = [](int id, core::ComputeKind k, core::OpRole role) {
    core::Op op = core::Op::of(core::OpKind::Compute);
    op.id = id;
    op.compute().kind = k;
    op.role = role;
    return op;
  };
  core::Op recv = core::Op::of(core::OpKind::Recv);
  recv.id = 5;
  p.streams = {core::Stream{0,
                            "compute",
                            core::StreamKind::Compute,
                            0,
                            {compute(0, core::ComputeKind::Gemm, core::OpRole::Forward),
                             compute(1, core::ComputeKind::Norm, core::OpRole::Forward),
                             compute(2, core::ComputeKind::Attention, core::OpRole::Backward),
                             compute(3, core::ComputeKind::Elementwise, core::OpRole::ParamGather), recv}},
               core::Stream{1, "comm", core::StreamKind::GradReduce, 0, {}}};
  s.programs.push_back(p);
  traces::Timeline t;
  auto rec = [](int stream, int id, core::OpKind kind, std::int64_t a, std::int64_t b) {
    traces::OpRecord r;
    r.stream = stream;
    r.op_id = id;
    r.kind = kind;
    r.start = core::TimePoint::ns(a);
    r.end = core::TimePoint::ns(b);
    return r;
  };
  t.ops = {rec(0, 0, core::OpKind::Compute, 0, 10),  rec(0, 1, core::OpKind::Compute, 10, 15),
           rec(0, 2, core::OpKind::Compute, 25, 40), rec(0, 3, core::OpKind::Compute, 40, 42),
           rec(0, 5, core::OpKind::Recv, 42, 44),    rec(1, 9, core::OpKind::Collective, 0, 50)};
  t.ops[2].issued = core::TimePoint::ns(20);
  const TimeSplit split = time_split(s, t, core::Duration::ns(50));
  EXPECT_EQ(split.program, 0);
  EXPECT_EQ(split.stream, "compute");
  std::map<std::string, std::int64_t> ns;
  std::int64_t total = 0;
  for (const auto& [name, d] : split.classes) {
    ns[name] = d.count_ns();
    total += d.count_ns();
  }
  EXPECT_EQ(ns["gemm"], 10);
  EXPECT_EQ(ns["norm_rotary_activation"], 5);
  EXPECT_EQ(ns["attention_backward"], 15);
  EXPECT_EQ(ns["attention_forward"], 0);
  EXPECT_EQ(ns["copies_casts"], 2);
  EXPECT_EQ(ns["communication"], 2);
  EXPECT_EQ(split.host_bound.count_ns(), 5);
  EXPECT_EQ(split.waiting.count_ns(), 5 + 6);
  EXPECT_EQ(total + split.host_bound.count_ns() + split.waiting.count_ns(), 50);
  // Without issue times (SimGrid, older traces) the whole gap is waiting.
  t.ops[2].issued.reset();
  EXPECT_EQ(time_split(s, t, core::Duration::ns(50)).host_bound.count_ns(), 0);
  EXPECT_EQ(time_split(s, t, core::Duration::ns(50)).waiting.count_ns(), 16);
  // A measured trace whose first op starts after its origin: the step starts
  // there, and the split is the same.
  for (auto& r : t.ops) {
    r.start = r.start + core::Duration::ns(100);
    r.end = r.end + core::Duration::ns(100);
  }
  t.ops[2].issued = core::TimePoint::ns(120);
  const TimeSplit later = time_split(s, t, core::Duration::ns(50));
  EXPECT_EQ(later.host_bound.count_ns(), 5);
  EXPECT_EQ(later.waiting.count_ns(), 11);
  EXPECT_EQ(later.classes.at(0).second.count_ns(), 10);
}

}  // namespace
}  // namespace hzp::sim

namespace hzp::sim {
namespace {

// Host time of a synchronous step for a given count of kernels and
// collectives, and the same work split over an asynchronous plan's threads.
TEST(Metrics, HostIssueIsEveryOpAtItsKindsLatency) {
  core::Thread costs{0, "main", core::Duration::us(5), core::Duration::us(60)};
  costs.event_latency = core::Duration::us(2);
  costs.alloc_latency = core::Duration::us(1);
  costs.sync_latency = core::Duration::us(200);
  core::Program p;
  core::Thread param = costs;
  param.id = 1;
  param.name = "param";
  p.threads = {costs, param};
  p.streams = {core::Stream{0, "compute", core::StreamKind::Compute, 0, {}},
               core::Stream{1, "grad_reduce", core::StreamKind::GradReduce, 0, {}},
               core::Stream{2, "param_allgather", core::StreamKind::ParamGather, 1, {}}};
  auto add = [&](int stream, core::OpKind kind, int kernels) {
    core::Op op = core::Op::of(kind);
    if (kind == core::OpKind::Compute) op.compute().kernels = kernels;
    p.streams[static_cast<std::size_t>(stream)].ops.push_back(op);
  };
  for (int i = 0; i < 10; ++i) add(0, core::OpKind::Compute, 3);    // 30 kernels
  for (int i = 0; i < 4; ++i) add(1, core::OpKind::Collective, 0);  // 4 reduce-scatters
  add(1, core::OpKind::Record, 0);
  add(0, core::OpKind::Wait, 0);
  add(1, core::OpKind::Alloc, 0);
  add(1, core::OpKind::Free, 0);
  add(0, core::OpKind::Sync, 0);
  for (int i = 0; i < 2; ++i) add(2, core::OpKind::Collective, 0);  // 2 gathers, issued by "param"
  add(2, core::OpKind::Record, 0);
  core::Schedule s;
  s.programs.push_back(p);
  const auto h = host_issue(s, 0);
  ASSERT_EQ(h.size(), 2u);
  // main: 30 kernels x 5 us + 4 collectives x 60 us + 2 event calls x 2 us +
  // 2 allocator calls x 1 us + 1 blocking wait x 200 us = 596 us.
  EXPECT_EQ(h[0].thread, "main");
  EXPECT_EQ(h[0].kernels, 30);
  EXPECT_EQ(h[0].collectives, 4);
  EXPECT_EQ(h[0].events, 2);
  EXPECT_EQ(h[0].allocs, 2);
  EXPECT_EQ(h[0].syncs, 1);
  EXPECT_EQ(h[0].time.count_ns(), 596'000);
  // param: 2 x 60 us + 1 x 2 us = 122 us.
  EXPECT_EQ(h[1].kernels, 0);
  EXPECT_EQ(h[1].collectives, 2);
  EXPECT_EQ(h[1].events, 1);
  EXPECT_EQ(h[1].time.count_ns(), 122'000);
}

}  // namespace
}  // namespace hzp::sim
