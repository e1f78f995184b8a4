// Collective cases and nccl-tests logs: parsing, derived columns and scoring
// with values worked out by hand.
#include "validation/collective_cases.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <algorithm>

#include "core/error.hpp"
#include "cost/perf_model.hpp"
#include "validation/nccl_tests_log.hpp"

namespace hzp::validation {
namespace {

std::string case_text(const std::string& rows, const std::string& model_extra = "") {
  return R"({"schema_version": 1, "id": "t", "source": {"title": "T", "url": "https://x", "where": "table 1"},
  "hardware": "1 x 8 H100", "fabric": "nvlink", "nccl_version": null, "measured_algorithm": "default",
  "use": "score", "reason": "", "notes": "",
  "model": {"cluster": "dgx-h100", "nic_gbps": null, "gpus": 8, "ranks_per_node": 8, "gpus_per_process": 1,
            "algorithms": )" +
         (model_extra.empty() ? std::string("null") : model_extra) + R"(, "protocol": null},
  "op": "all_reduce", "placement": "out-of-place", "rows": )" +
         rows + "}";
}

TEST(CollectiveCases, DerivesTheMissingColumn) {
  // all_reduce over 8 ranks: busbw = algbw · 2 · 7/8 = 1.75 algbw.
  // 1e9 bytes at 175 GB/s bus: algbw 100 GB/s, 10,000 us; 1e6 bytes in 20 us: 87.5 GB/s bus.
  const CollectiveCase c =
      collective_case_from_json(case_text("[[1000000, 20, 0], [1000000000, null, 175]]"), "t.json");
  ASSERT_EQ(c.rows.size(), 2U);
  EXPECT_NEAR(c.rows[0].busbw_GBps, 87.5, 1e-9);
  EXPECT_NEAR(c.rows[1].time_us, 10000, 1e-6);
  EXPECT_DOUBLE_EQ(busbw_factor(core::CollectiveKind::AllGather, 8), 7.0 / 8);
}

TEST(CollectiveCases, AllToAllIsScoredAsPairwiseSends) {
  // 8 ranks in one node, 8 MiB each: busbw = size · 7/8 / time, and hzp's
  // time is the pairwise model's (PerfModel::collective_cost), no NCCL choice.
  std::string text = case_text("[[8388608, 100, 0]]");
  const std::string op = "\"op\": \"all_reduce\"";
  text.replace(text.find(op), op.size(), "\"op\": \"all_to_all\"");
  const CollectiveCase c = collective_case_from_json(text, "t.json");
  EXPECT_EQ(c.op, core::CollectiveKind::AllToAll);
  EXPECT_NEAR(c.rows[0].busbw_GBps, 8388608.0 * 7 / 8 / 100 / 1e3, 1e-9);
  const ScoredCollective s = score_collective_case(c);
  ASSERT_EQ(s.rows.size(), 1U);
  EXPECT_EQ(s.rows[0].choice, "pairwise");
  const topologies::ClusterSpec spec = topologies::load_cluster("dgx-h100");
  const cost::PerfModel pm(topologies::Topology(spec, 8));
  const auto cost =
      pm.collective_cost(core::CollectiveKind::AllToAll, core::Bytes(8388608), pm.span({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_NEAR(s.rows[0].predicted_us, std::max(cost.seconds() * 1e6, spec.device.collective_launch_latency_us), 1e-9);
}

TEST(CollectiveCases, RefusesWhatItCannotScore) {
  EXPECT_THROW((void)collective_case_from_json(case_text("[[1000, 0, 0]]"), "t.json"), core::InputError);
  EXPECT_THROW((void)collective_case_from_json(case_text("[[2000, 5, 1], [1000, 5, 1]]"), "t.json"), core::InputError);
  EXPECT_THROW((void)collective_case_from_json(case_text("[[1000, 5, 1]]", R"(["butterfly"])"), "t.json"),
               core::InputError);
  std::string unscored = case_text("[[1000, 5, 1]]");
  unscored.replace(unscored.find("\"use\": \"score\""), 14, "\"use\": \"context\"");
  EXPECT_THROW((void)collective_case_from_json(unscored, "t.json"), core::InputError);  // context without a reason
}

TEST(CollectiveCases, ErrorsAreBusBandwidthFromOneMebibyteAndTimeBelow) {
  // Measured twice as fast as predicted at 1 GiB: busbw error -50 %; measured
  // half as fast at 4 KiB: time error -50 %. Forced to NVLS, the prediction
  // is NCCL's NVLS all-reduce on dgx-h100.
  const CollectiveCase probe =
      collective_case_from_json(case_text("[[4096, 1000, 0], [1073741824, 1000, 0]]", R"(["nvls"])"), "t.json");
  const ScoredCollective p = score_collective_case(probe);
  ASSERT_EQ(p.rows.size(), 2U);
  EXPECT_EQ(p.rows[1].choice.substr(0, 11), "nvls/Simple");
  const double t_small = p.rows[0].predicted_us, t_large = p.rows[1].predicted_us;
  const CollectiveCase c = collective_case_from_json(
      case_text(fmt::format("[[4096, {}, 0], [1073741824, {}, 0]]", 2 * t_small, t_large / 2), R"(["nvls"])"),
      "t.json");
  const ScoredCollective s = score_collective_case(c);
  EXPECT_NEAR(s.rows[0].error(), -0.5, 1e-9);
  EXPECT_NEAR(s.rows[1].error(), -0.5, 1e-9);
  EXPECT_NEAR(*s.small_error(), 0.5, 1e-9);
  const auto sum = summarize_collectives({s});
  ASSERT_EQ(sum.size(), 1U);
  EXPECT_EQ(sum[0].fabric, "nvlink");
  EXPECT_FALSE(sum[0].within());
}

TEST(NcclTestsLog, ReadsRanksHostsAndOutOfPlaceTimes) {
  const std::string log = R"(# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid   1 on     hostA device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   2 on     hostA device  1 [0x2b] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   3 on     hostB device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   4 on     hostB device  1 [0x2b] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576         65536     float    none      -1    100.0   10.49    7.86      0    99.0   10.59    7.94      0
     2097152        131072     float    none      -1    150.0   13.98   10.49      0   149.0   14.07   10.56      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 9.2
)";
  const traces::BenchResults r = bench_results_from_nccl_tests(log, "x.log", "H100 SXM 80GB");
  ASSERT_EQ(r.collectives.size(), 2U);
  EXPECT_EQ(r.collectives[0].collective, core::CollectiveKind::AllGather);
  EXPECT_EQ(r.collectives[0].ranks, 4);
  EXPECT_EQ(r.collectives[0].ranks_per_node, 2);
  EXPECT_EQ(r.collectives[1].bytes, 2097152);
  EXPECT_NEAR(r.collectives[1].seconds, 150e-6, 1e-15);
  // Without the starting line, the file name names the collective; without either, refused.
  const std::string bare = log.substr(log.find('\n') + 1);
  EXPECT_EQ(bench_results_from_nccl_tests(bare, "run_reduce_scatter.log", "d").collectives[0].collective,
            core::CollectiveKind::ReduceScatter);
  EXPECT_THROW((void)bench_results_from_nccl_tests(bare, "run.log", "d"), core::InputError);
  EXPECT_THROW((void)bench_results_from_nccl_tests("# nothing\n", "all_gather.log", "d"), core::InputError);
}

}  // namespace
}  // namespace hzp::validation
