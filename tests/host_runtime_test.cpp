// The runtime's executor on the host backend against the analytic engine:
// the same Schedule, run for real on threads with the performance model's
// durations as sleeps, must take the step the engine predicts (within 3 %);
// and a Schedule that deadlocks is reported, op by op, instead of hanging.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <numeric>

#include "models/model_spec.hpp"
#include "plan/plan.hpp"
#include "runtime/executor.hpp"
#include "runtime/host/host_backend.hpp"
#include "sim/analytic/analytic_engine.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp {
namespace {

struct Case {
  const char* name;
  plan::PlanOptions o;
};

plan::PlanOptions base(plan::Strategy s) {
  plan::PlanOptions o;
  o.strategy = s;
  o.seq_len = 4096;
  o.global_batch_sequences = 32;
  o.recompute = models::Recompute::Full;
  return o;
}

std::vector<Case> cases() {
  plan::PlanOptions fsdp = base(plan::Strategy::Fsdp);
  plan::PlanOptions hzp_async = base(plan::Strategy::Hzp);
  hzp_async.param_shard = 2;
  hzp_async.grad_shard = 8;
  hzp_async.optim_shard = 16;
  hzp_async.async = true;
  plan::PlanOptions hzp_sync = hzp_async;
  hzp_sync.async = false;
  plan::PlanOptions pipeline = base(plan::Strategy::Zero1);
  pipeline.pp = 2;
  return {{"fsdp", fsdp}, {"hzp_async", hzp_async}, {"hzp_sync", hzp_sync}, {"pipeline_1f1b", pipeline}};
}

class HostEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(HostEquivalence, StepMatchesTheAnalyticEngineWithinThreePercent) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 4;
  const topologies::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Schedule s = plan::lower(m, pm.topology(), GetParam().o);
  const double predicted = sim::AnalyticEngine(pm, /*interference=*/false).estimate(s).step.to_seconds();
  ASSERT_GT(predicted, 0);
  // About three wall seconds per step: sleeps of milliseconds; a wake-up up to
  // 5 ms late is the host's jitter (a loaded 2-core CI machine), not the device's.
  runtime::HostOptions o;
  o.time_scale = 3.0 / predicted;
  o.late = std::chrono::milliseconds(5);
  runtime::HostBackend backend(s, pm, o);
  std::vector<std::size_t> all(s.programs.size());
  std::iota(all.begin(), all.end(), 0);
  runtime::execute(s, all, backend);
  const double measured = runtime::measured_step(s, backend.times()).to_seconds();
  // The trace says when the host issued each op, never after it started.
  traces::TimelineRecorder rec;
  backend.emit({}, rec);
  for (const auto& r : rec.timeline().ops) {
    ASSERT_TRUE(r.issued) << r.name;
    EXPECT_LE(r.issued->count_ns(), r.start.count_ns()) << r.name;
  }
  std::cout << GetParam().name << ": host " << measured << " s, analytic " << predicted << " s, late ops "
            << backend.late_ops() << "\n";
  EXPECT_NEAR(measured / predicted, 1.0, 0.03) << GetParam().name << ": host " << measured << " s, analytic "
                                               << predicted << " s, " << s.programs.size() << " rank classes";
}

INSTANTIATE_TEST_SUITE_P(Schedules, HostEquivalence, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Two rank classes. Class 0: stream A waits for event 1 before recording 0,
// stream B waits for 0 before recording 1 (a cycle); class 1 reaches an
// all-reduce with class 0 that class 0 never issues to its stream in time.
core::Schedule deadlock() {
  core::Schedule s;
  s.name = "deadlock";
  s.step.world_size = 2;
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 1}});
  auto op = [](int id, core::OpKind kind, int event) {
    core::Op o;
    o.id = id;
    o.kind = kind;
    o.name = fmt::format("op{}", id);
    o.event = event;
    return o;
  };
  for (int p = 0; p < 2; ++p) {
    core::Program prog;
    prog.id = p;
    prog.name = fmt::format("class{}", p);
    prog.ranks = {p};
    prog.threads.push_back(core::Thread{0, "main", {}, {}});
    core::Stream a{0, "a", core::StreamKind::Compute, 0, {}};
    core::Stream b{1, "b", core::StreamKind::ParamGather, 0, {}};
    if (p == 0) {
      a.ops = {op(0, core::OpKind::Wait, 1), op(2, core::OpKind::Record, 0)};
      b.ops = {op(1, core::OpKind::Wait, 0), op(3, core::OpKind::Record, 1)};
      core::Op ar = op(4, core::OpKind::Collective, -1);
      ar.collective = core::CollectiveKind::AllReduce;
      ar.group = 0;
      ar.bytes = core::Bytes(1 << 20);
      a.ops.push_back(ar);
    } else {
      core::Op ar = op(0, core::OpKind::Collective, -1);
      ar.collective = core::CollectiveKind::AllReduce;
      ar.group = 0;
      ar.bytes = core::Bytes(1 << 20);
      a.ops = {ar};
    }
    prog.streams = {a, b};
    s.programs.push_back(prog);
  }
  return s;
}

TEST(HostWatchdog, ReportsTheWaitingOpOfEveryRankInsteadOfHanging) {
  const core::Schedule s = deadlock();
  const topologies::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  runtime::HostOptions o;
  o.watchdog = std::chrono::milliseconds(300);
  runtime::HostBackend backend(s, pm, o);
  try {
    runtime::execute(s, {0, 1}, backend);
    FAIL() << "a deadlocked Schedule finished";
  } catch (const runtime::RunError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("watchdog"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 (class 0 'class0') stream 'a': op 0 'op0' (wait) waits for event 1"), std::string::npos)
        << what;
    EXPECT_NE(what.find("stream 'b': op 1 'op1' (wait) waits for event 0"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 (class 1 'class1') stream 'a': op 0 'op0' (collective) waits for 1 of 2 members"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace hzp
