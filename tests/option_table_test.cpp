// The option tables are the only mapping between an option and its names:
// every row, given a value other than its default, must reach the plan or
// scenario through the command line, a plan file, a sweep key, the sweep
// database's columns, the JSON Schema and the provenance of a lowered plan.
// A mapping written by hand again for some channel loses a new row there,
// and this test names it.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "cli/option_flags.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "explore/adaptive.hpp"
#include "explore/scenario.hpp"
#include "explore/search.hpp"
#include "explore/sweep.hpp"
#include "explore/sweep_db.hpp"
#include "plan/options.hpp"
#include "plan/plan_file.hpp"

namespace hzp {
namespace {

using nlohmann::json;

// Parses `args` as a `hzp simulate` command line would, into a Scenario.
explore::Scenario from_command_line(std::vector<std::string> args) {
  CLI::App app;
  cli::OptionFlags scenario_flags, plan_flags;
  scenario_flags.add(&app, cli::scenario_specs(true), cli::option_defaults());
  plan_flags.add(&app, cli::plan_specs(), cli::option_defaults());
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  std::vector<std::pair<std::string, json>> values;
  std::vector<core::Problem> problems = scenario_flags.values(values);
  for (auto& p : plan_flags.values(values)) problems.push_back(p);
  EXPECT_TRUE(problems.empty()) << problems.front().field << ": " << problems.front().message;
  explore::Scenario sc;
  cli::apply_values(values, sc);
  return sc;
}

// The command-line words that set `spec` to `value`.
std::vector<std::string> words(const core::OptionSpec& spec, const json& value) {
  if (spec.type == core::ValueType::Boolean) return {value.get<bool>() ? spec.flag : spec.false_flag};
  return {core::flag_of(spec), core::value_to_text(spec, value)};
}

// The scenario a one-key sweep point describes.
explore::Scenario from_sweep(const core::OptionSpec& spec, const json& value) {
  explore::SweepSpec sweep;
  explore::add_set(sweep, spec.key + "=" + core::value_to_text(spec, value));
  const auto points = explore::expand(sweep, "test");
  EXPECT_EQ(points.size(), 1u);
  return explore::scenario_of(points.at(0).inputs, "test");
}

bool has_column(const std::string& key) {
  const auto& cols = explore::SweepDb::columns();
  return std::any_of(cols.begin(), cols.end(), [&](const auto& c) { return c.first == key; });
}

TEST(OptionTable, EveryPlanOptionReachesEveryChannel) {
  const plan::PlanOptions defaults;
  const json schema = plan::plan_schema();
  ASSERT_GE(plan::plan_option_table().size(), 30u);
  for (const auto& row : plan::plan_option_table()) {
    const std::string& key = row.spec.key;
    const json sample = core::sample_value(row.spec, row.get(defaults));
    ASSERT_NE(sample, row.get(defaults)) << key;
    // Command line.
    EXPECT_EQ(row.get(from_command_line(words(row.spec, sample)).plan), sample) << "flag of " << key;
    // Plan file: written and read back.
    plan::PlanOptions o;
    ASSERT_FALSE(plan::set_plan_option(o, key, sample).has_value()) << key;
    EXPECT_EQ(row.get(plan::plan_from_json(plan::plan_to_json(o), "p.json")), sample) << "plan file key " << key;
    // Sweep key and column.
    EXPECT_EQ(row.get(from_sweep(row.spec, sample).plan), sample) << "sweep key " << key;
    EXPECT_TRUE(has_column(key)) << "sweep column " << key;
    // Schema property, with the table's default.
    ASSERT_TRUE(schema["properties"].contains(key)) << "schema property " << key;
    EXPECT_EQ(schema["properties"][key]["default"], row.get(defaults)) << key;
  }
}

TEST(OptionTable, EveryScenarioOptionReachesEveryChannel) {
  const explore::Scenario defaults;
  for (const auto& row : explore::scenario_option_table()) {
    const std::string& key = row.spec.key;
    const json sample = core::sample_value(row.spec, row.get(defaults));
    ASSERT_NE(sample, row.get(defaults)) << key;
    EXPECT_EQ(row.get(from_command_line(words(row.spec, sample))), sample) << "flag of " << key;
    EXPECT_EQ(row.get(from_sweep(row.spec, sample)), sample) << "sweep key " << key;
    EXPECT_TRUE(has_column(key)) << "sweep column " << key;
  }
}

// The provenance of a lowered plan is the resolved plan in a plan file's form
// (every key of the table) plus what the batch split derived.
TEST(OptionTable, ProvenanceIsTheResolvedPlan) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.gpus = 16;
  sc.plan.global_batch_tokens = 32 * 8192;
  const core::Schedule s = explore::build_schedule(sc, plan::Strategy::Hzp);
  const json prov = json::parse(s.provenance_json).at("plan");
  for (const auto& key : plan::plan_option_keys()) EXPECT_TRUE(prov.contains(key)) << key;
  EXPECT_EQ(prov.at("param_shard"), 8);  // resolved: hzp's default g_p is the scale-up domain
  EXPECT_EQ(prov.at("global_batch_sequences"), 32);
  EXPECT_TRUE(prov.at("global_batch_tokens").is_null());
  EXPECT_EQ(prov.at("micro_batches"), 2);
}

// A bad value is one problem naming the option's key, with the flag mapped by the CLI.
TEST(OptionTable, BadValuesNameTheKeyAndTheFlag) {
  const auto* tp = plan::find_plan_option("tp");
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(core::value_from_text(tp->spec, "-1").problem, "expected an integer in [1, 4096], got '-1'");
  EXPECT_EQ(core::value_from_text(tp->spec, "99999999999999999999").problem,
            "expected an integer in [1, 4096], got '99999999999999999999'");
  const auto* jitter = plan::find_plan_option("compute_jitter");
  EXPECT_EQ(core::value_from_text(jitter->spec, "nan").problem, "expected a finite number in [0, 1], got 'nan'");
  // Numbers are decimal as people write them (issue 42, item 13).
  for (const char* good : {"12", "0.5", "1.5e9", "-3", "2E3", ".5"}) EXPECT_TRUE(core::parse_decimal(good)) << good;
  for (const char* bad : {"0x10", "+1", "inf", "nan", " 1", "1 ", "1e", "", "1e999", "--1"}) {
    EXPECT_FALSE(core::parse_decimal(bad)) << bad;
  }
  EXPECT_EQ(*core::parse_decimal("1.5e9"), 1.5e9);
  EXPECT_EQ(core::value_from_text(jitter->spec, "0x0.1").problem, "expected a finite number in [0, 1], got '0x0.1'");
  EXPECT_EQ(cli::flag_for_field("global_batch_sequences"), "--global-batch-sequences");
  EXPECT_EQ(cli::flag_for_field("reshard_after_forward"), "--reshard-after-forward");
  EXPECT_EQ(cli::flag_for_field("nic_gbps"), "--nic-gbps");
  EXPECT_EQ(cli::flag_for_field("price_per_gpu_hour"), "--price-per-gpu-hour");
  // The old spelling of a flag is still accepted.
  EXPECT_EQ(from_command_line({"--global-batch-seqs", "64"}).plan.global_batch_sequences, 64);
}

// Whether each channel takes `text` for `spec`: the command-line flag, the
// sweep key (--set), a sweep spec's base and, for plan options, a plan file.
// The file channels hold JSON numbers, so they see the values text can
// spell as one (not nan, inf or hexadecimal).
struct Verdicts {
  bool flag = false, set = false;
  std::optional<bool> sweep_file, plan_file;
};

template <typename F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const core::InputError&) {
  } catch (const core::ProblemError&) {
  } catch (const CLI::ParseError&) {
  }
  return false;
}

