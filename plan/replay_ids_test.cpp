// The replay's issue order and event slots do not depend on how a Schedule
// numbers its ops and events: the lowering writes dense ids (placed by id,
// events slotted by id), a Schedule read from a file may use any (sorted,
// hashed). The same Schedule renumbered sparsely must replay to the same
// times, op for op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan {
namespace {

// Costs that tell ops apart: compute by FLOPs, collectives by bytes, send/recv a constant.
core::ReplayCosts distinct_costs() {
  core::ReplayCosts costs;
  costs.compute = [](const core::Program&, const core::Op& op) {
    return core::Duration::ns(1 + static_cast<std::int64_t>(op.compute().flops.count() / 1e9));
  };
  costs.collective = [](const core::Group&, const core::Op& op) {
    return core::Duration::ns(1 + op.collective().bytes.count() / 1000);
  };
  costs.p2p = [](const core::Program&, const core::Op&) { return core::Duration::ns(777); };
  return costs;
}

TEST(ReplayIds, SparseOpAndEventIdsReplayLikeDenseOnes) {
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o = test_util::ddp_two_stages(8);
  o.strategy = Strategy::Fsdp;
  const core::Schedule dense = lower({test_util::four_layers(), topo}, o);
  core::Schedule sparse = dense;
  int events = 0;
  for (auto& p : sparse.programs) {
    for (auto& st : p.streams) {
      for (auto& op : st.ops) {
        op.id = 5 + 3 * op.id;  // ascending still, but spread over 3x the ops: not placed by id
        if (op.kind == core::OpKind::Record || op.kind == core::OpKind::Wait || op.kind == core::OpKind::Sync) {
          op.event().id = -1000 - 7 * op.event().id;  // negative and spread: hashed to slots
          ++events;
        }
      }
    }
  }
  ASSERT_GT(events, 0);
  const core::ReplayCosts costs = distinct_costs();
  const core::ReplayResult a = core::replay(dense, costs);
  const core::ReplayResult b = core::ReplayPlan(sparse).replay(costs);
  ASSERT_EQ(a.times.size(), b.times.size());
  std::int64_t last = 0;
  for (std::size_t p = 0; p < a.times.size(); ++p) {
    for (std::size_t k = 0; k < a.times[p].size(); ++k) {
      for (std::size_t i = 0; i < a.times[p][k].size(); ++i) {
        EXPECT_EQ(a.times[p][k][i].start, b.times[p][k][i].start) << p << "/" << k << "/" << i;
        EXPECT_EQ(a.times[p][k][i].end, b.times[p][k][i].end) << p << "/" << k << "/" << i;
        EXPECT_EQ(a.issued[p][k][i], b.issued[p][k][i]) << p << "/" << k << "/" << i;
        last = std::max(last, a.times[p][k][i].end.count_ns());
      }
    }
  }
  EXPECT_GT(last, 0);
}

TEST(ReplayIds, OnePlanReplaysTwiceAlike) {
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  const core::Schedule s = lower({test_util::four_layers(), topo}, test_util::ddp_two_stages(8));
  const core::ReplayPlan plan(s);
  const core::ReplayCosts costs = distinct_costs();
  const core::ReplayResult a = plan.replay(costs);
  const core::ReplayResult b = plan.replay(costs);
  const core::ReplayResult c = core::replay(s, costs);
  for (std::size_t p = 0; p < a.times.size(); ++p) {
    for (std::size_t k = 0; k < a.times[p].size(); ++k) {
      for (std::size_t i = 0; i < a.times[p][k].size(); ++i) {
        EXPECT_EQ(a.times[p][k][i].end, b.times[p][k][i].end);
        EXPECT_EQ(a.times[p][k][i].end, c.times[p][k][i].end);
      }
    }
  }
}

}  // namespace
}  // namespace hzp::plan
