// `hzp plan`: search strategies and parallelism for the best plans that fit,
// printed as a table or JSON.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/option_flags.hpp"
#include "cli/plan_compare.hpp"
#include "cli/report.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/options.hpp"
#include "explore/search.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/cluster_spec.hpp"
#include "validation/expected_error.hpp"

namespace hzp::cli {
namespace {

struct PlanArgs {
  std::string model = "llama3-70b";
  std::vector<std::string> clusters{"dgx-h100"};
  std::vector<int> gpus{1024};
  cli::OptionFlags batch_flags;    // the plan's batch, sequence length and workload variability
  cli::OptionFlags overlay_flags;  // calibration and what-if changes, applied to every cluster
  double memory_limit_GiB = 0;
  double price = 0;
  std::string objective = "throughput";
  int top = 5;
  int jobs = 0;
  int jobs_used = 1;  // the processes the search ran on
  bool json = false;
  bool exhaustive = false;
  std::optional<double> tolerance_pct;  // default: the loosest expected error of the clusters and GPU counts
  bool tolerance_given = false;
  std::string train_tokens_text;
  std::optional<double> train_tokens;  // parsed from train_tokens_text
  topologies::ClusterOverlay overlay;  // the calibration and what-if changes, as resolved
  explore::WorkLimits limits;
  std::vector<std::string> strategies;  // --strategy: only these (hzp's or PyTorch's names)
  std::vector<std::string> compare;     // --compare: the best of each of these families
};

// --train-tokens: a count with an optional decimal suffix K, M, G, T (10^3 ..
// 10^12), as training budgets are stated ("15T").
std::optional<double> parse_train_tokens(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
    case 'k': mult = 1e3; break;
    case 'M':
    case 'm': mult = 1e6; break;
    case 'G':
    case 'g':
    case 'B':
    case 'b': mult = 1e9; break;
    case 'T':
    case 't': mult = 1e12; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  const std::optional<double> v = core::parse_decimal(digits);
  if (!v || *v * mult < 1 || *v * mult > 1e18) return std::nullopt;  // at least one token
  return *v * mult;
}

// The error expected of the plans of each cluster and GPU count asked for
// (the nearest group of checked public runs), one per distinct group.
struct Expected {
  std::vector<std::pair<std::string, validation::ExpectedError>> groups;  // "dgx-h100 x 1024" and its error
  double loosest = 0;                                                     // the largest mean |error|
};

Expected expected_errors(const PlanArgs& a, const std::string& stack) {
  Expected out;
  const std::string stack_name = stacks::resolve_stack(stack)->spec.name;
  for (const auto& cluster : a.clusters) {
    const double cc = topologies::load_cluster(cluster).device.compute_capability;
    for (int gpus : a.gpus) {
      validation::ExpectedError e = validation::expected_error(cc, stack_name, gpus);
      out.loosest = std::max(out.loosest, e.mean_abs);
      const bool seen =
          std::any_of(out.groups.begin(), out.groups.end(), [&](const auto& g) { return g.second.text() == e.text(); });
      if (!seen) out.groups.emplace_back(fmt::format("{} x {}", cluster, gpus), std::move(e));
    }
  }
  return out;
}

// Where more than one cluster or GPU count was asked for, or one has no
// answer: each one's best row and what became of its candidates.
std::string settings_text(const explore::PlanSearch& r, const std::vector<explore::RankedPlan>& rows) {
  const bool all_answered =
      std::all_of(r.settings.begin(), r.settings.end(), [](const explore::SettingTally& t) { return t.fit > 0; });
  if (r.settings.size() < 2 && all_answered) return "";
  std::string text = "\neach cluster and GPU count: its best row, and where its candidates went\n";
  for (const auto& t : r.settings) {
    std::string best = "no plan fits";
    for (const auto& row : rows) {
      const explore::PlanChoice& c = r.best[row.plan];
      if (c.cluster == t.cluster && c.gpus == t.gpus) {
        best = "best #" + row.rank;
        break;
      }
    }
    text += fmt::format(
        "  {} x {}: {}; {} candidates: {} over the memory budget, {} slower than its best by their compute bound, "
        "{} over --max-ops, {} fit; {} layouts whose batch does not split over the GPUs\n",
        t.cluster, t.gpus, best, t.candidates, t.memory, t.bound, t.op_limit, t.fit, t.batch_unsplit);
  }
  return text;
}

std::string plan_text(const explore::PlanSearch& r, const std::vector<explore::RankedPlan>& rows, const PlanArgs& a,
                      const Expected& expected) {
  std::string text = fmt::format(
      "hzp plan: {} candidates ({} pruned by the memory bound, {} by the compute bound, {} screened on reduced-layer "
      "models, {} simulated exactly) in {:.2f} s = {:.0f} candidates/s\n\n",
      r.candidates, r.pruned_memory, r.pruned_bound, r.screened, r.exact, r.seconds, r.candidates_per_second());
  if (r.screened > 0 && r.exact > 0) {
    text.insert(text.size() - 2,
                fmt::format("; {:.1f} ms a screened candidate, {:.0f} ms an exact plan (wall, {} jobs)",
                            1e3 * r.screen_seconds / static_cast<double>(r.screened),
                            1e3 * r.exact_seconds / static_cast<double>(r.exact), a.jobs_used));
  }
  if (!a.overlay.empty()) text += fmt::format("what-if: {} (applied to every cluster)\n\n", a.overlay.describe());
  text += fmt::format("{:>3} {:<16} {:>6}  {:<44} {:>8} {:>10} {:>6} {:>9} {:>9}  {}\n", "#", "cluster", "gpus", "plan",
                      "step s", "tokens/s", "MFU", "mem GiB", "$/Mtok", "bottleneck");
  bool ties = false;
  for (const auto& row : rows) {
    const explore::PlanChoice& c = r.best[row.plan];
    ties = ties || row.tied;
    text +=
        fmt::format("{:>3} {:<16} {:>6}  {:<44} {:>8.3f} {:>10.0f} {:>5.1f}% {:>9.1f} {:>9}  {}\n", row.rank, c.cluster,
                    c.gpus, row.description, c.step_s, c.tokens_per_s, 100 * c.mfu, c.peak_reserved_GiB,
                    c.usd_per_million_tokens ? fmt::format("{:.3f}", *c.usd_per_million_tokens) : "n/a", c.bottleneck);
  }
  if (r.best.empty()) text += "(no plan fits: where the candidates went is below)\n";
  text += settings_text(r, rows);
  if (ties) {
    text += fmt::format(
        "\n'=': within {:.1f} % of the first plan of its tie ({}), {}: a tie, not a ranking. Words joined by '|': "
        "plans with identical predictions.\n",
        *a.tolerance_pct, a.objective == "cost" ? "$/Mtok" : "tokens/s",
        a.tolerance_given ? "--tolerance" : "the expected error (--tolerance)");
  }
  text += "\n";
  for (const auto& [where, e] : expected.groups) {
    text += (expected.groups.size() > 1 ? where + ": " : std::string()) + e.text();
  }
  if (a.train_tokens && !rows.empty()) {
    text += fmt::format("\ntraining {:.3g} tokens:\n{:>3} {:<16} {:>6} {:>9} {:>12} {:>12}\n", *a.train_tokens, "#",
                        "cluster", "gpus", "days", "GPU-hours", "USD");
    for (const auto& row : rows) {
      const explore::PlanChoice& c = r.best[row.plan];
      const explore::TrainingCost t = explore::training_cost(c, *a.train_tokens);
      text += fmt::format("{:>3} {:<16} {:>6} {:>9.1f} {:>12.0f} {:>12}\n", row.rank, c.cluster, c.gpus, t.days,
                          t.gpu_hours, t.usd ? fmt::format("{:.0f}", *t.usd) : "n/a (no price)");
    }
  }
  return text;
}

nlohmann::ordered_json plan_row_json(const explore::PlanChoice& c, const std::string& rank,
                                     const std::optional<double>& train_tokens) {
  nlohmann::ordered_json j{
      {"rank", rank},
      {"cluster", c.cluster},
      {"gpus", c.gpus},
      {"plan", explore::describe_plan(c)},
      {"strategy", plan::to_string(c.options.strategy)},
      {"param_shard", c.shards.param},
      {"grad_shard", c.shards.grad},
      {"optim_shard", c.shards.optim},
      {"async", c.async},
      {"tp", c.options.tp},
      {"pp", c.options.pp},
      {"vpp", c.options.vpp},
      {"pipeline_schedule", plan::to_string(c.options.pipeline_schedule)},
      {"pipeline_layout", c.options.pipeline_layout ? nlohmann::ordered_json(*c.options.pipeline_layout)
                                                    : nlohmann::ordered_json(nullptr)},
      {"ep", c.options.ep},
      {"expert_tp",
       c.options.expert_tp ? nlohmann::ordered_json(*c.options.expert_tp) : nlohmann::ordered_json(nullptr)},
      {"offload_optimizer", c.options.offload_optimizer},
      {"offload_activations", c.options.offload_activations},
      {"offload_params", c.options.offload_params},
      {"micro_batch", c.options.micro_batch},
      {"recompute", plan::to_string(c.options.recompute)},
      {"step_time_s", c.step_s},
      {"tokens_per_s", c.tokens_per_s},
      {"mfu", c.mfu},
      {"peak_reserved_GiB", c.peak_reserved_GiB},
      {"usd_per_million_tokens",
       c.usd_per_million_tokens ? nlohmann::ordered_json(*c.usd_per_million_tokens) : nlohmann::ordered_json(nullptr)},
      {"bottleneck", c.bottleneck}};
  if (train_tokens) {
    const explore::TrainingCost t = explore::training_cost(c, *train_tokens);
    j["training"] = {{"tokens", *train_tokens},
                     {"days", t.days},
                     {"gpu_hours", t.gpu_hours},
                     {"usd", t.usd ? nlohmann::ordered_json(*t.usd) : nlohmann::ordered_json(nullptr)}};
  }
  return j;
}

std::string plan_json(const explore::PlanSearch& r, const std::vector<explore::RankedPlan>& rows,
                      const explore::PlanQuery& q, const PlanArgs& a, const Expected& expected) {
  nlohmann::ordered_json j{{"hzp_version", core::version()},
                           {"git_revision", core::git_revision()},
                           {"model", q.model},
                           {"objective", explore::to_string(q.objective)},
                           {"what_if", overlay_json(q.overlay)},
                           {"tolerance", *a.tolerance_pct / 100},
                           {"expected_error", nlohmann::ordered_json::array()},
                           {"candidates", r.candidates},
                           {"pruned_by_memory_bound", r.pruned_memory},
                           {"pruned_by_compute_bound", r.pruned_bound},
                           {"screened", r.screened},
                           {"simulated_exactly", r.exact},
                           {"seconds", r.seconds},
                           {"candidates_per_second", r.candidates_per_second()},
                           {"screening_seconds", r.screen_seconds},
                           {"exact_seconds", r.exact_seconds},
                           {"plans", nlohmann::ordered_json::array()}};
  for (const auto& [where, e] : expected.groups) {
    nlohmann::ordered_json x{{"for", where}};
    x.update(cli::expected_error_json(e));
    j["expected_error"].push_back(x);
  }
  j["settings"] = nlohmann::ordered_json::array();
  for (const auto& t : r.settings) {
    j["settings"].push_back({{"cluster", t.cluster},
                             {"gpus", t.gpus},
                             {"candidates", t.candidates},
                             {"over_memory", t.memory},
                             {"slower_by_bound", t.bound},
                             {"over_max_ops", t.op_limit},
                             {"fit", t.fit},
                             {"layouts_batch_unsplit", t.batch_unsplit}});
  }
  // Every plan found, merged ones included, with the rank of its row.
  std::vector<std::string> rank(r.best.size());
  for (const auto& row : rows) {
    for (std::size_t i : row.merged) rank[i] = row.rank;
  }
  for (std::size_t i = 0; i < r.best.size(); ++i) {
    j["plans"].push_back(plan_row_json(r.best[i], rank[i], a.train_tokens));
  }
  return j.dump(2);
}

// A progress line with an ETA on a terminal; nothing where standard error is
// a file (outputs stay byte-identical run to run).
std::function<void(std::size_t, std::size_t)> progress_line(const std::string& what) {
  if (::isatty(STDERR_FILENO) == 0) return {};
  const auto t0 = std::chrono::steady_clock::now();
  return [what, t0](std::size_t done, std::size_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto eta =
        static_cast<long>(done > 0 ? s / static_cast<double>(done) * static_cast<double>(total - done) : 0);
    std::cerr << fmt::format("\r{}: screened {} of {} groups of candidates ({:.0f}%), ETA {}:{:02}", what, done, total,
                             100.0 * static_cast<double>(done) / static_cast<double>(std::max<std::size_t>(total, 1)),
                             eta / 60, eta % 60)
              << (done == total ? "\n" : "") << std::flush;
  };
}

// --compare: the best plan of each family on one cluster and GPU count.
int cmd_compare(const PlanArgs& a, const explore::PlanQuery& q) {
  if (!a.strategies.empty()) {
    throw core::InputError("command line", "--compare", "expected --compare or --strategy, not both");
  }
  if (q.clusters.size() != 1 || q.gpus.size() != 1) {
    throw core::InputError("command line", "--compare", "expected one --cluster and one --gpus to compare on");
  }
  const std::vector<Compared> compared = compare_families(q, families_of(a.compare, q.stack));
  double tolerance = 0;  // the loosest family's expected error unless given
  for (const auto& c : compared) tolerance = std::max(tolerance, c.expected.mean_abs);
  if (a.tolerance_given) tolerance = *a.tolerance_pct / 100;
  if (a.json) {
    nlohmann::ordered_json j{{"hzp_version", core::version()},
                             {"git_revision", core::git_revision()},
                             {"model", q.model},
                             {"cluster", q.clusters[0]},
                             {"gpus", q.gpus[0]},
                             {"tolerance", tolerance}};
    j["compare"] = compare_json(compared);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << compare_text(q, compared, tolerance);
  }
  const bool any = std::any_of(compared.begin(), compared.end(), [](const Compared& c) { return c.best.has_value(); });
  return any ? 0 : kExitInfeasible;
}

int cmd_plan(PlanArgs& a) {
  if (!a.train_tokens_text.empty()) {
    a.train_tokens = parse_train_tokens(a.train_tokens_text);
    if (!a.train_tokens) {
      throw core::InputError("command line", "--train-tokens",
                             fmt::format("expected a token count of at least 1 with an optional decimal suffix K, M, G "
                                         "or B, T (15T = 15e12), got '{}'",
                                         a.train_tokens_text));
    }
  }
  explore::PlanQuery q;
  q.model = a.model;
  q.clusters = a.clusters;
  q.gpus = a.gpus;
  // The batch and the overlay through the same option tables as every command.
  std::vector<std::pair<std::string, nlohmann::json>> values;
  std::vector<core::Problem> problems = a.batch_flags.values(values);
  for (auto& p : a.overlay_flags.values(values)) problems.push_back(std::move(p));
  if (!problems.empty()) throw core::ProblemError(std::move(problems));
  explore::Scenario sc;
  cli::apply_values(values, sc);
  a.limits.apply(sc);
  q.base = sc.plan;
  q.stack = sc.stack;
  q.overlay = sc.overlay;
  q.max_ops = sc.max_ops;
  a.overlay = q.overlay;
  q.memory_limit_GiB = a.memory_limit_GiB;
  if (a.price > 0) q.price_per_gpu_hour = a.price;
  const std::optional<explore::Objective> objective = explore::parse_objective(a.objective);
  if (!objective) {
    throw core::InputError("command line", "--objective",
                           fmt::format("expected throughput or cost, got '{}'", a.objective));
  }
  q.objective = *objective;
  q.top = a.top;
  q.jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  a.jobs_used = q.jobs;
  q.exhaustive = a.exhaustive;
  q.strategies = strategies_of(a.strategies, "--strategy");  // one the stack does not run: search_plans refuses it
  a.tolerance_given = a.tolerance_pct.has_value();
  q.progress = progress_line("hzp plan");
  if (!a.compare.empty()) return cmd_compare(a, q);
  const Expected expected = expected_errors(a, q.stack);
  if (!a.tolerance_pct) a.tolerance_pct = 100 * expected.loosest;
  explore::PlanSearch r = explore::search_plans(q);
  const std::vector<explore::RankedPlan> rows = explore::rank_with_ties(r.best, q.objective, *a.tolerance_pct / 100);
  std::cout << (a.json ? plan_json(r, rows, q, a, expected) + "\n" : plan_text(r, rows, a, expected));
  return r.best.empty() ? kExitInfeasible : 0;
}

int run_plan(PlanArgs& a) { return cmd_plan(a); }

}  // namespace

void add_plan_command(CLI::App& app, Commands& out) {
  CLI::App* cmd = app.add_subcommand("plan", "search strategies and parallelism for the best plans that fit");
  auto c = std::make_unique<SimpleCommand<PlanArgs>>(cmd, run_plan);
  PlanArgs& pa = c->args;
  cmd->add_option("--model", pa.model, "catalog name or model .json")->capture_default_str();
  cmd->add_option("--cluster", pa.clusters, "catalog names or .json files (repeat or comma-separate)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpus", pa.gpus, "GPU counts (e.g. 256,512,1024)")->delimiter(',')->capture_default_str();
  // The batch, and what the data and the devices make of it (documents,
  // jitter, routing skew): inputs every candidate shares, so the search
  // weighs the stragglers they make under each plan.
  pa.batch_flags.add(cmd,
                     plan_specs({"global_batch_tokens", "global_batch_sequences", "seq_len", "doc_lengths",
                                 "doc_mean_tokens", "compute_jitter", "moe_skew", "variability_classes", "seed"}),
                     option_defaults());
  pa.overlay_flags.add(cmd,
                       scenario_specs(false, {"stack", "calibration", "nic_gbps", "oversubscription", "power_limit"}),
                       option_defaults());
  cmd->add_option("--memory-limit-GiB", pa.memory_limit_GiB, "memory budget per device (default: HBM)")
      ->check(number_in(0.001, 1e6));
  cmd->add_option("--price-per-gpu-hour", pa.price, "USD per GPU-hour (default: the cluster file's, if any)")
      ->check(number_in(1e-6, 1e6));
  cmd->add_option("--objective", pa.objective, "throughput | cost")->capture_default_str();
  cmd->add_option("--top", pa.top, "how many plans to print")->capture_default_str()->check(integer_in(1, 10000));
  cmd->add_option("-j,--jobs", pa.jobs, "screening processes (default: the core count)")->check(jobs());
  add_work_limits(cmd, pa.limits, /*flows=*/false);
  cmd->add_flag("--json", pa.json, "as JSON");
  cmd->add_flag("--exhaustive", pa.exhaustive, "screen every plan that passes the memory bound (no pruning)");
  cmd->add_option("--tolerance", pa.tolerance_pct,
                  "percent: plans closer than this in the objective are printed as a tie (default: the expected "
                  "error, the mean |error| of the nearest checked public runs)")
      ->check(number_in(0, 100));
  cmd->add_option("--strategy", pa.strategies,
                  "only these strategies (comma-separated; hzp's names or PyTorch's: FULL_SHARD, HYBRID_SHARD, ...; "
                  "default: every one the stack runs)")
      ->delimiter(',');
  cmd->add_option("--compare", pa.compare,
                  "the best plan of each of these families side by side, with what decides between them (e.g. "
                  "fsdp,hsdp,hzp; one --cluster and --gpus)")
      ->delimiter(',');
  cmd->add_option("--train-tokens", pa.train_tokens_text,
                  "tokens to train (decimal K, M, G or B, T: 15T = 15e12): days, GPU-hours and dollars of each plan")
      ->check(file_name());
  out.push_back(std::move(c));
}

}  // namespace hzp::cli
