// Zero-bubble pipeline schedules (Qi et al., ICLR 2024): the orders, their
// bubbles replayed against the paper's closed forms, and their activation memory.
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"

namespace hzp::plan {
namespace {

char kind(const PipelineSlot& s) { return test_util::pass_of(s); }

std::string text(const std::vector<PipelineSlot>& order) {
  std::string out;
  for (const auto& s : order) out += kind(s) + std::to_string(s.micro_batch) + (s.chunk ? "'" : "") + " ";
  return out;
}

// One traits entry per pipeline schedule, in the name table's order, and
// the facts the plan check, the lowering and the search read from it.
TEST(PipelineSchedules, OneTraitsEntryEach) {
  ASSERT_GE(pipeline_schedules().size(), kPipelineSchedules.size());
  for (std::size_t i = 0; i < kPipelineSchedules.size(); ++i) {
    EXPECT_EQ(pipeline_schedules()[i].schedule, kPipelineSchedules[i].first);
    EXPECT_EQ(pipeline_schedules()[i].name, kPipelineSchedules[i].second);
    EXPECT_EQ(traits(kPipelineSchedules[i].first).schedule, kPipelineSchedules[i].first);
  }
  EXPECT_THROW((void)traits(static_cast<PipelineSchedule>(1000)), std::logic_error);
  EXPECT_FALSE(traits(PipelineSchedule::OneFOneB).split_backward);
  EXPECT_TRUE(traits(PipelineSchedule::OneFOneB).fills_and_drains);
  EXPECT_EQ(traits(PipelineSchedule::ZbV).vpp, 2);
  EXPECT_EQ(traits(PipelineSchedule::ZbV).settled_per_stage, 2);
  EXPECT_TRUE(traits(PipelineSchedule::DualPipe).mirrored);
}

TEST(ZeroBubbleOrder, ZbH1DelaysStageIsWeightGradientsByI) {
  // p = 4, m = 8: stage 0 is 1F1B with each W right after its B; the last
  // stage defers its W passes by 3 micro-batches (4 in flight on every stage).
  EXPECT_EQ(text(pipeline_order(0, 4, 1, 8, PipelineSchedule::ZbH1)),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 ");
  EXPECT_EQ(text(pipeline_order(3, 4, 1, 8, PipelineSchedule::ZbH1)),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ");
}

// Every (micro-batch, chunk) runs F, B and W exactly once, W after its B after its F.
TEST(ZeroBubbleOrder, EverySlotOnceAndInDependencyOrder) {
  for (auto schedule : {PipelineSchedule::ZbH1, PipelineSchedule::ZbV}) {
    const int vpp = schedule == PipelineSchedule::ZbV ? 2 : 1;
    for (int pp : {1, 2, 4, 8}) {
      for (std::int64_t m : {1, 3, 8, 16}) {
        const auto orders = pipeline_orders(pp, vpp, m, schedule);
        ASSERT_EQ(orders.size(), static_cast<std::size_t>(pp));
        for (const auto& order : orders) {
          ASSERT_EQ(order.size(), static_cast<std::size_t>(3 * vpp * m));
          std::map<std::tuple<std::int64_t, int, char>, std::size_t> at;
          for (std::size_t i = 0; i < order.size(); ++i) {
            EXPECT_TRUE(at.emplace(std::tuple{order[i].micro_batch, order[i].chunk, kind(order[i])}, i).second);
          }
          for (std::int64_t mb = 0; mb < m; ++mb) {
            for (int c = 0; c < vpp; ++c) {
              EXPECT_LT(at.at({mb, c, 'F'}), at.at({mb, c, 'B'}));
              EXPECT_LT(at.at({mb, c, 'B'}), at.at({mb, c, 'W'}));
            }
          }
        }
      }
    }
  }
}

// With W short against B (an MoE layer's experts, say) every stage can reach
// the in-flight cap holding the chunk-1 inputs another stage waits for; the
// order still completes, every slot once (plan search screened such a plan:
// pp 2, 6 micro-batches, B 1.5 and W 0.1 of a forward stalled before).
TEST(ZeroBubbleOrder, ZbVCompletesWhenWeightGradientsAreShort) {
  for (const PassTimes t : {PassTimes{1.0, 1.5, 0.1}, PassTimes{1.0, 3.0, 0.1}, PassTimes{1.0, 0.2, 3.0}}) {
    for (int pp : {2, 3, 4, 8}) {
      for (std::int64_t m : {2, 6, 8, 24}) {
        const auto orders = pipeline_orders(pp, 2, m, PipelineSchedule::ZbV, t);
        for (const auto& order : orders) {
          std::set<std::tuple<std::int64_t, int, char>> seen;
          for (const auto& s : order) EXPECT_TRUE(seen.emplace(s.micro_batch, s.chunk, kind(s)).second);
          EXPECT_EQ(seen.size(), static_cast<std::size_t>(6 * m)) << pp << " " << m;
        }
      }
    }
  }
}

// A model of pp·vpp identical layers (one per chunk) with a tiny vocabulary,
// so the embedding and the head hold next to nothing.
models::ModelSpec layers(int n) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = n;
  m.vocab = 128;
  return m;
}

core::Schedule lowered(int pp, int vpp, int m, PipelineSchedule schedule, models::Recompute r = {}, int n = 0) {
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), pp);
  PlanOptions o = test_util::ddp_pipeline(pp, m);
  o.vpp = vpp;
  o.recompute = r;
  o.pipeline_schedule = schedule;
  core::Schedule s = lower({layers(n > 0 ? n : pp * vpp), topo}, o);  // checked by core::check_schedule
  test_util::without_launch_latency(s);
  return s;
}

// The pass a layer's compute op belongs to: forward, B (input gradients and
// recomputation), or W (weight gradients); '-' for what costs nothing here
// (embedding, head, optimizer, zeroing the gradients).
char pass(const core::Op& op) {
  if (op.compute().kind == core::ComputeKind::Optimizer || op.name.starts_with("embedding.") ||
      op.name.starts_with("head.") || op.name == "zero_grads") {
    return '-';
  }
  if (op.name.ends_with(".wgrad")) return 'W';
  if (op.name.find(".dgrad") != std::string::npos || op.name.ends_with(".bwd") ||
      op.name.find(".recompute") != std::string::npos) {
    return 'B';
  }
  return 'F';
}

struct Bubble {
  double step = 0;      // the whole step, in units of T
  double worst = 0;     // the largest stage's idle time between its first and last pass, in T
  double fraction = 0;  // stage 0's idle fraction of the whole step
};

// Replays with each layer's forward, B and W costing T_F, T_B, T_W (1 ms
// a unit): an op costs its pass's time in proportion to its FLOPs within the
// pass (every layer is alike), communication is free. `stage_layers`: the
// layers on each stage.
Bubble replay_bubble(const core::Schedule& s, int stage_layers, double tf, double tb, double tw) {
  std::map<char, double> flops;  // per pass, over stage 0's layers and micro-batches
  for (const auto& op : s.programs[0].streams[0].ops) {
    if (op.kind == core::OpKind::Compute) flops[pass(op)] += op.compute().flops.count();
  }
  const double per = static_cast<double>(s.step.micro_batches);
  const std::map<char, double> time{{'F', tf}, {'B', tb}, {'W', tw}};
  core::ReplayCosts costs;
  costs.compute = [&](const core::Program&, const core::Op& op) {
    const char k = pass(op);
    if (k == '-' || flops[k] <= 0) return core::Duration{};
    const double per_pass = flops[k] / (per * stage_layers);
    return core::Duration::ns(std::llround(1e6 * time.at(k) * op.compute().flops.count() / per_pass));
  };
  const core::ReplayResult r = core::replay(s, costs);
  Bubble b;
  double idle0 = 0;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    double first = 1e300, last = 0, busy = 0;
    const auto& ops = s.programs[p].streams[0].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& t = r.times[p][0][i];
      b.step = std::max(b.step, static_cast<double>(t.end.count_ns()) / 1e6);
      if (ops[i].kind != core::OpKind::Compute || t.end == t.start) continue;
      first = std::min(first, static_cast<double>(t.start.count_ns()) / 1e6);
      last = std::max(last, static_cast<double>(t.end.count_ns()) / 1e6);
      busy += static_cast<double>((t.end - t.start).count_ns()) / 1e6;
    }
    b.worst = std::max(b.worst, last - first - busy);
    if (p == 0) idle0 = busy;
  }
  b.fraction = 1.0 - idle0 / b.step;
  return b;
}

