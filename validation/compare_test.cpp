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
  g.end = core::Duration::ns(gemm_ns);
  traces::OpRecord a;
  a.op_id = 0;
  a.stream = 1;
  a.kind = core::OpKind::Collective;
  a.what = "all_gather";
  a.group_kind = core::GroupKind::DpShard;
  a.end = core::Duration::ns(ag_ns);
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

TEST(Compare, RefusesDifferentSchedules) {
  EXPECT_THROW((void)compare(timeline("a", 1, 1), timeline("b", 1, 1)), core::InputError);
  traces::Timeline m = timeline("a", 1, 1);
  m.ops.pop_back();
  EXPECT_THROW((void)compare(timeline("a", 1, 1), m), core::InputError);
}

}  // namespace
}  // namespace hzp::validation
