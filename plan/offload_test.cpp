// Offload (offload_optimizer, offload_activations): the bytes a step moves
// over the host link, the CPU Adam time, device and host memory, against
// closed forms derived by hand for Llama-3 8B cut to four layers.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "cost/perf_model.hpp"
#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"
#include "sim/analytic/analytic_engine.hpp"
#include "sim/metrics.hpp"
#include "traces/timeline.hpp"

namespace hzp::plan {
namespace {

// Llama-3 8B's parameters with four layers (hidden 4096, 8 KV heads of 128,
// FFN 14336, vocabulary 128256, untied head):
//   layer = q, o 4096² each + k, v 4096·1024 each + 3 · 4096·14336 + 2 norms
//         = 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000
//   embedding = head = 128256 · 4096 = 525,336,576; final norm 4,096
//   P = 4 · 218,112,000 + 2 · 525,336,576 + 4,096 = 1,923,125,248
// Every unit is a multiple of 8, so ZeRO-1 over 8 ranks pads nothing: each
// rank's optimizer shard is P / 8 = 240,390,656 parameters.
constexpr std::int64_t kParams = 1'923'125'248;
constexpr std::int64_t kShard = kParams / 8;

struct Offloaded {
  std::int64_t grads_down = 0, params_up = 0, params_down = 0, act_down = 0, act_up = 0, cpu_adam_bytes = 0;
  double cpu_adam_s = 0;  // PerfModel's cost of every CPU Adam op
};

Offloaded offloaded(const core::Schedule& s, const cost::PerfModel& pm) {
  Offloaded o;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.kind != core::OpKind::Compute || !core::is_offload(op.compute().kind)) continue;
      EXPECT_EQ(st.kind, core::StreamKind::Offload) << op.name;
      const std::int64_t b = op.compute().bytes.count();
      if (op.compute().kind == core::ComputeKind::HostOptimizer) {
        o.cpu_adam_bytes += b;
        o.cpu_adam_s += pm.compute(op).to_seconds();
      } else if (op.role == core::OpRole::GradReduce) {
        o.grads_down += b;
      } else if (op.role == core::OpRole::ParamGather) {
        (st.name == "offload_d2h" ? o.params_down : o.params_up) += b;
      } else if (st.name == "offload_d2h") {
        o.act_down += b;
      } else {
        o.act_up += b;
      }
    }
  }
  return o;
}

// ZeRO-1 on one DGX H100 node, 8 sequences of 4,096 tokens: one micro-batch each.
PlanOptions zero1() {
  PlanOptions o;
  o.strategy = Strategy::Zero1;
  o.seq_len = 4096;
  o.global_batch_sequences = 8;
  return o;
}

sim::Metrics simulate(const core::Schedule& s, const cost::PerfModel& pm) {
  sim::AnalyticEngine engine(pm);
  traces::TimelineRecorder rec;
  engine.run(s, traces::TraceHeader{}, rec);
  return sim::compute_metrics(s, rec.timeline(), pm.topology().spec().device);
}