// Closed forms (Qi et al. §2; T_F, T_B, T_W of one stage's layers; m ≥ p).
//  1F1B:  a stage idles (p − 1)(T_F + T_B + T_W) between its first and last
//         pass: the forward wave reaches the last stage (p − 1) T_F late, and
//         each backward climbs back a stage per T_B + T_W, so the last
//         backward reaches stage 0 (p − 1)(T_B + T_W) after the last stage's.
//         The step is (m + p − 1)(T_F + T_B + T_W), stage 0's idle fraction
//         (p − 1)/(m + p − 1).
//  ZB-H1: only B climbs back (T_B a stage), so the waits shrink to
//         (p − 1)(T_F + T_B), and the W passes stage i deferred (i of them,
//         1F1B's memory) run in the cool-down while it waits for B from below;
//         the paper's bubble is (p − 1)(T_F + T_B − T_W), a third of 1F1B's
//         for equal times, and the step m(T_F + T_B + T_W) plus that.
// Replayed with T_F = T_B = 1 and T_W = 1 or 1/2 (the paper's T_W ≤ T_F + T_B).
TEST(ZeroBubble, ReplayedBubblesMatchThePapersClosedForms) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{4, 16}, std::pair{2, 8}, std::pair{8, 8}}) {
    const Bubble one = replay_bubble(lowered(p, 1, m, PipelineSchedule::OneFOneB), 1, 1, 1, 1);
    EXPECT_NEAR(one.worst, 3.0 * (p - 1), 0.01) << "p=" << p << " m=" << m;
    EXPECT_NEAR(one.step, 3.0 * m + 3.0 * (p - 1), 0.01);
    EXPECT_NEAR(one.fraction, (p - 1.0) / (m + p - 1.0), 1e-3);
    const core::Schedule h1 = lowered(p, 1, m, PipelineSchedule::ZbH1);
    for (double tw : {1.0, 0.5}) {
      const Bubble zb = replay_bubble(h1, 1, 1, 1, tw);
      EXPECT_NEAR(zb.worst, (p - 1) * (1 + 1 - tw), 0.01) << "p=" << p << " m=" << m << " T_W=" << tw;
      EXPECT_NEAR(zb.step, m * (2 + tw) + (p - 1) * (2 - tw), 0.01);
    }
  }
}

