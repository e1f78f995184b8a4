// `hzp simulate` and `hzp schedule`: a scenario from the generated flags (or a
// plan file), simulated and printed, or lowered and written.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/explain.hpp"
#include "cli/megatron_args.hpp"
#include "cli/option_flags.hpp"
#include "cli/report.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "explore/adaptive.hpp"
#include "explore/scenario.hpp"
#include "explore/search.hpp"
#include "explore/why.hpp"
#include "plan/plan_file.hpp"
#include "traces/timeline.hpp"

namespace hzp::cli {
namespace {

struct Options {
  explore::Scenario sc;
  cli::OptionFlags scenario_flags;  // model, cluster, GPUs, calibration, what-if (and engine for simulate)
  cli::OptionFlags plan_flags;      // every plan option (the ones a --plan file replaces)
  bool json = false;
  bool explain = false;
  std::string trace, csv, summary, out_dir, schedule_out;
  std::string plan_file;
  std::string plan_source = "command line";  // where plan problems are named: the flags, or plan_file once read
  std::string megatron_args;                 // --from-megatron-args: the arguments, or a file of them
  bool force = false;
  bool adaptive = false;
  double memory_limit_GiB = 0;
  explore::WorkLimits limits;
};

void add_scenario_options(CLI::App* app, Options& o, bool engine) {
  const nlohmann::json defaults = cli::option_defaults();
  o.scenario_flags.add(app, cli::scenario_specs(engine), defaults);
  o.plan_flags.add(app, cli::plan_specs(), defaults);
  if (CLI::Option* strategy = app->get_option_no_throw("--strategy")) {
    strategy->description(strategy->get_description() + "; all: every strategy side by side")
        ->type_name(strategy->get_type_name() + "|all")
        ->default_str("all");
  }
  app->add_option("--plan", o.plan_file,
                  "plan options from a JSON file (see examples/plans/) instead of the plan flags")
      ->check(file_name());
  app->add_option("--from-megatron-args", o.megatron_args,
                  "a Megatron-LM command line (or a file of one) as the plan: its parallel sizes, batch, recompute "
                  "and overlaps; prints what it mapped and what it ignored; plan flags given too override it")
      ->check(file_name());
  app->add_flag("--force", o.force, "overwrite output files that already exist");
  add_work_limits(app, o.limits, engine);
}

void finish_plan(Options& o, const std::string& command_line);

// The scenario from the flags or the plan file, with the work limits.
void finish_scenario(Options& o, const std::string& command_line) {
  finish_plan(o, command_line);
  o.limits.apply(o.sc);
}

// --from-megatron-args: its plan options (before the plan flags, which override them).
bool apply_megatron_args(Options& o) {
  if (o.megatron_args.empty()) return false;
  if (!o.plan_file.empty()) {
    throw core::InputError("command line", "--from-megatron-args", "expected either --plan or --from-megatron-args");
  }
  std::error_code ec;
  const bool file = std::filesystem::is_regular_file(o.megatron_args, ec);
  // A path that names something other than a regular file (a folder, a
  // FIFO, a device) is not taken for the arguments themselves.
  if (!file && std::filesystem::exists(o.megatron_args, ec)) {
    throw core::InputError(o.megatron_args, "--from-megatron-args",
                           "expected a regular file of Megatron-LM arguments (or the arguments themselves)");
  }
  const MegatronImport m = import_megatron_args(file ? core::read_file(o.megatron_args) : o.megatron_args,
                                                file ? o.megatron_args : std::string("--from-megatron-args"));
  cli::apply_values(m.values, o.sc);
  // Megatron-LM's own kernels and collectives, unless --stack says otherwise.
  if (!o.scenario_flags.text("stack")) cli::apply_values({{"stack", "megatron-core-te"}}, o.sc);
  std::cerr << describe_import(m);
  return true;
}

void finish_plan(Options& o, const std::string& command_line) {
  o.sc.command_line = command_line;
  std::vector<std::pair<std::string, nlohmann::json>> values;
  std::vector<core::Problem> problems = o.scenario_flags.values(values);
  if (!problems.empty()) throw core::ProblemError(std::move(problems));
  cli::apply_values(values, o.sc);
  if (!o.plan_file.empty()) {
    if (o.plan_flags.any_given()) {
      throw core::InputError("command line", o.plan_flags.first_given(),
                             "expected either --plan or plan options on the command line, not both");
    }
    o.sc.plan = plan::plan_from_json(core::read_file(o.plan_file), o.plan_file);
    o.sc.strategies = {o.sc.plan.strategy};
    o.plan_source = o.plan_file;
    return;
  }
  const bool megatron = apply_megatron_args(o);
  // `--strategy all` (the default) compares every strategy; any other value is the plan's.
  const std::optional<std::string> strategy = o.plan_flags.text("strategy");
  const bool all = (!strategy && !megatron) || (strategy && *strategy == "all");
  if (strategy && all) o.plan_flags.forget("strategy");
  values.clear();
  problems = o.plan_flags.values(values);
  if (!problems.empty()) throw core::ProblemError(std::move(problems));
  cli::apply_values(values, o.sc);
  o.sc.strategies.clear();
  if (!all) o.sc.strategies = {o.sc.plan.strategy};
}

// Refuses to replace an existing file unless --force (checked before any work).
void check_writable(const Options& o, const std::string& path) {
  if (!path.empty() && path != "-" && !o.force && std::filesystem::exists(path)) {
    throw core::InputError(path, "", "already exists; pass --force to overwrite it");
  }
}

// Why the one plan simulated does not fit: its host memory (offload), else its device memory.
void report_infeasible(const explore::ScenarioResult& r) {
  const sim::Metrics& m = r.runs[0].metrics;
  if (!m.host_fits() && r.cluster.host) {
    std::cerr << fmt::format(
        "hzp: infeasible: {} offloads {:.1f} GiB of host memory per device, {:.0f} GiB per node of {} devices; the "
        "node has {:.0f} GiB\n",
        plan::to_string(r.runs[0].strategy), m.host_memory().gib(), m.host_memory().gib() * r.cluster.devices_per_node,
        r.cluster.devices_per_node, r.cluster.host->memory_GiB);
    return;
  }
  const sim::ProgramMemory* w = m.worst_memory();
  std::string top;
  for (std::size_t i = 0; w && i < w->at_peak.size() && i < 3; ++i) {
    top += fmt::format("{}{} {:.1f} GiB", i ? ", " : "", w->at_peak[i].first, w->at_peak[i].second.gib());
  }
  std::cerr << fmt::format(
      "hzp: infeasible: {} needs {:.1f} GiB per device (reserved), the {} has {:.0f} GiB; largest at the peak: {}\n",
      plan::to_string(r.runs[0].strategy), m.peak_reserved().gib(), r.cluster.device.name, r.cluster.device.hbm_GiB,
      top);
}

int cmd_simulate(Options& o, const std::string& command_line) {
  finish_scenario(o, command_line);
  // The model, cluster (calibration and what-ifs applied) and stack, loaded once.
  explore::Inputs inputs = explore::resolve_inputs(o.sc);
  if (o.adaptive) {
    if (o.sc.plan.param_shard || o.sc.plan.grad_shard || o.sc.plan.optim_shard) {
      throw core::InputError("command line", "--adaptive",
                             "expected no --param-shard/--grad-shard/--optim-shard with --adaptive");
    }
    const double limit = o.memory_limit_GiB > 0 ? o.memory_limit_GiB : inputs.cluster.spec.device.hbm_GiB;
    explore::AdaptiveChoice choice = explore::choose_shards(o.sc, inputs, limit);
    if (!o.json) std::cout << choice.explanation << "\n";
    o.sc.plan = choice.plan;
    o.limits.apply(o.sc);
    o.sc.strategies = {plan::Strategy::Hzp};
  }
  for (const auto* path : {&o.trace, &o.csv, &o.summary}) check_writable(o, *path);
  if (o.out_dir == "-") {
    throw core::InputError("command line", "--out-dir",
                           "expected a folder (standard output holds one file: --trace -)");
  }
  if (int(o.trace == "-") + int(o.csv == "-") + int(o.summary == "-") > 1) {
    throw core::InputError("command line", "-", "expected at most one of --trace, --csv, --summary on standard output");
  }
  // The Schedule's fingerprint goes only into outputs (JSON summary, traces,
  // CSV): a run that prints its table alone does not pay for it.
  o.sc.hash_schedules = o.json || !o.trace.empty() || !o.csv.empty() || !o.summary.empty() || !o.out_dir.empty();
  o.sc.timeline_names = !o.trace.empty() || !o.csv.empty() || !o.out_dir.empty();
  explore::ScenarioResult r = explore::run_scenario(o.sc, std::move(inputs));
  const bool one = r.runs.size() == 1;
  if ((!o.trace.empty() || !o.csv.empty()) && !one) {
    throw core::InputError("command line", o.trace.empty() ? "--csv" : "--trace",
                           "expected a single --strategy (use --out-dir to write every strategy's trace)");
  }
  std::string json = cli::summary_json(r, command_line);
  // An output written to standard output ("-") keeps it to itself: the
  // summary goes to standard error.
  std::ostream& text = o.trace == "-" || o.csv == "-" || o.summary == "-" ? std::cerr : std::cout;
  text << (o.json ? json : cli::summary_text(r));
  if ((o.explain || !one) && !o.json) {
    const cost::PerfModel pm(topologies::Topology(r.cluster, r.gpus));
    text << "\n"
         << explore::why_text(explore::plan_terms(r, pm), r.cluster.device.hbm_GiB, cli::expected_error_of(r).mean_abs);
    if (o.explain) {
      for (const auto& run : r.runs) {
        text << "\n"
             << cli::explain(run.schedule, run.plan, pm) << "\n"
             << cli::time_split_text(run.metrics.split, run.schedule, run.metrics.step_time);
      }
    }
  }
  if (one && !r.runs[0].metrics.fits()) {
    report_infeasible(r);
    return kExitInfeasible;
  }
  // Outputs only once everything succeeded and none would be clobbered: all
  // of them, or none (core::OutputSet).
  core::OutputSet out;
  if (!o.trace.empty())
    out.add(o.trace, traces::to_chrome_trace(r.runs[0].timeline, traces::peer_links(r.runs[0].schedule)));
  if (!o.csv.empty()) out.add(o.csv, traces::to_csv(r.runs[0].timeline));
  if (!o.summary.empty()) out.add(o.summary, json);
  std::vector<std::string> written;
  if (!o.out_dir.empty()) {
    for (const auto& run : r.runs) {
      written.push_back(fmt::format("{}/{}.trace.json", o.out_dir, cli::run_stem(r, run)));
      out.add(written.back(), traces::to_chrome_trace(run.timeline, traces::peer_links(run.schedule)));
    }
    written.push_back(fmt::format("{}/summary.json", o.out_dir));
    out.add(written.back(), json);
  }
  for (const auto& path : written) check_writable(o, path);
  out.commit();
  if (!written.empty() && !o.json) {
    std::cout << "\nwrote:";
    for (const auto& w : written) std::cout << " " << w;
    std::cout << "\n(open the .trace.json files in https://ui.perfetto.dev)\n";
  }
  return 0;
}

int cmd_schedule(Options& o, const std::string& command_line) {
  if (o.schedule_out.empty())
    throw core::InputError("command line", "--out", "expected a file to write the Schedule to");
  finish_scenario(o, command_line);
  if (o.sc.strategies.size() != 1) {
    throw core::InputError("command line", "--strategy", "expected one strategy for `hzp schedule`, not all");
  }
  check_writable(o, o.schedule_out);
  core::Schedule s = explore::build_schedule(o.sc, o.sc.strategies.at(0));
  core::write_file_atomic(o.schedule_out, core::to_canonical_json(s) + "\n");
  (o.schedule_out == "-" ? std::cerr : std::cout)
      << fmt::format("wrote {} (sha256 {})\n", o.schedule_out, core::schedule_hash(s));
  return 0;
}

class ScenarioCommand : public Command {
 public:
  ScenarioCommand(std::string command_line, bool schedule)
      : command_line_(std::move(command_line)), schedule_(schedule) {}
  [[nodiscard]] bool parsed() const override { return app->parsed(); }
  int run() override { return schedule_ ? cmd_schedule(o, command_line_) : cmd_simulate(o, command_line_); }
  [[nodiscard]] std::string problem_source() const override { return o.plan_source; }
  CLI::App* app = nullptr;
  Options o;

