// Calibration fitting on synthetic measurements made from known parameters:
// the fit must give those parameters back.
#include "validation/calibrate.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "cost/nccl.hpp"
#include "cost/perf_model.hpp"

namespace hzp::validation {
namespace {

const topologies::ClusterSpec& h100() {
  static const topologies::ClusterSpec c = topologies::load_cluster("dgx-h100");
  return c;
}

traces::GemmResult gemm(std::int64_t m, std::int64_t n, std::int64_t k, double eff) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return traces::GemmResult{m, n, k, 1, core::Dtype::Bf16, flops / (eff * 989e12)};
}

TEST(Calibrate, GemmEfficiencyIsTheMedianAtEachSize) {
  traces::BenchResults r;
  r.kind = "gemm";
  r.device = h100().device.name;
  // cbrt(2048·8192·4096) = 4096: three shapes at size 4096 (0.7, 0.6, 0.8), one at 8192.
  r.gemm = {gemm(4096, 4096, 4096, 0.7), gemm(2048, 8192, 4096, 0.6), gemm(8192, 2048, 4096, 0.8),
            gemm(8192, 8192, 8192, 0.8)};
  const CalibrationFit f = fit_calibration(h100(), {{"g.json", r}});
  ASSERT_TRUE(f.gemm_efficiency);
  ASSERT_EQ(f.gemm_efficiency->size(), 2U);
  EXPECT_DOUBLE_EQ((*f.gemm_efficiency)[0].first, 4096);
  EXPECT_NEAR((*f.gemm_efficiency)[0].second, 0.7, 1e-12);
  EXPECT_NEAR((*f.gemm_efficiency)[1].second, 0.8, 1e-12);
  EXPECT_FALSE(f.scale_up_step_latency_us);
  const auto j = nlohmann::json::parse(calibration_json(f, "test"));
  EXPECT_EQ(j["device_profile"]["gemm_efficiency"][1][1], 0.8);
  EXPECT_FALSE(j.contains("scale_up"));
}

// A measured shape that fills the device less than the square of its size
// is brought to that square (the curve holds squares; the cost model applies
// the shape's fill again): 1024 x 1024 x 4096 at 0.227 of peak fills 0.2909
// of an H100 where the square of its size (1625.5) fills 0.6109, so the
// curve's point at 1625 is 0.227 x 0.6109 / 0.2909 = 0.4767.
TEST(Calibrate, GemmShapesAreBroughtToTheSquareOfTheirSize) {
  traces::BenchResults r;
  r.kind = "gemm";
  r.device = h100().device.name;
  r.gemm = {gemm(1024, 1024, 4096, 0.227)};
  const CalibrationFit f = fit_calibration(h100(), {{"g.json", r}});
  ASSERT_TRUE(f.gemm_efficiency);
  ASSERT_EQ(f.gemm_efficiency->size(), 1U);
  EXPECT_DOUBLE_EQ((*f.gemm_efficiency)[0].first, 1625);
  EXPECT_NEAR((*f.gemm_efficiency)[0].second, 0.227 * 0.6109 / (0.6 * 64 / 132), 1e-3);
}

TEST(Calibrate, LinkStepLatencyAndRingEfficiencyFromRingCollectives) {
  // Measurements made by NCCL's own model with known link figures: NVLink
  // Simple ring step 2.0 us at a ring efficiency of 0.7; NET step 20 us at
  // 0.85. The fit must give them back (its grid has 120 points a decade:
  // within 1 %).
  topologies::ClusterSpec truth = h100();
  truth.scale_up.step_latency_us = 2.0;
  truth.scale_up.ring_efficiency = 0.7;
  truth.scale_out.step_latency_us = 20.0;
  truth.scale_out.ring_efficiency = 0.85;
  const cost::NcclModel model(truth);
  traces::BenchResults r;
  r.kind = "collectives";
  r.device = h100().device.name;
  auto measure = [&](core::CollectiveKind kind, double bytes, int ranks, int per_node) {
    const int nodes = ranks / per_node;
    const cost::GroupSpan g{ranks, nodes, per_node, per_node, nodes > 1 ? 0 : -1};
    r.collectives.push_back(
        {kind, static_cast<std::int64_t>(bytes), ranks, per_node, model.choose(kind, bytes, g).seconds()});
  };
  for (double bytes : {1024.0, 65536.0, 1048576.0, 16777216.0, 1073741824.0}) {
    measure(core::CollectiveKind::AllGather, bytes, 8, 8);
    measure(core::CollectiveKind::AllReduce, bytes, 8, 8);
    measure(core::CollectiveKind::ReduceScatter, bytes, 4, 1);  // rails: 4 nodes, one rank each
  }
  r.collectives.push_back({core::CollectiveKind::AllToAll, 1 << 20, 8, 8, 1e-3});  // not a ring: skipped
  const CalibrationFit f = fit_calibration(h100(), {{"c.json", r}});
  ASSERT_TRUE(f.scale_up_step_latency_us);
  EXPECT_NEAR(*f.scale_up_step_latency_us, 2.0, 0.02);
  EXPECT_NEAR(*f.scale_up_ring_efficiency, 0.7, 0.005);
  ASSERT_TRUE(f.net_step_latency_us);
  EXPECT_NEAR(*f.net_step_latency_us, 20.0, 0.2);
  EXPECT_NEAR(*f.scale_out_ring_efficiency, 0.85, 0.005);
  EXPECT_NE(f.notes.back().find("1 collectives not fitted"), std::string::npos) << f.notes.back();
  // The overlay names the cluster file's keys.
  const auto j = nlohmann::json::parse(calibration_json(f, "test"));
  EXPECT_NEAR(j["scale_up"]["step_latency_us"].get<double>(), 2.0, 0.02);
  EXPECT_NEAR(j["scale_out"]["ring_efficiency"].get<double>(), 0.85, 0.005);
}

TEST(Calibrate, SlowdownAndRefusals) {
  traces::BenchResults r;
  r.kind = "overlap";
  r.device = h100().device.name;
  for (double s : {1.1, 1.3, 1.2})
    r.overlap.push_back({8192, 8192, 8192, core::CollectiveKind::AllGather, 1 << 28, 16, 1.0, s});
  EXPECT_NEAR(*fit_calibration(h100(), {{"o.json", r}}).comm_compute_slowdown, 1.2, 1e-12);
  r.device = "A100 SXM 80GB";
  try {
    (void)fit_calibration(h100(), {{"o.json", r}});
    FAIL() << "accepted another device's results";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("o.json"), std::string::npos) << e.what();
  }
}

TEST(BenchResults, RoundTripsAndNamesBadKeys) {
  traces::BenchResults r;
  r.kind = "collectives";
  r.device = "H100 SXM 80GB";
  r.provenance = {{"gpu", "H100"}, {"nccl", "2.28"}};
  r.collectives = {{core::CollectiveKind::ReduceScatter, 4096, 16, 8, 1.5e-5}};
  const traces::BenchResults back = traces::bench_results_from_json(traces::to_json(r), "b.json");
  ASSERT_EQ(back.collectives.size(), 1U);
  EXPECT_EQ(back.collectives[0].collective, core::CollectiveKind::ReduceScatter);
  EXPECT_EQ(back.collectives[0].ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(back.collectives[0].seconds, 1.5e-5);
  EXPECT_EQ(back.provenance.at("nccl"), "2.28");
  auto j = nlohmann::json::parse(traces::to_json(r));
  j["results"][0]["ranks_per_node"] = 3;
  try {
    (void)traces::bench_results_from_json(j.dump(), "b.json");
    FAIL() << "accepted ranks_per_node that does not divide ranks";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("results[0].ranks_per_node"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hzp::validation