// The step of ZB-V's slot orders run with unit pass times: one chain of 2p
// virtual stages (test_util::pipeline_step).
std::int64_t unit_step_zb_v(int p, const std::vector<std::vector<PipelineSlot>>& orders) {
  const PipelineLayout v{p, 2, {}, true};
  auto position = [&](int s, const PipelineSlot& slot) { return v.virtual_stage(s, slot.chunk); };
  return std::llround(test_util::pipeline_step(orders, position, 2 * p - 1, 1, 1, 1));
}

// ZB-V with T_F = T_B = T_W = T per chunk: the paper's bubble is
// (p − 1)(T_F + T_B − 2 T_W) = 0 (§6). Its schedule is a parallelogram:
// stage i starts when the first forward reaches it, i T in, and each stage
// steps its optimizer when it is done (§4), so the step spans 6mT of passes
// plus the (p − 1) T skew, which the paper does not count as bubble. The
// order built for equal times takes exactly that, 6m + p − 1.
TEST(ZeroBubble, ZbVIsBubbleFreeButForTheSkew) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{4, 16}, std::pair{2, 8}, std::pair{8, 16}, std::pair{8, 32}}) {
    EXPECT_EQ(unit_step_zb_v(p, pipeline_orders(p, 2, m, PipelineSchedule::ZbV)), 6 * m + p - 1)
        << "p=" << p << " m=" << m;
  }
}

