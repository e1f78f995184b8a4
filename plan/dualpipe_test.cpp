// DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437 §3.2.1): its
// order, its bubble against the paper's closed form, its memory (twice the
// parameters, p + 1 micro-batches of activations) and the gradient sum of
// the two copies of every stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"
#include "schedule/replay.hpp"

namespace hzp::plan {
namespace {

char kind(const PipelineSlot& s) { return test_util::pass_of(s); }

// The step of DualPipe's orders run with pass times tf, tb, tw
// (test_util::pipeline_step): two chains of p virtual stages, chunk 0 of
// stage s at position s of the first (micro-batches 0 .. m/2 - 1), chunk 1
// at position p - 1 - s of the second.
double step_of(int p, std::int64_t m, const std::vector<std::vector<PipelineSlot>>& orders, double tf, double tb,
               double tw) {
  for (const auto& order : orders) {
    for (const auto& slot : order) EXPECT_EQ(slot.chunk == 1, slot.micro_batch >= m / 2);
  }
  auto position = [&](int s, const PipelineSlot& slot) { return slot.chunk == 0 ? s : p - 1 - s; };
  return test_util::pipeline_step(orders, position, p - 1, tf, tb, tw);
}

// Every micro-batch runs F, B and W once, W after its B after its F, the
// first half through chunk 0 and the second through chunk 1, and no stage
// holds more than p + 1 chunk micro-batches (forwarded, W not yet run):
// DualPipe's p + 1 micro-batches of activations.
TEST(DualPipe, EveryPassOnceAndAtMostPPlusOneInFlight) {
  for (int p : {2, 4, 8}) {
    for (std::int64_t m : {p, 2 * p, 6 * p}) {
      for (const PassTimes t : {PassTimes{}, PassTimes{1, 1, 0.5}, PassTimes{1, 1.5, 0.1}}) {
        const auto orders = pipeline_orders(p, 1, m, PipelineSchedule::DualPipe, t);
        ASSERT_EQ(orders.size(), static_cast<std::size_t>(p));
        for (const auto& order : orders) {
          ASSERT_EQ(order.size(), static_cast<std::size_t>(3 * m));
          std::map<std::tuple<std::int64_t, char>, std::size_t> at;
          std::int64_t in_flight = 0, most = 0;
          for (std::size_t i = 0; i < order.size(); ++i) {
            EXPECT_EQ(order[i].chunk, order[i].micro_batch >= m / 2 ? 1 : 0);
            EXPECT_TRUE(at.emplace(std::tuple{order[i].micro_batch, kind(order[i])}, i).second);
            in_flight += kind(order[i]) == 'F' ? 1 : kind(order[i]) == 'W' ? -1 : 0;
            most = std::max(most, in_flight);
          }
          EXPECT_LE(most, p + 1) << "p=" << p << " m=" << m;
          for (std::int64_t mb = 0; mb < m; ++mb) {
            EXPECT_LT(at.at({mb, 'F'}), at.at({mb, 'B'}));
            EXPECT_LT(at.at({mb, 'B'}), at.at({mb, 'W'}));
          }
        }
      }
    }
  }
}

// The paper's bubble (DeepSeek-V3 Table 2): (p/2 - 1)(T_F&B + T_B - 3 T_W),
// where B is the whole backward (input and weight gradients, T_B + T_W here)
// and F&B a forward and a backward back to back (no overlap modelled:
// T_F + T_B + T_W). With T_F = T_B = T_W = T that is 2(p/2 - 1) T = (p - 2) T
// on top of the 3m T of passes: the order reaches it exactly. (1F1B's is
// 3(p - 1) T, ZB-H1's (p - 1) T.) With T_W = T/2 or T/4 the list schedule
// lies between the paper's figure and ZB-H1's closed form
// m(T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W), up to 6.25 T above the
// paper's at p = 16: DeepSeek's hand-built order packs W tighter.
TEST(DualPipe, BubbleAsThePaperStatesForEqualPasses) {
  for (auto [p, m] :
       {std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 16}, std::pair{6, 12}, std::pair{8, 32}, std::pair{16, 64}}) {
    const auto equal = pipeline_orders(p, 1, m, PipelineSchedule::DualPipe);
    EXPECT_DOUBLE_EQ(step_of(p, m, equal, 1, 1, 1), 3.0 * m + (p / 2 - 1) * (3 + 2 - 3)) << "p=" << p << " m=" << m;
    for (double tw : {0.5, 0.25}) {
      const auto orders = pipeline_orders(p, 1, m, PipelineSchedule::DualPipe, PassTimes{1, 1, tw});
      const double step = step_of(p, m, orders, 1, 1, tw);
      const double paper = m * (2 + tw) + (p / 2 - 1) * ((2 + tw) + (1 + tw) - 3 * tw);
      const double zb_h1 = m * (2 + tw) + (p - 1) * (2 - tw);
      EXPECT_GE(step, paper - 1e-9) << "p=" << p << " m=" << m << " T_W=" << tw;
      EXPECT_LE(step, zb_h1 + 1e-9) << "p=" << p << " m=" << m << " T_W=" << tw;
    }
  }
}

// A model of n identical layers with a tiny vocabulary.
models::ModelSpec layers(int n) {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = n;
  m.vocab = 128;
  return m;
}

core::Schedule lowered(int pp, std::int64_t m, PipelineSchedule schedule) {
  PlanOptions o = test_util::ddp_pipeline(pp, m);
  o.pipeline_schedule = schedule;
  return lower({layers(2 * pp), topologies::Topology(topologies::load_cluster("dgx-h100"), pp)}, o);
}

// Each stage holds its own layers and a copy of its mirror's (2x the
// parameters, gradients and optimizer states: the model states of stages s
// and p - 1 - s under 1F1B), and after the last backward one all-reduce with
// the mirror stage sums the two copies' gradients: the rank's whole fp32
// gradient, 4 bytes a parameter of both chunks (DDP: g_o = 1).
TEST(DualPipe, TwoCopiesOfTheParametersAndTheirGradientSum) {
  const int p = 4;
  const core::Schedule one = lowered(p, 8, PipelineSchedule::OneFOneB);
  const core::Schedule dual = lowered(p, 8, PipelineSchedule::DualPipe);
  for (int s = 0; s < p; ++s) {
    std::int64_t one_s = 0, one_m = 0, dual_s = 0, mirror_bytes = 0;
    auto sum = [](const core::Program& prog, std::int64_t& out, std::int64_t* mirror, const core::Schedule& sch) {
      for (const auto& st : prog.streams) {
        for (const auto& op : st.ops) {
          using BC = core::BufferClass;
          if (op.kind == core::OpKind::Alloc) {
            const core::Op::Buffer& b = op.buffer();
            if (b.buffer_class == BC::Params || b.buffer_class == BC::Grads || b.buffer_class == BC::OptimizerStates)
              out += b.bytes.count();
          }
          if (mirror && op.kind == core::OpKind::Collective) {
            const core::Op::Collective& c = op.collective();
            if (sch.group(c.group).kind == core::GroupKind::PpMirror) *mirror += c.bytes.count();
          }
        }
      }
    };
    sum(one.programs.at(static_cast<std::size_t>(s)), one_s, nullptr, one);
    sum(one.programs.at(static_cast<std::size_t>(p - 1 - s)), one_m, nullptr, one);
    sum(dual.programs.at(static_cast<std::size_t>(s)), dual_s, &mirror_bytes, dual);
    EXPECT_EQ(dual_s, one_s + one_m) << "stage " << s;
    // Model states are 2 (params) + 4 (grads) + 12 (optimizer) bytes a parameter.
    EXPECT_EQ(mirror_bytes, (one_s + one_m) / 18 * 4) << "stage " << s;
  }
  for (const auto& g : dual.groups) {
    if (g.kind == core::GroupKind::PpMirror) {
      EXPECT_EQ(g.ranks[0] + g.ranks[1], p - 1);  // stage s with p - 1 - s (one rank a stage)
    }
  }
}

// The schedule is refused by name where it cannot run: an odd pipeline,
// virtual stages, or an odd number of micro-batches.
TEST(DualPipe, RefusedWhereItCannotRun) {
  const models::ModelSpec m = layers(12);
  auto keys = [&](int gpus, const PlanOptions& o) {
    return test_util::problem_fields(m, topologies::Topology(topologies::load_cluster("dgx-h100"), gpus), o);
  };
  PlanOptions o = test_util::ddp_pipeline(4, 8);
  o.pipeline_schedule = PipelineSchedule::DualPipe;
  EXPECT_TRUE(keys(4, o).empty());
  o.global_batch_sequences = 6;
  EXPECT_TRUE(keys(4, o).empty());
  o.global_batch_sequences = 5;
  EXPECT_EQ(keys(4, o), (std::set<std::string>{"pipeline_schedule"}));
  o.global_batch_sequences = 8;
  o.vpp = 2;
  EXPECT_EQ(keys(4, o), (std::set<std::string>{"pipeline_schedule"}));
  o.vpp = 1;
  o.pp = 3;
  o.global_batch_sequences = 48;  // 24 GPUs: 8 data-parallel ranks, 6 micro-batches
  EXPECT_EQ(keys(24, o), (std::set<std::string>{"pipeline_schedule"}));
}

}  // namespace
}  // namespace hzp::plan
