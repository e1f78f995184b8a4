// Validation cases: the case file's strict reading, Megatron's FLOP count and
// the error statistics, each against values worked out by hand.
#include "validation/cases.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

nlohmann::json good_case() {
  return {{"schema_version", 1},
          {"name", "c"},
          {"group", "g"},
          {"source", "a paper, table 1"},
          {"notes", ""},
          {"model", {{"layers", 2}}},
          {"cluster", "dgx-a100"},
          {"stack", "megatron-deepspeed"},
          {"gpus", 8},
          {"plan", {{"tp", 8}}},
          {"measured", {{"quantity", "tflops_per_gpu"}, {"value", 140.0}, {"flops_convention", "megatron-2021: ..."}}},
          {"tolerance", 0.1}};
}

void expect_error(const nlohmann::json& j, const std::string& needle) {
  try {
    (void)case_from_json(j.dump(), "case.json");
    FAIL() << "accepted a bad case (" << needle << ")";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("case.json"), std::string::npos) << e.what();
  }
}

TEST(Cases, ReadsAFullCase) {
  const Case c = case_from_json(good_case().dump(), "case.json");
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.quantity, Quantity::TflopsPerGpu);
  EXPECT_DOUBLE_EQ(c.measured, 140.0);
  EXPECT_EQ(c.gpus, 8);
  EXPECT_FALSE(c.nic_gbps);
  EXPECT_FALSE(c.power_limit);
  EXPECT_EQ(nlohmann::json::parse(c.plan_json)["tp"], 8);

  nlohmann::json memory = good_case();
  memory["measured"] = {{"quantity", "reserved_GiB"}, {"value", 82.4}, {"flops_convention", nullptr}};
  const Case m = case_from_json(memory.dump(), "case.json");
  EXPECT_EQ(m.quantity, Quantity::ReservedGiB);
  EXPECT_EQ(to_string(m.quantity), "reserved_GiB");
}

TEST(Cases, NamesTheKeyOfABadCase) {
  auto j = good_case();
  j["source"] = "";
  expect_error(j, "source");
  j = good_case();
  j["measured"]["quantity"] = "throughput";
  expect_error(j, "measured.quantity");
  j = good_case();
  j["measured"]["flops_convention"] = nullptr;
  expect_error(j, "measured.flops_convention");
  j = good_case();
  j["tolerance"] = 0;
  expect_error(j, "tolerance");
  j = good_case();
  j["surprise"] = 1;
  expect_error(j, "surprise");
  j = good_case();
  j["model"] = "gpt";
  expect_error(j, "model");
}

TEST(Cases, MegatronFlopsByHand) {
  // B = 512, s = 2048, l = 24, h = 2304, V = 51200 (GPT 1.7B of Narayanan et al. 2021):
  // 96·512·2048·24·2304² = 1.28247e16; × (1 + 2048/13824 + 51200/884736) = × 1.206066.
  const double base = 96.0 * 512 * 2048 * 24 * 2304.0 * 2304.0;
  const double f = megatron_2021_flops(512, 2048, 24, 2304, 51200);
  EXPECT_NEAR(f / base, 1.0 + 2048.0 / 13824 + 51200.0 / 884736, 1e-12);
  EXPECT_NEAR(base, 1.28247e16, 1e11);
  EXPECT_THROW((void)convention_flops("hfu", GptShape{1, 1, 1, 1, 1}, "x.json"), core::InputError);
}