// Lowered, ZB-V builds its order with the layers' FLOP ratios (here T_B =
// 1.03 T_F, T_W = 0.98 T_F) and is replayed with those costs: every stage
// idles under two thirds of what it does under interleaved 1F1B on the same
// 2p layers ((p − 1)(T_F + T_B + T_W) per chunk), and the step is shorter.
TEST(ZeroBubble, ZbVLoweredBeatsInterleaved) {
  models::GraphOptions go;
  go.seq_len = 1024;
  for (auto [p, m] : {std::pair{4, 8}, std::pair{2, 8}, std::pair{8, 16}}) {
    const PassTimes t = layer_pass_times(models::build_step_graph(layers(2 * p), go));
    const Bubble v = replay_bubble(lowered(p, 2, m, PipelineSchedule::ZbV), 2, t.forward, t.input, t.weight);
    const Bubble one = replay_bubble(lowered(p, 2, m, PipelineSchedule::OneFOneB), 2, t.forward, t.input, t.weight);
    EXPECT_NEAR(one.worst, (p - 1) * (t.forward + t.input + t.weight), 0.01) << "p=" << p << " m=" << m;
    EXPECT_LT(v.worst, 0.65 * one.worst) << "p=" << p << " m=" << m;
    EXPECT_LT(v.step, one.step);
  }
}

// Activation bytes held on each stage's compute stream at its peak.
std::vector<std::int64_t> activation_peaks(const core::Schedule& s, std::vector<std::int64_t>* held_w = nullptr) {
  std::vector<std::int64_t> peaks;
  for (const auto& prog : s.programs) {
    std::int64_t now = 0, peak = 0, w = 0;
    for (const auto& op : prog.streams[0].ops) {
      if (op.kind != core::OpKind::Alloc && op.kind != core::OpKind::Free) continue;
      const core::Op::Buffer& b = op.buffer();
      if (b.buffer_class != core::BufferClass::Activations && b.buffer_class != core::BufferClass::Recomputed) continue;
      if (op.kind == core::OpKind::Alloc) now += b.bytes.count();
      if (op.kind == core::OpKind::Free) now -= b.bytes.count();
      const bool for_w = b.name.starts_with("act_w") || b.name.starts_with("recomputed_w");
      if (op.kind == core::OpKind::Alloc && for_w && b.name.ends_with(".mb0")) w += b.bytes.count();
      peak = std::max(peak, now);
    }
    peaks.push_back(peak);
    if (held_w) held_w->push_back(w);
  }
  return peaks;
}

// ZB-H1 (§2.1): stage i keeps p micro-batches in flight, i of them only as
// what W still reads (M_W), so it holds at most 1F1B's (p − i) M_B + i M_W;
// the first stage, 1F1B's largest, holds what it does under 1F1B, and with
// M_W ≤ M_B no stage holds more than p M_B: the peak is 1F1B's. ZB-V (§6):
// at most 2p chunk micro-batches of M_B / 2 on every stage, 1F1B's p M_B on
// the same layers again. Full recomputation stores little (M_B is the
// layer input) while W reads what B recomputed (M_W > M_B): then only the
// first bound holds, which is what the paper's accounting gives too.
TEST(ZeroBubble, ActivationMemoryAsThePaperStates) {
  const int p = 4, m = 8;
  const auto P = static_cast<std::size_t>(p);
  for (auto r : {models::Recompute::None, models::Recompute::Full}) {
    const bool none = r == models::Recompute::None;
    const std::vector<std::int64_t> one = activation_peaks(lowered(p, 1, m, PipelineSchedule::OneFOneB, r));
    std::vector<std::int64_t> held_w;
    const std::vector<std::int64_t> h1 = activation_peaks(lowered(p, 1, m, PipelineSchedule::ZbH1, r), &held_w);
    for (std::size_t i = 0; i < P; ++i) {
      const auto in_flight = static_cast<std::int64_t>(P - i);  // 1F1B's micro-batches in flight on stage i
      // Under full recomputation one more M_W: B's recomputation of a stage's
      // first layer meets the W operands its later units (the head) keep.
      const auto deferred = static_cast<std::int64_t>(i) + (none ? 0 : 1);
      EXPECT_LE(h1[i], one[i] + deferred * held_w[i]) << "stage " << i;
      // p·M_B(i): 1F1B's first-stage peak with stage i's own activations per micro-batch.
      if (none) {
        EXPECT_LE(h1[i], p * (one[i] / in_flight)) << "stage " << i;
      }
    }
    EXPECT_LE(h1[0], one[0]);
    if (!none) continue;
    EXPECT_EQ(h1[0], one[0]);
    // ZB-V against 1F1B on the same 2p layers (two a stage).
    const std::int64_t one_peak = activation_peaks(lowered(p, 1, m, PipelineSchedule::OneFOneB, r, 2 * p))[0];
    const std::vector<std::int64_t> v = activation_peaks(lowered(p, 2, m, PipelineSchedule::ZbV, r));
    // Stage 0 also holds the head here (its final norm and loss: 1.5 %).
    for (std::size_t i = 0; i < P; ++i) EXPECT_LE(v[i], (i == 0 ? 1.02 : 1.0) * static_cast<double>(one_peak)) << i;
  }
}

