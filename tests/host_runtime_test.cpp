// The runtime's executor on the host backend against the analytic engine:
// the same Schedule, run on threads with the backend's virtual clock, must
// take the times the engine predicts, op by op; a Schedule that deadlocks is
// reported, op by op, instead of hanging; and an abort ends every wait at once.
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

// Test names and failures show the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

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

// The virtual clock: the executor's threads, streams, events and rendezvous
// as on the wall clock, with time advanced by the backend instead of by
// sleeping. Both sides then do the same integer-nanosecond max-plus
// arithmetic on the same PerfModel costs, so the run must equal the analytic
// engine op by op (not just the step to 1e-9), whatever the machine's load.
TEST_P(HostEquivalence, VirtualClockRunEqualsTheAnalyticEngine) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 4;
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const core::Schedule s = plan::lower({m, pm.topology()}, GetParam().o);
  // The host backend neither slows compute under collectives nor shares links
  // between them: neither does the reference.
  sim::AnalyticEngine analytic(pm, sim::Contention::none());
  const double predicted = analytic.estimate(s).step.to_seconds();
  ASSERT_GT(predicted, 0);
  runtime::HostOptions o;
  o.clock = runtime::HostClock::Virtual;
  runtime::HostBackend backend(s, pm, o);
  std::vector<std::size_t> all(s.programs.size());
  std::iota(all.begin(), all.end(), 0);
  runtime::execute(s, all, backend);
  const double measured = runtime::measured_step(s, backend.times()).to_seconds();
  std::cout << GetParam().name << ": host (virtual clock) " << measured << " s, analytic " << predicted << " s\n";
  EXPECT_NEAR(measured / predicted, 1.0, 1e-9) << GetParam().name << ": host " << measured << " s, analytic "
                                               << predicted << " s, " << s.programs.size() << " rank classes";
  EXPECT_EQ(backend.late_ops(), 0U);
  // Op by op: the same start and end, to the nanosecond; the trace says when
  // the host issued each op, never after it started; and the memory in use
  // follows the analytic timeline's, point by point.
  traces::TimelineRecorder host, engine;
  backend.emit({}, host);
  analytic.run(s, {}, engine);
  ASSERT_EQ(host.timeline().ops.size(), engine.timeline().ops.size());
  std::size_t differ = 0;
  for (std::size_t j = 0; j < host.timeline().ops.size(); ++j) {
    const auto& h = host.timeline().ops[j];
    const auto& e = engine.timeline().ops[j];
    ASSERT_EQ(h.op_id, e.op_id);
    if ((h.start != e.start || h.end != e.end) && ++differ <= 5) {
      ADD_FAILURE() << h.name << ": host [" << h.start.count_ns() << ", " << h.end.count_ns() << "] ns, analytic ["
                    << e.start.count_ns() << ", " << e.end.count_ns() << "] ns";
    }
  }
  EXPECT_EQ(differ, 0U);
  for (const auto& r : host.timeline().ops) {
    ASSERT_TRUE(r.issued) << r.name;
    EXPECT_LE(r.issued->count_ns(), r.start.count_ns()) << r.name;
  }
  ASSERT_EQ(host.timeline().memory.size(), engine.timeline().memory.size());
  for (std::size_t j = 0; j < host.timeline().memory.size(); ++j) {
    const auto& h = host.timeline().memory[j];
    const auto& e = engine.timeline().memory[j];
    ASSERT_EQ(h.time, e.time) << j;
    ASSERT_EQ(h.buffer, e.buffer) << j;
    ASSERT_EQ(h.in_use, e.in_use) << j << " " << h.buffer;
  }
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
    core::Op o = core::Op::of(kind);
    o.id = id;
    o.name = fmt::format("op{}", id);
    if (kind != core::OpKind::Collective) o.event().id = event;
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
      ar.collective().kind = core::CollectiveKind::AllReduce;
      ar.collective().group = 0;
      ar.collective().bytes = core::Bytes(1 << 20);
      a.ops.push_back(ar);
    } else {
      core::Op ar = op(0, core::OpKind::Collective, -1);
      ar.collective().kind = core::CollectiveKind::AllReduce;
      ar.collective().group = 0;
      ar.collective().bytes = core::Bytes(1 << 20);
      a.ops = {ar};
    }
    prog.streams = {a, b};
    s.programs.push_back(prog);
  }
  return s;
}

TEST(HostWatchdog, ReportsTheWaitingOpOfEveryRankInsteadOfHanging) {
  const core::Schedule s = deadlock();
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
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

// One program, one thread and one stream of `ops` compute ops of `flops`
// each; the thread's launch latency `launch`.
core::Schedule one_stream(int ops, double flops, core::Duration launch) {
  core::Schedule s;
  s.name = "one_stream";
  s.step.world_size = 1;
  s.groups.push_back(core::Group{0, core::GroupKind::World, {0}});
  core::Program prog;
  prog.name = "only";
  prog.ranks = {0};
  prog.threads.push_back(core::Thread{0, "main", launch, launch});
  core::Stream st{0, "compute", core::StreamKind::Compute, 0, {}};
  for (int i = 0; i < ops; ++i) {
    core::Op o = core::Op::of(core::OpKind::Compute);
    o.id = i;
    o.compute().kind = core::ComputeKind::Gemm;
    o.name = fmt::format("gemm{}", i);
    o.compute().flops = core::Flops(flops);
    st.ops.push_back(o);
  }
  prog.streams = {st};
  s.programs.push_back(prog);
  return s;
}

// Issue 19, item 1: the watchdog reported and the run then hung, because
// workers (and issuing host threads) slept in sleep_until, which an abort
// cannot interrupt. Each run below would sleep for days.
double seconds_to_abort(const core::Schedule& s) {
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  runtime::HostOptions o;
  o.watchdog = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  {
    runtime::HostBackend backend(s, pm, o);
    EXPECT_THROW(runtime::execute(s, {0}, backend), runtime::RunError);
  }  // and the backend's threads are joined
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HostWatchdog, AbortsPromptlyWhileAnOpSleeps) {
  // A GEMM of 1e21 FLOPs: about 2e6 s on an H100.
  EXPECT_LT(seconds_to_abort(one_stream(2, 1e21, core::Duration{})), 10.0);
}

TEST(HostWatchdog, AbortsPromptlyWhileTheHostIssues) {
  // A launch latency of a day: the host thread waits to issue the second op.
  EXPECT_LT(seconds_to_abort(one_stream(3, 1e9, core::Duration::seconds(86400))), 10.0);
}

// The wall clock still sleeps and counts the ops whose end the host missed:
// with no tolerance at all (late = 0) every wake-up is late, so the run is
// past the fraction that makes hzp-run call it unreliable.
TEST(HostWallClock, CountsTheOpsTheHostWokeLateFor) {
  const core::Schedule s = one_stream(20, 1e12, core::Duration::us(4));
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  runtime::HostOptions o;
  o.time_scale = 20;  // 20 GEMMs of ~1.4 ms: about 0.6 s of wall time; sleeps of milliseconds
  o.late = std::chrono::microseconds(0);
  runtime::HostBackend backend(s, pm, o);
  runtime::execute(s, {0}, backend);
  EXPECT_EQ(backend.timed_ops(), 20U);
  EXPECT_GT(static_cast<double>(backend.late_ops()), runtime::kMaxLateFraction * 20);
  const double step = runtime::measured_step(s, backend.times()).to_seconds();
  EXPECT_GT(step, 0);
}

}  // namespace
}  // namespace hzp