TEST(Cases, SummaryStatistics) {
  // Errors +10 %, −20 %, +5 % in group a; one memory case at −2 %.
  std::vector<Scored> s = {{"a1", "a", Quantity::IterationTime, 1.0, 1.1, 0.15, true},
                           {"a2", "a", Quantity::IterationTime, 2.0, 1.6, 0.15, true},
                           {"a3", "a", Quantity::TflopsPerGpu, 100, 105, 0.15, true},
                           {"m1", "m", Quantity::StatesGiB, 50, 49, 0.05, true}};
  EXPECT_FALSE(s[1].within());
  // One sharded-data-parallel case at +30 %, marked inconsistent.
  s.push_back({"z1", "z-sharded", Quantity::TokensPerGpu, 100, 130, 0.5, true, "", "", false});
  const auto sum = summarize(s);
  ASSERT_EQ(sum.size(), 8U);  // a, m, z-sharded, megatron-era, sharded-dp, all, memory, all consistent
  EXPECT_EQ(sum[3].group, "megatron-era");
  EXPECT_EQ(sum[3].cases, 3);
  EXPECT_EQ(sum[4].group, "sharded-dp");
  EXPECT_NEAR(sum[4].mean_abs, 0.30, 1e-12);
  EXPECT_EQ(sum[5].group, "all");
  EXPECT_EQ(sum[5].cases, 4);
  EXPECT_NEAR(sum[5].mean_abs, (0.10 + 0.20 + 0.05 + 0.30) / 4, 1e-12);
  EXPECT_EQ(sum[7].group, "all consistent");
  EXPECT_EQ(sum[7].cases, 3);
  EXPECT_EQ(sum[0].group, "a");
  EXPECT_EQ(sum[0].cases, 3);
  EXPECT_EQ(sum[0].within, 2);
  EXPECT_NEAR(sum[0].mean_abs, (0.10 + 0.20 + 0.05) / 3, 1e-12);
  EXPECT_NEAR(sum[0].mean_signed, (0.10 - 0.20 + 0.05) / 3, 1e-12);
  EXPECT_NEAR(sum[0].max_abs, 0.20, 1e-12);
  EXPECT_EQ(sum[0].worst, "a2");
  EXPECT_EQ(sum[6].group, "memory");  // memory is summarised apart
  EXPECT_NEAR(sum[6].max_abs, 0.02, 1e-12);
}

}  // namespace
}  // namespace hzp::validation

namespace hzp::validation {
namespace {

TEST(Cases, PairsScoreTheSpeedupOfHierarchicalOverFull) {
  // Throughputs: 3,625 vs 2,271 tokens/s measured is a 1.596x speedup; a
  // prediction of 4,000 vs 2,000 says 2.0x: +25 %, same sign, outside 15 %.
  std::vector<Scored> s = {
      {"h", "g", Quantity::TokensPerGpu, 3625, 4000, 0.5, true, "p", "hierarchical"},
      {"f", "g", Quantity::TokensPerGpu, 2271, 2000, 0.5, true, "p", "full"},
      // Times divide the other way: 10 s full, 8 s hierarchical = 1.25x; predicted 9 / 10 = 0.9x: wrong sign.
      {"ht", "g", Quantity::IterationTime, 8, 10, 0.5, true, "q", "hierarchical"},
      {"ft", "g", Quantity::IterationTime, 10, 9, 0.5, true, "q", "full"},
      {"lone", "g", Quantity::TokensPerGpu, 1, 1, 0.5, true, "r", "full"},
  };
  const auto pairs = score_pairs(s);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_NEAR(pairs[0].measured, 3625.0 / 2271.0, 1e-12);
  EXPECT_NEAR(pairs[0].predicted, 2.0, 1e-12);
  EXPECT_TRUE(pairs[0].same_sign());
  EXPECT_FALSE(pairs[0].within());
  EXPECT_NEAR(pairs[1].measured, 1.25, 1e-12);
  EXPECT_NEAR(pairs[1].predicted, 0.9, 1e-12);
  EXPECT_FALSE(pairs[1].same_sign());
}

}  // namespace
}  // namespace hzp::validation

