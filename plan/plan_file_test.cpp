// Plan files: round trip, strict keys, the one-line errors.
#include "plan/plan_file.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace hzp::plan {
namespace {

std::string error_of(const std::string& text) {
  try {
    (void)plan_from_json(text, "p.json");
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

PlanOptions sample() {
  PlanOptions o;
  o.strategy = Strategy::Hzp;
  o.param_shard = 8;
  o.grad_shard = 16;
  o.optim_shard = 256;
  o.async = true;
  o.tp = 2;
  o.global_batch_tokens = 16 << 20;
  o.recompute = models::Recompute::Full;
  return o;
}

TEST(PlanFile, RoundTrips) {
  std::string text = plan_to_json(sample());
  EXPECT_EQ(plan_to_json(plan_from_json(text, "p.json")), text);
}

// overlap_grad_reduce came after the first plan files: absent means true.
TEST(PlanFile, OverlapGradReduceIsOptional) {
  PlanOptions o = sample();
  o.overlap_grad_reduce = false;
  const std::string text = plan_to_json(o);
  EXPECT_FALSE(plan_from_json(text, "p.json").overlap_grad_reduce);
  std::string older = text;
  older.erase(older.find("  \"overlap_grad_reduce\": false,\n"), 32);
  EXPECT_EQ(older.find("overlap_grad_reduce"), std::string::npos);
  EXPECT_TRUE(plan_from_json(older, "p.json").overlap_grad_reduce);
  std::string bad = text;
  bad.replace(bad.find("\"overlap_grad_reduce\": false"), 28, "\"overlap_grad_reduce\": 0");
  EXPECT_EQ(error_of(bad), "p.json: overlap_grad_reduce: expected true or false, got 0");
}

TEST(PlanFile, StrictKeysAndValues) {
  std::string text = plan_to_json(sample());
  std::string typo = text;
  typo.replace(typo.find("\"grad_shard\""), 12, "\"grad_shards\"");
  // Every problem at once, an unknown key with the likely one it misspells.
  EXPECT_EQ(error_of(typo),
            "p.json: grad_shards: unknown key (did you mean \"grad_shard\"?); grad_shard: missing required key");
  std::string bad = text;
  bad.replace(bad.find("\"full\""), 6, "\"most\"");
  EXPECT_EQ(error_of(bad), "p.json: recompute: expected none|selective|full, got \"most\"");
  std::string both = text;
  both.replace(both.find("\"global_batch_sequences\": null"), 30, "\"global_batch_sequences\": 4");
  EXPECT_EQ(error_of(both).rfind("p.json: global_batch_tokens: expected at most one", 0), 0u);
  std::string neither = text;  // neither: the default 16M tokens
  neither.replace(neither.find("\"global_batch_tokens\": 16777216"), 31, "\"global_batch_tokens\": null");
  EXPECT_FALSE(plan_from_json(neither, "p.json").global_batch_tokens.has_value());
  std::string range = text;
  range.replace(range.find("\"tp\": 2"), 7, "\"tp\": -2");
  EXPECT_EQ(error_of(range), "p.json: tp: expected an integer in [1, 4096], got -2");
  EXPECT_EQ(error_of("[1]"), "p.json: (top level): expected a JSON object");
}

}  // namespace
}  // namespace hzp::plan
