// Exposed communication and busy fractions from a hand-made Timeline.
#include "sim/metrics.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hzp::sim
