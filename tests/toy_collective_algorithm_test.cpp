// A collective algorithm added in this one file (issue 40, item 3): "oneshot",
// an all-gather inside one scale-up domain in a single step at the raw link
// rate. Registered, it is costed beside NCCL's algorithms, chosen where it is
// cheapest, and so seen by `hzp collectives`, by both engines and by plan
// search; unregistered, nothing of it is left.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cost/collective_algorithm.hpp"
#include "cost/perf_model.hpp"
#include "explore/scenario.hpp"
#include "explore/search.hpp"

namespace hzp {
namespace {

class OneShot final : public cost::CollectiveAlgorithm {
 public:
  [[nodiscard]] std::string_view name() const override { return "oneshot"; }
  [[nodiscard]] cost::FlowShape shape() const override { return cost::FlowShape::Switch; }
  [[nodiscard]] bool considered(core::CollectiveKind kind, const cost::GroupSpan& g,
                                const cost::NcclModel&) const override {
    return kind == core::CollectiveKind::AllGather && g.domains == 1;
  }
  [[nodiscard]] bool runs(cost::NcclProtocol p) const override { return p == cost::NcclProtocol::Simple; }
  [[nodiscard]] std::pair<double, double> step_us(const cost::CollectiveCall& c) const override {
    const double step = c.model.intra_step_us(cost::NcclAlgorithm::Ring, cost::NcclProtocol::Simple);
    return {step, step};
  }
  // One step; each rank receives every other rank's shard.
  [[nodiscard]] cost::AlgorithmSteps steps(const cost::CollectiveCall& c, double intra, double) const override {
    return {intra, (c.shape.ranks - 1) / c.shape.ranks * c.bytes};
  }
  [[nodiscard]] cost::AlgorithmBandwidth bandwidth(const cost::CollectiveCall& c) const override {
    return {c.model.up_GBps(), c.model.up_GBps()};
  }
};

std::unique_ptr<cost::CollectiveAlgorithmRegistration> register_oneshot() {
  return std::make_unique<cost::CollectiveAlgorithmRegistration>(std::make_unique<OneShot>());
}

explore::Scenario one_node(const std::string& engine) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-h100";
  sc.gpus = 8;
  sc.strategies = {plan::Strategy::Fsdp};
  sc.plan.seq_len = 4096;
  sc.plan.global_batch_sequences = 8;
  sc.engine = engine;
  return sc;
}

double step_s(const explore::Scenario& sc) { return explore::run_scenario(sc).runs.at(0).metrics.step_time.to_seconds(); }

// Its cost by hand: one NVLink step plus 7/8 of the bytes at the raw 450 GB/s.
TEST(ToyCollectiveAlgorithm, CostedAndChosenWhereItIsCheapest) {
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  const cost::GroupSpan node = pm.span({0, 1, 2, 3, 4, 5, 6, 7});
  const double N = 1 << 24;
  EXPECT_EQ(pm.nccl().choose(core::CollectiveKind::AllGather, N, node).algorithm->name(), "ring");
  {
    const auto toy = register_oneshot();
    EXPECT_NE(cost::find_collective_algorithm("oneshot"), nullptr);
    const cost::CollectiveChoice c = pm.nccl().choose(core::CollectiveKind::AllGather, N, node);
    ASSERT_EQ(c.algorithm->name(), "oneshot");
    const double step_us = pm.nccl().intra_step_us(cost::NcclAlgorithm::Ring, cost::NcclProtocol::Simple);
    EXPECT_NEAR(c.seconds(), step_us * 1e-6 + 7.0 / 8 * N / 450e9, 1e-12);
    // Across nodes it is not considered; other collectives keep NCCL's.
    EXPECT_NE(pm.nccl().choose(core::CollectiveKind::AllGather, N, pm.span({0, 8})).algorithm->name(), "oneshot");
    EXPECT_NE(pm.nccl().choose(core::CollectiveKind::AllReduce, N, node).algorithm->name(), "oneshot");
    const cost::CollectiveCost cc = pm.collective_cost(core::CollectiveKind::AllGather, core::Bytes(1 << 24), node);
    EXPECT_EQ(cc.algorithm, "oneshot");
    EXPECT_EQ(cc.shape, cost::FlowShape::Switch);
    EXPECT_DOUBLE_EQ(cc.moved_bytes, 7.0 / 8 * N);
  }
  EXPECT_EQ(cost::find_collective_algorithm("oneshot"), nullptr);
}

// `hzp collectives` prints the choice per size.
TEST(ToyCollectiveAlgorithm, TheCliPrintsIt) {
  const auto toy = register_oneshot();
  CLI::App app;
  cli::Commands commands;
  cli::add_collectives_command(app, commands);
  std::vector<const char*> argv{"hzp",        "collectives", "--cluster", "dgx-h100",    "--gpus", "8",       "--op",
                                "all_gather", "--min-bytes", "16M",       "--max-bytes", "16M",    "--group", "node"};
  app.parse(static_cast<int>(argv.size()), argv.data());
  testing::internal::CaptureStdout();
  int rc = -1;
  for (auto& c : commands) {
    if (c->parsed()) rc = c->run();
  }
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("oneshot/Simple"), std::string::npos) << out;
}

// Both engines cost FSDP's all-gathers inside the node with it: the step is shorter.
TEST(ToyCollectiveAlgorithm, BothEnginesRunIt) {
  for (const std::string engine : {"analytic", "simgrid"}) {
    const double before = step_s(one_node(engine));
    double with = 0;
    {
      const auto toy = register_oneshot();
      with = step_s(one_node(engine));
    }
    EXPECT_LT(with, before) << engine;
    EXPECT_DOUBLE_EQ(step_s(one_node(engine)), before) << engine;
  }
}

// Plan search evaluates its candidates with it.
TEST(ToyCollectiveAlgorithm, PlanSearchSeesIt) {
  explore::PlanQuery q;
  q.model = "llama3-8b";
  q.gpus = {8};
  q.base.seq_len = 4096;
  q.base.global_batch_sequences = 8;
  q.strategies = {plan::Strategy::Fsdp};
  q.top = 1;
  const explore::PlanSearch before = explore::search_plans(q);
  ASSERT_FALSE(before.best.empty());
  const auto toy = register_oneshot();
  const explore::PlanSearch with = explore::search_plans(q);
  ASSERT_FALSE(with.best.empty());
  EXPECT_LT(with.best.front().step_s, before.best.front().step_s);
}

}  // namespace
}  // namespace hzp