TEST(ZeroBubble, OptionNeedsItsVirtualStages) {
  const models::ModelSpec model = layers(8);
  topologies::Topology topo(topologies::load_cluster("dgx-h100"), 4);
  PlanOptions o = test_util::ddp_pipeline(4, 8);
  for (auto [schedule, vpp, ok] :
       {std::tuple{PipelineSchedule::ZbH1, 1, true}, std::tuple{PipelineSchedule::ZbH1, 2, false},
        std::tuple{PipelineSchedule::ZbV, 2, true}, std::tuple{PipelineSchedule::ZbV, 1, false}}) {
    o.pipeline_schedule = schedule;
    o.vpp = vpp;
    const std::vector<core::Problem> ps = check_plan({model, topo}, o);
    EXPECT_EQ(ps.empty(), ok) << to_string(schedule) << " vpp " << vpp;
    if (!ok) {
      ASSERT_EQ(ps.size(), 1u);
      EXPECT_EQ(ps[0].field, "pipeline_schedule");
    }
  }
  EXPECT_EQ(parse_pipeline_schedule("zb-v"), PipelineSchedule::ZbV);
  EXPECT_EQ(parse_pipeline_schedule("dualpipe"), PipelineSchedule::DualPipe);
  EXPECT_FALSE(parse_pipeline_schedule("dual-pipe"));
}

// ZB-V places chunk 1 back up the stages: stage 0 holds the first and the
// last layer, the embedding and the head; transfers pair up and every stage
// but the last (where the V turns) sends both ways.
TEST(ZeroBubble, ZbVPlacesTheChunksInAV) {
  const core::Schedule s = lowered(4, 2, 8, PipelineSchedule::ZbV);
  ASSERT_EQ(s.programs.size(), 4u);
  std::set<std::string> stage0;
  for (const auto& op : s.programs[0].streams[0].ops) {
    if (op.kind == core::OpKind::Compute) stage0.insert(op.name.substr(0, op.name.find('.')));
  }
  EXPECT_TRUE(stage0.contains("embedding"));
  EXPECT_TRUE(stage0.contains("head"));
  for (std::size_t p = 0; p < 4; ++p) {
    int sends = 0;
    for (const auto& st : s.programs[p].streams) {
      for (const auto& op : st.ops) sends += op.kind == core::OpKind::Send;
    }
    // Chunk 0 sends activations on and chunk 1 gradients on, except at the turn;
    // chunk 1 sends activations and chunk 0 gradients back, except on stage 0.
    EXPECT_EQ(sends, (p == 3 ? 0 : 2 * 8) + (p == 0 ? 0 : 2 * 8)) << "stage " << p;
  }
}

// Two-way pipelines (ZB-V, DualPipe) number each peer's activations and
// gradients apart (even and odd); context parallelism's ring numbers its K/V
// blocks per neighbour. Counted in one table, the two collided and the ring's
// receives waited for sequence numbers no one sent (a deadlock the replay
// found). Every send now meets its receive, in order per peer and stream.
TEST(ZeroBubble, TwoWayPipelinesRunWithContextParallelism) {
  for (auto [schedule, vpp] : {std::pair{PipelineSchedule::ZbV, 2}, std::pair{PipelineSchedule::DualPipe, 1}}) {
    topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
    PlanOptions o = test_util::ddp_pipeline(4, 8);
    o.vpp = vpp;
    o.cp = 2;
    o.pipeline_schedule = schedule;
    const core::Schedule s = lower({layers(8), topo}, o);
    ASSERT_EQ(s.programs.size(), 8u);  // 4 stages x 2 cp ranks
    core::ReplayCosts costs;
    costs.compute = [](const core::Program&, const core::Op&) { return core::Duration::ns(1000); };
    EXPECT_NO_THROW((void)core::replay(s, costs)) << to_string(schedule);
  }
}

}  // namespace
}  // namespace hzp::plan