Verdicts verdicts(const core::OptionSpec& spec, bool plan_option, const std::string& text) {
  Verdicts v;
  v.flag = accepted([&] {
    CLI::App app;
    cli::OptionFlags scenario_flags, plan_flags;
    scenario_flags.add(&app, cli::scenario_specs(true), cli::option_defaults());
    plan_flags.add(&app, cli::plan_specs(), cli::option_defaults());
    app.parse(std::vector<std::string>{text, core::flag_of(spec)});
    std::vector<std::pair<std::string, json>> values;
    auto problems = scenario_flags.values(values);
    for (auto& p : plan_flags.values(values)) problems.push_back(p);
    if (!problems.empty()) throw core::ProblemError(problems);
  });
  v.set = accepted([&] {
    explore::SweepSpec sweep;
    explore::add_set(sweep, spec.key + "=" + text);
  });
  const std::optional<double> number = core::parse_decimal(text);
  if (!number) return v;
  json value = *number;
  std::int64_t whole = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), whole).ptr == text.data() + text.size()) value = whole;
  v.sweep_file = accepted([&] {
    (void)explore::sweep_from_json(json{{"schema_version", 1}, {"base", {{spec.key, value}}}}.dump(), "s.json");
  });
  if (plan_option) {
    v.plan_file = accepted([&] {
      json file = json::parse(plan::plan_to_json(plan::PlanOptions{}));
      file[spec.key] = value;
      (void)plan::plan_from_json(file.dump(), "p.json");
    });
  }
  return v;
}