TEST(Offload, OptimizerBytesCpuAdamAndMemory) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  const cost::PerfModel pm(topo);
  std::int64_t graph_params = 0;
  for (const auto& u : models::build_step_graph(m, models::GraphOptions{.seq_len = 4096}).units) {
    graph_params += u.params;
  }
  ASSERT_EQ(graph_params, kParams);

  PlanOptions o = zero1();
  const core::Schedule base = lower({m, topo}, o);
  o.offload_optimizer = true;
  const core::Schedule off = lower({m, topo}, o);
  const Offloaded x = offloaded(off, pm);
  EXPECT_EQ(x.grads_down, 4 * kShard);  // fp32 gradients of the 1/g_o shard, once a step
  EXPECT_EQ(x.params_up, 2 * kShard);   // updated bf16 parameters
  EXPECT_EQ(x.params_down, 0);
  EXPECT_EQ(x.cpu_adam_bytes, 30 * kShard);
  EXPECT_EQ(x.act_down + x.act_up, 0);
  // CPU Adam: 30 B/param at the device's share of the node's 614.4 GB/s.
  EXPECT_NEAR(x.cpu_adam_s, 30.0 * kShard / (614.4e9 / 8), 1e-6);
  // No Adam left on the device.
  for (const auto& st : off.programs[0].streams) {
    for (const auto& op : st.ops)
      EXPECT_FALSE(op.kind == core::OpKind::Compute && op.compute().kind == core::ComputeKind::Optimizer);
  }

  // bf16 gradients: half the download, 28 B/param for CPU Adam.
  o.grad_dtype = core::Dtype::Bf16;
  const Offloaded h = offloaded(lower({m, topo}, o), pm);
  EXPECT_EQ(h.grads_down, 2 * kShard);
  EXPECT_EQ(h.cpu_adam_bytes, 28 * kShard);

  // Device memory: lower by exactly the optimizer states; host: states,
  // bf16 staging and the fp32 gradients' landing buffer, 18 B per parameter.
  EXPECT_EQ(test_util::totals(base).static_alloc - test_util::totals(off).static_alloc, 12 * kShard);
  const sim::Metrics mb = simulate(base, pm), mo = simulate(off, pm);
  EXPECT_EQ(mb.memory[0].peak.count() - mo.memory[0].peak.count(), 12 * kShard);
  EXPECT_EQ(off.programs[0].host_bytes.count(), 18 * kShard);
  EXPECT_EQ(base.programs[0].host_bytes.count(), 0);
  // host_bytes survives the Schedule's file form (written only when > 0).
  const core::Schedule back = core::schedule_from_json(core::to_canonical_json(off), "offload");
  EXPECT_EQ(back.programs[0].host_bytes, off.programs[0].host_bytes);
  EXPECT_EQ(core::schedule_hash(back), core::schedule_hash(off));
  EXPECT_EQ(core::to_canonical_json(base).find("host_bytes"), std::string::npos);
  EXPECT_TRUE(mo.fits());
  EXPECT_EQ(mo.memory[0].host.count(), 18 * kShard);
  // The CPU step runs at its cost: no slowdown under collectives.
  EXPECT_GT(mo.step_time.to_seconds(), x.cpu_adam_s);

  // 8 GiB of host memory for 8 devices: 1 GiB each < 18 · P/8 = 4.03 GiB.
  topologies::ClusterSpec small = topologies::load_cluster("dgx-h100");
  small.host->memory_GiB = 8;
  small.device.host_memory_GiB_per_device = 1;
  const cost::PerfModel spm(topologies::Topology(small, 8));
  const sim::Metrics ms = simulate(lower({m, spm.topology()}, o), spm);
  EXPECT_FALSE(ms.memory[0].host_fits);
  EXPECT_FALSE(ms.fits());
}

TEST(Offload, ActivationsBothWays) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  const cost::PerfModel pm(topo);
  PlanOptions o = zero1();
  o.global_batch_sequences = 16;  // two micro-batches
  const core::Schedule base = lower({m, topo}, o);
  // The kept activations of every unit but the head, whose backward follows
  // its forward at once (it keeps them on the device).
  std::int64_t kept = 0, head = 0;
  for (const auto& st : base.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (op.kind != core::OpKind::Alloc || op.buffer().buffer_class != core::BufferClass::Activations) continue;
      const core::Op::Buffer& b = op.buffer();
      kept += b.bytes.count();
      if (b.name.rfind("act.u5.", 0) == 0) head += b.bytes.count();  // units: embedding, 4 layers, head
    }
  }
  ASSERT_GT(head, 0);
  o.offload_activations = true;
  const core::Schedule off = lower({m, topo}, o);
  const Offloaded x = offloaded(off, pm);
  EXPECT_EQ(x.act_down, kept - head);
  EXPECT_EQ(x.act_up, kept - head);
  EXPECT_EQ(x.grads_down + x.params_up + x.cpu_adam_bytes, 0);
  // Host: at most every offloaded activation of a step at once (1F1B without
  // pipelining: one micro-batch's); device peak lower than keeping them all.
  EXPECT_EQ(off.programs[0].host_bytes.count(), (kept - head) / 2);
  const sim::Metrics mb = simulate(base, pm), mo = simulate(off, pm);
  EXPECT_LT(mo.memory[0].peak, mb.memory[0].peak);
}

