// The expected error of a prediction: throughput errors of the checked runs,
// the nearest group found and widened where it is too small, a stale table
// noticed, the compiled-in table read.
#include "validation/expected_error.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

Scored scored(const std::string& name, Quantity q, double measured, double predicted, int gpus) {
  Scored s{name, "g", q, measured, predicted, 0.05, true};
  s.family = "Hopper";
  s.stack = "a";
  s.gpus = gpus;
  return s;
}

TEST(ExpectedError, EverySpeedCaseAsAThroughputError) {
  EXPECT_EQ(device_family(9.0), "Hopper");
  EXPECT_EQ(device_family(8.6), "Ampere");
  EXPECT_EQ(device_family(10.0), "Blackwell");
  EXPECT_EQ(device_family(7.0), "Volta");
  // A step predicted at 0.8 s that took 1.0 s: throughput 1.25x (+25 %);
  // tokens/s predicted 900 of 1,000: -10 %; TFLOP/s 105 of 100: +5 %;
  // memory is not a speed; a case marked inconsistent is left out.
  Scored odd = scored("e", Quantity::TokensPerGpu, 1, 2, 8);
  odd.consistent = false;
  const auto runs = checked_runs(
      {scored("c", Quantity::TokensPerGpu, 1000, 900, 8), scored("b", Quantity::IterationTime, 1.0, 0.8, 16),
       scored("d", Quantity::ReservedGiB, 50, 80, 8), scored("a", Quantity::TflopsPerGpu, 100, 105, 64), odd});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].name, "a");  // by name
  EXPECT_NEAR(runs[0].error, 0.05, 1e-12);
  EXPECT_NEAR(runs[1].error, 0.25, 1e-12);
  EXPECT_EQ(runs[1].gpus, 16);
  EXPECT_NEAR(runs[2].error, -0.10, 1e-12);
}

TEST(ExpectedError, TheNearestGroupOfAtLeastThreeRuns) {
  const std::vector<CheckedRun> runs{
      {"h1", "Hopper", "fsdp", 8, 0.30},    {"h2", "Hopper", "fsdp", 16, 0.10},  {"h3", "Hopper", "fsdp", 32, -0.20},
      {"h4", "Hopper", "fsdp", 1024, 0.50}, {"h5", "Hopper", "mcore", 64, 0.02}, {"a1", "Ampere", "mcore", 64, 0.0},
  };
  // 8 GPUs: the fsdp runs at 2-32 GPUs (8x4): h1, h2, h3.
  ExpectedError e = expected_error(runs, "Hopper", "fsdp", 8);
  EXPECT_TRUE(e.same_family && e.same_stack);
  EXPECT_EQ(e.runs, 3);
  EXPECT_NEAR(e.mean_abs, 0.60 / 3, 1e-12);
  EXPECT_NEAR(e.bias, 0.20 / 3, 1e-12);
  EXPECT_NEAR(e.max_abs, 0.30, 1e-12);
  EXPECT_EQ(e.group(), "3 public Hopper runs under fsdp at 8-32 GPUs");
  EXPECT_EQ(e.warning(), "");
  EXPECT_EQ(e.text(),
            "expected error of step time, tokens/s and cost: +-20.0 % (bias +6.7 %: hzp faster than the runs; worst "
            "30.0 %), from 3 public Hopper runs under fsdp at 8-32 GPUs\n");
  // 1,024 GPUs: one fsdp run within 256-4,096; every fsdp run at any scale.
  e = expected_error(runs, "Hopper", "fsdp", 1024);
  EXPECT_EQ(e.runs, 4);
  EXPECT_EQ(e.max_gpus, 1024);
  EXPECT_NEAR(e.bias, 0.70 / 4, 1e-12);
  // A stack with no Hopper run: the family under every stack, and a warning.
  e = expected_error(runs, "Hopper", "hzp-async", 64);
  EXPECT_TRUE(e.same_family);
  EXPECT_FALSE(e.same_stack);
  EXPECT_EQ(e.runs, 5);
  EXPECT_EQ(e.group(), "5 public Hopper runs under every stack at 8-1024 GPUs");
  EXPECT_EQ(e.warning(), "no public run of hzp-async on Hopper devices was checked");
  EXPECT_NE(e.text().find("\nwarning: no public run of hzp-async on Hopper devices was checked; the figure above is "
                          "the nearest group's\n"),
            std::string::npos);
  // A stack with too few runs of its own: said so.
  e = expected_error(runs, "Ampere", "mcore", 64);
  EXPECT_EQ(e.own_runs, 1);
  EXPECT_EQ(e.warning(), "only 1 public run of mcore on Ampere devices was checked, too few for a group of their own");
  // A family with no run: every run.
  e = expected_error(runs, "Blackwell", "mcore", 64);
  EXPECT_FALSE(e.same_family);
  EXPECT_EQ(e.runs, 6);
  EXPECT_EQ(e.group(), "6 public runs at 8-1024 GPUs");
  EXPECT_EQ(expected_error({}, "Hopper", "fsdp", 8).group(), "no public run was checked");
}

TEST(ExpectedError, RoundTripsAndNoticesAStaleTable) {
  const std::vector<CheckedRun> runs{{"a", "Hopper", "s", 8, 0.1}, {"b", "Ampere", "s", 64, -0.05}};
  const auto back = checked_runs_from_json(checked_runs_json(runs, "test"), "e.json");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].gpus, 64);
  EXPECT_TRUE(stale_checked_runs(back, runs).empty());
  std::vector<CheckedRun> moved = runs;
  moved[0].error = 0.102;  // more than 0.1 point
  ASSERT_EQ(stale_checked_runs(back, moved).size(), 1u);
  EXPECT_EQ(stale_checked_runs(back, moved)[0],
            "a: recorded Hopper / s / 8 GPUs +10.0 %, now Hopper / s / 8 GPUs +10.2 %");
  moved.pop_back();
  moved.push_back({"c", "Ampere", "s", 64, 0});
  EXPECT_EQ(stale_checked_runs(back, moved).size(), 3u);  // a moved, c new, b gone
  EXPECT_THROW((void)checked_runs_from_json(R"({"schema_version": 1})", "e.json"), core::InputError);
  EXPECT_THROW((void)checked_runs_from_json(
                   R"({"schema_version": 1, "note": "", "source": "", "runs": [{"name": "a", "family": "Hopper",
                       "stack": "s", "gpus": 0, "error": 0}]})",
                   "e.json"),
               core::InputError);
}

TEST(ExpectedError, TheCompiledInTableIsTheRepositorysAndCoversHopper) {
  const auto& runs = recorded_checked_runs();
  ASSERT_GE(runs.size(), 100u);
  // The Hopper torch-fsdp2-compile runs at 8-128 GPUs are a group of their own.
  const ExpectedError e = expected_error(9.0, "torch-fsdp2-compile", 8);
  EXPECT_TRUE(e.same_family && e.same_stack);
  EXPECT_GE(e.runs, kMinExpectedRuns);
}

}  // namespace
}  // namespace hzp::validation
