// Calibration fitting on synthetic measurements made from known parameters:
// the fit must give those parameters back.
#include "validation/calibrate.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

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
  EXPECT_FALSE(f.scale_up_latency_us);
  const auto j = nlohmann::json::parse(calibration_json(f, "test"));
  EXPECT_EQ(j["device_profile"]["gemm_efficiency"][1][1], 0.8);
  EXPECT_FALSE(j.contains("scale_up"));
}

TEST(Calibrate, LinkLatencyAndEfficiencyFromRingCollectives) {
  // All-gathers over one node of 8: 2 us per ring step, efficiency 0.05 at
  // 1 KiB, 0.3 at 1 MiB, 0.8 at 1 GiB of 450 GB/s; all-reduces on the same
  // curve (2 passes). t = steps·ℓ + factor·N / (bw·eff).
  traces::BenchResults r;
  r.kind = "collectives";
  r.device = h100().device.name;
  for (auto [bytes, eff] : {std::pair{1024.0, 0.05}, {1048576.0, 0.3}, {1073741824.0, 0.8}}) {
    r.collectives.push_back({core::CollectiveKind::AllGather, static_cast<std::int64_t>(bytes), 8, 8,
                             7 * 2e-6 + 7.0 / 8 * bytes / (450e9 * eff)});
    r.collectives.push_back({core::CollectiveKind::AllReduce, static_cast<std::int64_t>(bytes), 8, 8,
                             14 * 2e-6 + 14.0 / 8 * bytes / (450e9 * eff)});
  }
  // Rails: 4 nodes, one rank each, 50 GB/s NIC per device: 5 us per step (NIC 4.7 + leaf hop 0.3), 0.9 at 1 GiB.
  for (auto [bytes, eff] : {std::pair{8.0, 0.01}, {4096.0, 0.1}, {1073741824.0, 0.9}}) {
    r.collectives.push_back({core::CollectiveKind::ReduceScatter, static_cast<std::int64_t>(bytes), 4, 1,
                             3 * 5e-6 + 3.0 / 4 * bytes / (50e9 * eff)});
  }
  r.collectives.push_back({core::CollectiveKind::AllToAll, 1 << 20, 8, 8, 1e-3});  // not a ring: skipped
  const CalibrationFit f = fit_calibration(h100(), {{"c.json", r}});
  ASSERT_TRUE(f.scale_up_latency_us);
  EXPECT_NEAR(*f.scale_up_latency_us, 2.0, 0.01);  // the 1 KiB transfer adds ~6 ns per step
  // The smallest messages set the latency: they say nothing about bandwidth.
  ASSERT_EQ(f.scale_up_efficiency->size(), 2U);
  EXPECT_NEAR((*f.scale_up_efficiency)[0].second, 0.3, 2e-3);
  EXPECT_NEAR((*f.scale_up_efficiency)[1].second, 0.8, 1e-4);
  ASSERT_TRUE(f.nic_latency_us);
  EXPECT_NEAR(*f.nic_latency_us, 4.7, 0.01);
  ASSERT_EQ(f.scale_out_efficiency->size(), 2U);
  EXPECT_NEAR(f.scale_out_efficiency->front().second, 0.1, 3e-3);
  EXPECT_NEAR(f.scale_out_efficiency->back().second, 0.9, 1e-4);
  EXPECT_NE(f.notes.back().find("1 collectives not fitted"), std::string::npos) << f.notes.back();
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