 private:
  std::string command_line_;
  bool schedule_;
};

}  // namespace

void add_scenario_commands(CLI::App& app, const std::string& command_line, Commands& out) {
  auto sim = std::make_unique<ScenarioCommand>(command_line, false);
  Options& o = sim->o;
  sim->app = app.add_subcommand("simulate", "simulate one training step and print its metrics");
  CLI::App* s = sim->app;
  add_scenario_options(s, o, /*engine=*/true);
  s->add_option("--simgrid-cfg", o.sc.engine_options.simgrid_config,
                "simgrid: a SimGrid setting KEY:VALUE applied after hzp's own (repeatable)");
  s->add_flag("!--no-interference", o.sc.engine_options.interference,
              "compute does not slow down while collectives share the device");
  s->add_flag("!--no-link-sharing", o.sc.engine_options.link_sharing,
              "analytic: collectives running at once on a device each get its links' whole bandwidth");
  s->add_flag("--json", o.json, "print the summary as JSON");
  s->add_option("--trace", o.trace, "write a Chrome/Perfetto trace (one strategy)")->check(file_name());
  s->add_option("--csv", o.csv, "write the timeline as CSV (one strategy)")->check(file_name());
  s->add_option("--summary", o.summary, "write the JSON summary to this file")->check(file_name());
  s->add_option("--out-dir", o.out_dir, "write every strategy's trace and summary.json here")->check(file_name());
  s->add_flag("--explain", o.explain, "print the groups, their placement and the per-step communication table");
  s->add_flag("--adaptive", o.adaptive,
              "choose hzp group sizes (dense and expert) that minimise step time within the memory budget");
  s->add_option("--memory-limit-GiB", o.memory_limit_GiB, "memory budget per device for --adaptive (default: HBM)")
      ->check(number_in(0.001, 1e6));
  out.push_back(std::move(sim));

  auto sched = std::make_unique<ScenarioCommand>(command_line, true);
  sched->app = app.add_subcommand("schedule", "lower a plan to a Schedule and write it as canonical JSON");
  add_scenario_options(sched->app, sched->o, /*engine=*/false);
  sched->app->add_option("--out", sched->o.schedule_out, "the Schedule file to write")->required()->check(file_name());
  out.push_back(std::move(sched));
}

}  // namespace hzp::cli
