// Timeline comparison: errors by hand, and refusal across Schedules.
#include "validation/compare.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

traces::Timeline timeline(const std::string& hash, std::int64_t gemm_ns, std::int64_t ag_ns) {
  traces::Timeline t;
  t.header.schedule_sha256 = hash;
  traces::OpRecord g;
  g.op_id = 1;
  g.what = "gemm";
  g.end = core::TimePoint::ns(gemm_ns);
  traces::OpRecord a;
  a.op_id = 0;
  a.stream = 1;
  a.kind = core::OpKind::Collective;
  a.what = "all_gather";
  a.group_kind = core::GroupKind::DpShard;
  a.end = core::TimePoint::ns(ag_ns);
  t.ops = {g, a};
  return t;
}

TEST(Compare, StepAndKindErrors) {
  Comparison c = compare(timeline("h", 100, 150), timeline("h", 80, 200));
  EXPECT_EQ(c.predicted_step.count_ns(), 150);
  EXPECT_EQ(c.measured_step.count_ns(), 200);
  EXPECT_DOUBLE_EQ(c.step_error(), -0.25);
  EXPECT_DOUBLE_EQ(c.by_kind.at("gemm").relative_error(), 0.25);
  EXPECT_DOUBLE_EQ(c.by_kind.at("all_gather/dp_shard").relative_error(), -0.25);
}

TEST(Compare, ExposedCommunicationAndOverlap) {
  // GEMM [0, 100] under an all-gather [0, 150]: 50 ns exposed of 150.
  const Exposure e = exposure(timeline("h", 100, 150));
  EXPECT_EQ(e.exposed.count_ns(), 50);
  EXPECT_EQ(e.communication.count_ns(), 150);
  EXPECT_DOUBLE_EQ(e.overlap(), 1.0 - 50.0 / 150.0);
  const Comparison c = compare(timeline("h", 100, 150), timeline("h", 80, 200));
  EXPECT_EQ(c.measured_exposure.exposed.count_ns(), 120);
  EXPECT_DOUBLE_EQ(c.measured_exposure.overlap(), 1.0 - 120.0 / 200.0);
  EXPECT_EQ(exposure(timeline("h", 200, 150)).exposed.count_ns(), 0);  // fully hidden
}

traces::OpRecord op(int stream, int id, const char* what, std::int64_t start, std::int64_t end) {
  traces::OpRecord r;
  r.stream = stream;
  r.op_id = id;
  r.name = what;
  r.what = what;
  if (std::string(what) == "all_gather") r.kind = core::OpKind::Collective;
  r.start = core::TimePoint::ns(start);
  r.end = core::TimePoint::ns(end);
  return r;
}

TEST(Compare, CriticalPathWalksBackThroughTheLatestFinisher) {
  // Compute A [0,10], B [10,30], C [30,35]; an all-gather D [5,12] on its own
  // stream ends after B started, so the path is A, B, C.
  traces::Timeline t;
  t.header.schedule_sha256 = "h";
  t.ops = {op(0, 0, "gemm", 0, 10), op(0, 1, "attention", 10, 30), op(0, 2, "gemm", 30, 35),
           op(1, 3, "all_gather", 5, 12)};
  const CriticalPath cp = critical_path(t);
  ASSERT_EQ(cp.ops.size(), 3U);
  EXPECT_EQ(cp.ops[0], 0U);
  EXPECT_EQ(cp.ops[1], 1U);
  EXPECT_EQ(cp.ops[2], 2U);
  EXPECT_EQ(cp.by_kind.at("gemm").count_ns(), 15);
  EXPECT_EQ(cp.by_kind.at("attention").count_ns(), 20);
  // Measured: the gather ran long [5, 40] and C waited for it: the paths
  // differ at the last op.
  traces::Timeline m = t;
  m.ops[3].end = core::TimePoint::ns(40);
  m.ops[2].start = core::TimePoint::ns(40);
  m.ops[2].end = core::TimePoint::ns(45);
  const Comparison c = compare(t, m);
  EXPECT_EQ(c.measured_path_ops, 2U);  // C waited for D; nothing ended before D started at 5
  EXPECT_EQ(c.predicted_path_ops, 3U);
  EXPECT_NE(c.divergence.find("1 ops before the end"), std::string::npos) << c.divergence;
  EXPECT_EQ(c.critical_by_kind.at("all_gather/world").measured.count_ns(), 35);
  const std::string md = markdown_report(c, t, m, "cmp.png");
  EXPECT_NE(md.find("| step (ms) | 0.000 | 0.000 | -22.2% |"), std::string::npos) << md;
  EXPECT_NE(md.find("![predicted and measured timelines](cmp.png)"), std::string::npos);
}

TEST(Compare, RefusesDifferentSchedules) {
  EXPECT_THROW((void)compare(timeline("a", 1, 1), timeline("b", 1, 1)), core::InputError);
  traces::Timeline m = timeline("a", 1, 1);
  m.ops.pop_back();
  EXPECT_THROW((void)compare(timeline("a", 1, 1), m), core::InputError);
}

}  // namespace
}  // namespace hzp::validation