// Parameter offload (ZeRO-Infinity) under ZeRO-3 on 8 ranks, two
// micro-batches: every use of every unit (6 units x forward and backward x 2
// micro-batches) fetches its bf16 1/8 shard, 2 · P/8 bytes a pass over all
// units, so 4 passes move exactly P bytes up; the update's 1/8 shard goes down
// once (2 · P/8); the device holds no parameters (2 · P/8 less), the host them.
TEST(Offload, ParamsFetchedPerUseUnderZero3) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  const cost::PerfModel pm(topo);
  PlanOptions o = zero1();
  o.strategy = Strategy::Fsdp;
  o.global_batch_sequences = 16;
  const core::Schedule base = lower({m, topo}, o);
  o.offload_params = true;
  const core::Schedule off = lower({m, topo}, o);
  const Offloaded x = offloaded(off, pm);
  EXPECT_EQ(x.params_up, kParams);
  EXPECT_EQ(x.params_down, 2 * kShard);
  EXPECT_EQ(x.grads_down + x.cpu_adam_bytes + x.act_down + x.act_up, 0);
  EXPECT_EQ(test_util::totals(base).static_alloc - test_util::totals(off).static_alloc, 2 * kShard);
  EXPECT_EQ(off.programs[0].host_bytes.count(), 2 * kShard);
  // The all-gathers are the same: the fetch lands in the gathered buffer.
  EXPECT_EQ(test_util::totals(base).bytes, test_util::totals(off).bytes);
  // Each fetch precedes its unit's all-gather: the gather stream waits for it.
  int fetched_waits = 0;
  for (const auto& st : off.programs[0].streams) {
    for (const auto& op : st.ops) {
      if (st.name == "param_allgather" && op.kind == core::OpKind::Wait &&
          op.name.find(".params_fetched") != std::string::npos) {
        ++fetched_waits;
      }
    }
  }
  EXPECT_EQ(fetched_waits, 6 * 2 * 2);
  // 4 · P/8 · 2 bytes over a 63 GB/s link: the copies' time, overlapped.
  const sim::Metrics mb = simulate(base, pm), mo = simulate(off, pm);
  EXPECT_GE(mo.step_time.to_seconds(), mb.step_time.to_seconds());
  EXPECT_EQ(mo.memory[0].host.count(), 2 * kShard);

  // With the optimizer offloaded too, the CPU's Adam updates the host's
  // shard in place: nothing goes up or down at the step's end, and the host
  // holds the parameters, the states and the gradient's landing buffer
  // (2 + 12 + 4 bytes a parameter of the shard, no staging).
  o.offload_optimizer = true;
  const core::Schedule both = lower({m, topo}, o);
  const Offloaded y = offloaded(both, pm);
  EXPECT_EQ(y.params_up, kParams);  // the fetches only
  EXPECT_EQ(y.params_down, 0);
  EXPECT_EQ(both.programs[0].host_bytes.count(), 18 * kShard);
}

// g_p = 1 (ZeRO-1 and ZeRO-2 keep whole parameters): each use fetches the
// whole unit, 2 · P bytes a pass; kept from forward to backward
// (reshard_after_forward off), two passes instead of four. The update is
// regathered 1/8 -> 1 on the device and goes down whole.
TEST(Offload, ParamsWholeWhenUnsharded) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  const cost::PerfModel pm(topo);
  PlanOptions o = zero1();
  o.global_batch_sequences = 16;
  const core::Schedule base = lower({m, topo}, o);
  o.offload_params = true;
  const core::Schedule off = lower({m, topo}, o);
  const Offloaded x = offloaded(off, pm);
  EXPECT_EQ(x.params_up, 4 * 2 * kParams);
  EXPECT_EQ(x.params_down, 2 * kParams);
  EXPECT_EQ(test_util::totals(base).static_alloc - test_util::totals(off).static_alloc, 2 * kParams);
  EXPECT_EQ(off.programs[0].host_bytes.count(), 2 * kParams);
  // No all-gather is added for the fetches (g_p = 1); the regather stays.
  EXPECT_EQ(test_util::totals(base).bytes, test_util::totals(off).bytes);
  o.reshard_after_forward = false;
  EXPECT_EQ(offloaded(lower({m, topo}, o), pm).params_up, 2 * 2 * kParams);
}

// hzp (2, 8, 8) with the optimizer offloaded too: each use fetches the 1/2
// shard (2 · P/2 a pass, 4 passes: 4P up), the CPU's update of the 1/8 shard
// goes up (2 · P/8), is regathered to 1/2 on the device and goes down
// (2 · P/2). Host: the 1/2 shard and the optimizer's 18 bytes of the 1/8.
TEST(Offload, ParamsAndOptimizerOverDifferentGroups) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  const cost::PerfModel pm(topo);
  PlanOptions o = zero1();
  o.strategy = Strategy::Hzp;
  o.param_shard = 2;
  o.grad_shard = o.optim_shard = 8;
  o.global_batch_sequences = 16;
  o.offload_params = o.offload_optimizer = true;
  const core::Schedule s = lower({m, topo}, o);
  const Offloaded x = offloaded(s, pm);
  EXPECT_EQ(x.params_up, 4 * kParams + 2 * kShard);
  EXPECT_EQ(x.params_down, kParams);
  EXPECT_EQ(s.programs[0].host_bytes.count(), kParams + 18 * kShard);
  EXPECT_TRUE(simulate(s, pm).fits());
}

TEST(Offload, ParamsRefuseTheNextStepsRegather) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = zero1();
  o.offload_params = true;
  o.overlap_param_gather = true;
  try {
    (void)lower({m, topo}, o);
    FAIL();
  } catch (const core::ProblemError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0].field, "offload_params");
  }
}

TEST(Offload, NeedsTheClustersHost) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("mesh16-roce200"), 16);
  PlanOptions o = zero1();
  o.global_batch_sequences = 16;
  o.offload_activations = true;
  try {
    (void)lower({m, topo}, o);
    FAIL();
  } catch (const core::ProblemError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0].field, "offload_activations");
  }
}

}  // namespace
}  // namespace hzp::plan