namespace hzp::validation {
namespace {

TEST(Cases, HopperGroupsAreSummarisedApart) {
  const std::vector<Scored> s = {{"h1", "hopper-x-sharded", Quantity::TokensPerGpu, 100, 120, 0.05, true},
                                 {"a1", "a", Quantity::IterationTime, 1.0, 1.1, 0.05, true}};
  const auto sum = summarize(s);
  // hopper-x-sharded, a, hopper (not sharded-dp), megatron-era, all, all consistent
  ASSERT_EQ(sum.size(), 6U);
  EXPECT_EQ(sum[2].group, "hopper");
  EXPECT_NEAR(sum[2].mean_abs, 0.20, 1e-12);
  EXPECT_EQ(sum[3].group, "megatron-era");
  EXPECT_EQ(sum[3].cases, 1);
}

TEST(Cases, RecordedMissesMayNotGrowAndNewOnesFail) {
  // Tolerance 5 %: "in" +3 % (within), "new" +8 % (a miss not recorded),
  // "same" -20.5 % recorded at -20 % (within the 1-point slack), "worse"
  // +31.5 % recorded at +30 % (1.5 points worse), "better" +10 % recorded at
  // +25 %, "fixed" +2 % recorded at +12 %, "gone" recorded but not scored.
  const std::vector<Scored> s = {{"in", "g", Quantity::IterationTime, 1.0, 1.03, 0.05, true},
                                 {"new", "g", Quantity::IterationTime, 1.0, 1.08, 0.05, true},
                                 {"same", "g", Quantity::IterationTime, 1.0, 0.795, 0.05, true},
                                 {"worse", "g", Quantity::IterationTime, 1.0, 1.315, 0.05, true},
                                 {"better", "g", Quantity::IterationTime, 1.0, 1.10, 0.05, true},
                                 {"fixed", "g", Quantity::IterationTime, 1.0, 1.02, 0.05, true}};
  const MissBaseline b{{{"same", -0.20}, {"worse", 0.30}, {"better", 0.25}, {"fixed", 0.12}, {"gone", 0.5}}};
  const BaselineCheck c = check_misses(s, b);
  ASSERT_EQ(c.failures.size(), 2U);
  EXPECT_NE(c.failures[0].find("new: +8.0% is outside its tolerance of 5%"), std::string::npos) << c.failures[0];
  EXPECT_NE(c.failures[1].find("worse: +31.5%, worse than the recorded miss of +30.0%"), std::string::npos)
      << c.failures[1];
  ASSERT_EQ(c.notes.size(), 2U);
  EXPECT_NE(c.notes[0].find("better: +10.0%, better than the recorded +25.0%"), std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[1].find("fixed: +2.0% is within its tolerance now"), std::string::npos) << c.notes[1];

  const MissBaseline written = misses_of(s);
  EXPECT_EQ(written.errors.size(), 4U);  // new, same, worse, better
  EXPECT_NEAR(written.errors.at("worse"), 0.315, 1e-12);
  EXPECT_TRUE(check_misses(s, written).failures.empty());
}

TEST(Cases, BaselineFileIsReadStrictly) {
  const std::string good = R"({"schema_version": 1, "note": "n", "hzp_version": "v", "git_revision": "r",
                               "misses": {"a": 0.25, "b": -0.1}})";
  const MissBaseline b = miss_baseline_from_json(good, "base.json");
  EXPECT_EQ(b.errors.size(), 2U);
  EXPECT_DOUBLE_EQ(b.errors.at("b"), -0.1);
  for (const auto& [bad, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"schema_version": 1, "note": "n", "hzp_version": "v", "git_revision": "r", "misses": {"a": "x"}})",
            "misses.a"},
           {R"({"schema_version": 1, "note": "n", "hzp_version": "v", "git_revision": "r", "misses": []})", "misses"},
           {R"({"schema_version": 1, "note": "n", "hzp_version": "v", "git_revision": "r", "misses": {},
                "extra": 1})",
            "extra"}}) {
    try {
      (void)miss_baseline_from_json(bad, "base.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("base.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hzp::validation
