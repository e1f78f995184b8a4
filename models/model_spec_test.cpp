// ModelSpec: published parameter counts, the model-FLOPs formula, strict parsing.
#include "models/model_spec.hpp"

#include <gtest/gtest.h>
#include <cctype>
#include <cmath>

#include "core/error.hpp"
#include "models/catalog_data.hpp"

namespace hzp::models {
namespace {

struct Published {
  const char* model;
  double total_b;      // billions, as published
  double total_digit;  // one unit of the published figure's last digit
  double active_b;     // 0: not an MoE
  double active_digit;
};

// Vendors round (Mixtral 46.7 / 12.9) or truncate (Qwen3-30B-A3B 3.35 -> "3.3",
// DeepSeek-V3 37.55 -> "37") to the digits they print, so the tolerance is
// 0.5 % or one unit of the last printed digit, whichever is larger.
double tolerance(double value, double digit) { return std::max(0.005 * value, digit); }

void PrintTo(const Published& p, std::ostream* os) { *os << p.model; }

class PublishedParams : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedParams, WithinTolerance) {
  const Published& p = GetParam();
  ParamCounts c = count_params(load_model(p.model));
  double total = static_cast<double>(c.total) / 1e9, active = static_cast<double>(c.active) / 1e9;
  EXPECT_NEAR(total, p.total_b, tolerance(p.total_b, p.total_digit)) << p.model;
  if (p.active_b > 0) {
    EXPECT_NEAR(active, p.active_b, tolerance(p.active_b, p.active_digit)) << p.model;
  } else {
    EXPECT_EQ(c.active, c.total) << p.model;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Catalog, PublishedParams,
    ::testing::Values(Published{"llama3-8b", 8.03, 0.01, 0, 0}, Published{"llama3-70b", 70.6, 0.1, 0, 0},
                      Published{"llama3.1-405b", 405.9, 0.1, 0, 0}, Published{"gpt3-175b", 175, 1, 0, 0},
                      Published{"mixtral-8x7b", 46.7, 0.1, 12.9, 0.1}, Published{"qwen3-30b-a3b", 30.5, 0.1, 3.3, 0.1},
                      Published{"qwen3-235b-a22b", 235, 1, 22, 1}, Published{"deepseek-v3", 671, 1, 37, 1}),
    [](const ::testing::TestParamInfo<Published>& param) {
      std::string name = param.param.model;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(ModelSpec, Llama8bExactCount) {
  // 32 · (4096·(32+16)·128 + 4096·4096 + 3·4096·14336 + 2·4096) + 2·128256·4096 + 4096
  EXPECT_EQ(count_params(load_model("llama3-8b")).total, 8030261248);
}

TEST(ModelFlops, Llama31_70bPerSequence) {
  // hardware.md: seq·(12·L·h²·(1 + G/H + s/h) + 18·L·F·h + 6·V·h) = 3.94e15 at s = 8192.
  ModelSpec m = load_model("llama3-70b");
  double f = model_flops_per_sequence(m, 8192).count();
  EXPECT_NEAR(f, 3.94e15, 0.01 * 3.94e15);
  const double L = 80, h = 8192, G = 8, H = 64, s = 8192, F = 28672, V = 128256;
  double formula = s * (12 * L * h * h * (1 + G / H + s / h) + 18 * L * F * h + 6 * V * h);
  EXPECT_NEAR(f, formula, 1e-9 * formula);
}

std::string error_of(const std::string& text) {
  try {
    (void)model_from_json(text, "my.json");
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ModelSpec, StrictKeys) {
  std::string good = std::string(model_catalog()[0].json);
  EXPECT_EQ(error_of(good), "(accepted)");
  std::string typo = good;
  typo.replace(typo.find("\"hidden\""), 8, "\"hiden\"");
  EXPECT_EQ(error_of(typo), "my.json: hidden: missing required key");
  std::string extra = good;
  extra.insert(extra.find('{') + 1, "\"colour\": 1,");
  EXPECT_EQ(error_of(extra), "my.json: colour: unknown key");
  std::string bad_moe = good;
  bad_moe.replace(bad_moe.find("\"moe\": {"), 8, "\"moe\": {\"wat\": 1, ");
  EXPECT_EQ(error_of(bad_moe).rfind("my.json: moe.", 0), 0u);
}

TEST(ModelSpec, UnknownCatalogName) {
  try {
    (void)load_model("llama9");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_EQ(e.key(), "--model");
    EXPECT_NE(std::string(e.what()).find("llama3-70b"), std::string::npos);
  }
}

}  // namespace
}  // namespace hzp::models