// One range per option (issue 42): for every numeric option, its flag, its
// sweep key and its file keys take and refuse the same values, the ends of
// its range taken and the numbers just outside refused.
TEST(OptionTable, EveryChannelTakesTheSameRange) {
  std::vector<std::pair<const core::OptionSpec*, bool>> specs;
  for (const auto& row : plan::plan_option_table()) specs.emplace_back(&row.spec, true);
  for (const auto& row : explore::scenario_option_table()) specs.emplace_back(&row.spec, false);
  int checked = 0;
  for (const auto& [spec, plan_option] : specs) {
    const bool integer = spec->type == core::ValueType::Integer || spec->type == core::ValueType::TokenCount;
    if (!integer && spec->type != core::ValueType::Number) continue;
    // Integers in integers: 2^53 + 1 as a double is 2^53.
    auto spell = [&](double x, int step) {
      return integer ? fmt::format("{}", static_cast<std::int64_t>(x) + step)
                     : fmt::format("{}", x + step * std::max(1e-3, std::abs(x) / 2));
    };
    const std::vector<std::pair<std::string, bool>> values{{spell(spec->min, 0), true},
                                                           {spell(spec->max, 0), true},
                                                           {spell(spec->min, -1), false},
                                                           {spell(spec->max, 1), false},
                                                           {"nan", false},
                                                           {"inf", false},
                                                           {"0x10", false},
                                                           {"1e999", false}};
    for (const auto& [text, in_range] : values) {
      const Verdicts v = verdicts(*spec, plan_option, text);
      const std::string at = spec->key + " = " + text;
      EXPECT_EQ(v.flag, in_range) << "flag " << core::flag_of(*spec) << " " << text;
      EXPECT_EQ(v.set, v.flag) << "--set " << at;
      EXPECT_EQ(v.sweep_file.value_or(v.flag), v.flag) << "sweep spec base " << at;
      EXPECT_EQ(v.plan_file.value_or(v.flag), v.flag) << "plan file " << at;
      ++checked;
    }
  }
  EXPECT_GE(checked, 8 * 25);  // 28 numeric options today
}

std::string source_dir() {
  const char* d = std::getenv("HZP_SOURCE_DIR");
  return d ? d : ".";
}

// `hzp simulate --adaptive --calibration F` and `hzp plan --calibration F`
// choose on the same calibrated cluster that the final simulation of the
// chosen plan runs on: the step they report is that simulation's, to the
// nanosecond.
TEST(InputResolver, AdaptiveAndPlanSearchSeeTheCalibration) {
  explore::Scenario sc;
  sc.model = "llama3-8b";
  sc.cluster = "dgx-a100";
  sc.gpus = 16;
  sc.overlay.calibration = source_dir() + "/validation/calibration/A100-SXM-80GB.megatron-deepspeed.json";
  sc.stack = "megatron-deepspeed";  // the stack the calibration was fitted under
  sc.plan.global_batch_sequences = 32;
  sc.plan.seq_len = 2048;
  sc.plan.recompute = models::Recompute::Full;
  const explore::AdaptiveChoice choice = explore::choose_shards(sc, 80);
  explore::Scenario chosen = sc;
  chosen.plan = choice.plan;
  chosen.strategies = {plan::Strategy::Hzp};
  const core::Duration final_step = explore::run_scenario(chosen).runs.at(0).metrics.step_time;
  EXPECT_EQ(choice.candidates.front().step.count_ns(), final_step.count_ns());
  // The calibration matters here: without it the same plan takes another time.
  explore::Scenario uncalibrated = chosen;
  uncalibrated.overlay.calibration.clear();
  EXPECT_NE(explore::run_scenario(uncalibrated).runs.at(0).metrics.step_time.count_ns(), final_step.count_ns());

  explore::PlanQuery q;
  q.model = sc.model;
  q.clusters = {sc.cluster};
  q.gpus = {sc.gpus};
  q.base = sc.plan;
  q.stack = sc.stack;
  q.overlay = sc.overlay;
  q.top = 1;
  const explore::PlanSearch found = explore::search_plans(q);
  ASSERT_FALSE(found.best.empty());
  explore::Scenario best = sc;
  best.plan = found.best.front().options;
  best.strategies = {best.plan.strategy};
  EXPECT_EQ(found.best.front().step_s, explore::run_scenario(best).runs.at(0).metrics.step_time.to_seconds());
}

// A calibration fitted under one stack does not hold for another: refused,
// naming the calibration file and its key.
TEST(InputResolver, CalibrationHoldsForItsStackOnly) {
  explore::Scenario sc;
  sc.cluster = "dgx-a100";
  sc.overlay.calibration = source_dir() + "/validation/calibration/A100-SXM-80GB.megatron-deepspeed.json";
  sc.stack = "torch-fsdp2";
  try {
    (void)explore::resolve_inputs(sc);
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_EQ(e.key(), "stack");
    EXPECT_NE(std::string(e.what()).find("megatron-deepspeed"), std::string::npos);
  }
  sc.stack = "megatron-deepspeed";
  EXPECT_EQ(explore::resolve_inputs(sc).stack->spec.name, "megatron-deepspeed");
}

}  // namespace
}  // namespace hzp
