// hzp: the command line. Parses options with CLI11, calls one library
// function per subcommand, prints. The only place exceptions become exit
// codes: 0 ok, 2 bad input, 3 infeasible plan (out of memory), 1 internal.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "explore/adaptive.hpp"
#include "cli/explain.hpp"
#include "cli/option_flags.hpp"
#include "cli/plot.hpp"
#include "cli/report.hpp"
#include "explore/scenario.hpp"
#include "explore/schemas.hpp"
#include "explore/search.hpp"
#include "explore/sweep.hpp"
#include "explore/sweep_db.hpp"
#include "explore/cases.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/sha256.hpp"
#include "core/subprocess.hpp"
#include "models/model_spec.hpp"
#include "plan/options.hpp"
#include "plan/plan_file.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/bench_results.hpp"
#include "traces/timeline.hpp"
#include "validation/calibrate.hpp"
#include "validation/compare.hpp"

namespace {

using namespace hzp;

constexpr int kExitBadInput = 2;
constexpr int kExitInfeasible = 3;
constexpr int kExitInternal = 1;

struct Options {
  explore::Scenario sc;
  cli::OptionFlags scenario_flags;  // model, cluster, GPUs, calibration, what-if (and engine for simulate)
  cli::OptionFlags plan_flags;      // every plan option (the ones a --plan file replaces)
  bool json = false;
  bool explain = false;
  std::string trace, csv, summary, out_dir, schedule_out;
  std::string plan_file;
  bool force = false;
  bool adaptive = false;
  double memory_limit_GiB = 0;
};

// Where the plan's problems are reported: the plan file's keys, or the flags.
std::string g_plan_source = "command line";

void add_scenario_options(CLI::App* app, Options& o, bool engine) {
  const nlohmann::json defaults = cli::option_defaults();
  o.scenario_flags.add(app, cli::scenario_specs(engine), defaults);
  o.plan_flags.add(app, cli::plan_specs(), defaults);
  if (CLI::Option* strategy = app->get_option_no_throw("--strategy")) {
    strategy->description(strategy->get_description() + "; all: every strategy side by side")->default_str("all");
  }
  app->add_option("--plan", o.plan_file,
                  "plan options from a JSON file (see examples/plans/) instead of the plan flags");
  app->add_flag("--force", o.force, "overwrite output files that already exist");
}

void finish_scenario(Options& o, const std::string& command_line) {
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
    g_plan_source = o.plan_file;
    return;
  }
  // `--strategy all` (the default) compares every strategy; any other value is the plan's.
  const std::optional<std::string> strategy = o.plan_flags.text("strategy");
  const bool all = !strategy || *strategy == "all";
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
  if (!path.empty() && !o.force && std::filesystem::exists(path)) {
    throw core::InputError(path, "", "already exists; pass --force to overwrite it");
  }
}

int cmd_simulate(Options& o, const std::string& command_line) {
  finish_scenario(o, command_line);
  if (o.adaptive) {
    if (o.sc.plan.param_shard || o.sc.plan.grad_shard || o.sc.plan.optim_shard) {
      throw core::InputError("command line", "--adaptive",
                             "expected no --param-shard/--grad-shard/--optim-shard with --adaptive");
    }
    const double limit =
        o.memory_limit_GiB > 0 ? o.memory_limit_GiB : explore::resolve_inputs(o.sc).cluster.spec.device.hbm_GiB;
    explore::AdaptiveChoice choice = explore::choose_shards(o.sc, limit);
    if (!o.json) std::cout << choice.explanation << "\n";
    o.sc.plan = choice.plan;
    o.sc.strategies = {plan::Strategy::Hzp};
  }
  for (const auto* path : {&o.trace, &o.csv, &o.summary}) check_writable(o, *path);
  explore::ScenarioResult r = explore::run_scenario(o.sc);
  const bool one = r.runs.size() == 1;
  if ((!o.trace.empty() || !o.csv.empty()) && !one) {
    throw core::InputError("command line", o.trace.empty() ? "--csv" : "--trace",
                           "expected a single --strategy (use --out-dir to write every strategy's trace)");
  }
  std::string json = cli::summary_json(r, command_line);
  if (o.json) {
    std::cout << json;
  } else {
    std::cout << cli::summary_text(r);
  }
  if (o.explain && !o.json) {
    topologies::PerfModel pm(topologies::Topology(r.cluster, r.gpus));
    for (const auto& run : r.runs) std::cout << "\n" << cli::explain(run.schedule, run.plan, pm);
  }
  if (one && !r.runs[0].metrics.fits()) {
    const sim::ProgramMemory* w = r.runs[0].metrics.worst_memory();
    std::string top;
    for (std::size_t i = 0; w && i < w->at_peak.size() && i < 3; ++i) {
      top += fmt::format("{}{} {:.1f} GiB", i ? ", " : "", w->at_peak[i].first, w->at_peak[i].second.gib());
    }
    std::cerr << fmt::format(
        "hzp: infeasible: {} needs {:.1f} GiB per device (reserved), the {} has {:.0f} GiB; largest at the peak: {}\n",
        plan::to_string(r.runs[0].strategy), r.runs[0].metrics.peak_reserved().gib(), r.cluster.device.name,
        r.cluster.device.hbm_GiB, top);
    return kExitInfeasible;
  }
  // Outputs only once everything succeeded and none would be clobbered, each written atomically.
  std::vector<std::pair<std::string, std::string>> dir_files;
  if (!o.out_dir.empty()) {
    for (const auto& run : r.runs) {
      dir_files.emplace_back(fmt::format("{}/{}.trace.json", o.out_dir, cli::run_stem(r, run)), "");
    }
    dir_files.emplace_back(fmt::format("{}/summary.json", o.out_dir), "");
    for (const auto& [path, _] : dir_files) check_writable(o, path);
  }
  if (!o.trace.empty()) core::write_file_atomic(o.trace, traces::to_chrome_trace(r.runs[0].timeline));
  if (!o.csv.empty()) core::write_file_atomic(o.csv, traces::to_csv(r.runs[0].timeline));
  if (!o.summary.empty()) core::write_file_atomic(o.summary, json);
  if (!o.out_dir.empty()) {
    std::vector<std::string> written;
    for (const auto& run : r.runs) {
      std::string path = fmt::format("{}/{}.trace.json", o.out_dir, cli::run_stem(r, run));
      core::write_file_atomic(path, traces::to_chrome_trace(run.timeline));
      written.push_back(path);
    }
    std::string path = fmt::format("{}/summary.json", o.out_dir);
    core::write_file_atomic(path, json);
    written.push_back(path);
    if (!o.json) {
      std::cout << "\nwrote:";
      for (const auto& w : written) std::cout << " " << w;
      std::cout << "\n(open the .trace.json files in https://ui.perfetto.dev)\n";
    }
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
  std::cout << fmt::format("wrote {} (sha256 {})\n", o.schedule_out, core::schedule_hash(s));
  return 0;
}

int cmd_models(bool json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text =
      fmt::format("{:<18} {:>7} {:>7} {:>10} {:>10}  {}\n", "name", "layers", "hidden", "params", "active", "kind");
  for (const auto& name : models::model_catalog_names()) {
    models::ModelSpec m = models::load_model(name);
    auto c = models::count_params(m);
    std::string kind = m.moe ? fmt::format("MoE {}x top-{}", m.moe->experts, m.moe->top_k) : "dense";
    if (m.mla) kind += ", MLA";
    j.push_back({{"name", name},
                 {"layers", m.layers},
                 {"hidden", m.hidden},
                 {"params", c.total},
                 {"active_params", c.active},
                 {"moe", m.moe.has_value()},
                 {"mla", m.mla.has_value()},
                 {"source", m.source}});
    text += fmt::format("{:<18} {:>7} {:>7} {:>9.2f}B {:>9.2f}B  {}\n", name, m.layers, m.hidden,
                        static_cast<double>(c.total) / 1e9, static_cast<double>(c.active) / 1e9, kind);
  }
  std::cout << (json ? j.dump(2) + "\n" : text);
  return 0;
}

int cmd_clusters(bool json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text = fmt::format("{:<16} {:<20} {:>9} {:>8} {:>14} {:>12}\n", "name", "device", "bf16 TF", "HBM GiB",
                                 "scale-up", "NIC/device");
  for (const auto& name : topologies::cluster_catalog_names()) {
    topologies::ClusterSpec c = topologies::load_cluster(name);
    std::string up = fmt::format("{}x{} {:.0f}GB/s", c.devices_per_node / c.scale_up.domain_devices,
                                 c.scale_up.domain_devices, c.scale_up.bw_GBps);
    j.push_back({{"name", name},
                 {"device", c.device.name},
                 {"bf16_tflops", c.device.peak_tflops.at(core::Dtype::Bf16)},
                 {"hbm_GiB", c.device.hbm_GiB},
                 {"devices_per_node", c.devices_per_node},
                 {"scale_up_domain", c.scale_up.domain_devices},
                 {"scale_up_GBps", c.scale_up.bw_GBps},
                 {"nic_GBps_per_device", c.nic_GBps_per_device()},
                 {"source", c.source}});
    text += fmt::format("{:<16} {:<20} {:>9.0f} {:>8.1f} {:>14} {:>9.1f}GB/s\n", name, c.device.name,
                        c.device.peak_tflops.at(core::Dtype::Bf16), c.device.hbm_GiB, up, c.nic_GBps_per_device());
  }
  std::cout << (json ? j.dump(2) + "\n" : text);
  return 0;
}

struct SweepArgs {
  std::string spec, db, out, csv, json;
  std::vector<std::string> sets, where, shards;
  int jobs = 0;
};

int cmd_sweep(const SweepArgs& a) {
  explore::SweepSpec spec;
  std::string file = "command line";
  if (!a.spec.empty()) {
    spec = explore::sweep_from_json(core::read_file(a.spec), a.spec);
    file = a.spec;
  }
  for (const auto& set : a.sets) explore::add_set(spec, set);
  for (const auto& w : a.where) spec.where.push_back(w);
  if (a.db.empty()) throw core::InputError("command line", "--db", "expected the sweep database to write");
  explore::SweepOptions o;
  auto [rank, ranks] = explore::launcher_rank();
  o.rank = rank;
  o.ranks = ranks;
  o.db = ranks > 1 ? explore::shard_path(a.db, rank, ranks) : a.db;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  o.jobs =
      a.jobs > 0 ? a.jobs : static_cast<int>(ranks > 1 ? std::max(1u, cores / static_cast<unsigned>(ranks)) : cores);
  o.progress_tty = ::isatty(STDERR_FILENO) != 0;
  o.progress = [](const std::string& line) {
    std::cerr << line;
    if (!line.empty() && line.back() != '\n' && line.front() != '\r') std::cerr << "\n";
    std::cerr.flush();
  };
  explore::SweepSummary sum = explore::run_sweep(spec, file, o);
  std::cout << fmt::format(
      "{}: {} points, {} already done, {} run ({} ok, {} infeasible, {} errors) in {:.1f} s{}\n", o.db, sum.points,
      sum.skipped, sum.ran, sum.ok, sum.infeasible, sum.errors, sum.seconds,
      sum.ran > 0 ? fmt::format(" ({:.1f} points/s)", static_cast<double>(sum.ran) / std::max(1e-9, sum.seconds)) : "");
  if (sum.interrupted) {
    std::cerr << "hzp: sweep interrupted; run the same command again to resume\n";
    return 130;
  }
  return 0;
}

int cmd_sweep_merge(const SweepArgs& a) {
  if (a.out.empty() || a.shards.empty()) {
    throw core::InputError("command line", "merge", "expected OUT.db and at least one shard");
  }
  auto [hash, spec_json] = explore::sweep_db_meta(a.shards.front());
  for (const auto& s : a.shards) {
    if (explore::sweep_db_meta(s).first != hash) {
      throw core::InputError(s, "meta.spec_sha256", "expected a shard of the same sweep as " + a.shards.front());
    }
  }
  explore::SweepDb out(a.out, hash, spec_json);
  int added = 0;
  for (const auto& s : a.shards) added += out.merge_from(s);
  std::cout << fmt::format("{}: merged {} rows from {} shard{}\n", a.out, added, a.shards.size(),
                           a.shards.size() == 1 ? "" : "s");
  return 0;
}

int cmd_sweep_export(const SweepArgs& a, bool force) {
  if (a.csv.empty() == a.json.empty())
    throw core::InputError("command line", "--csv", "expected --csv FILE or --json FILE");
  auto [hash, spec_json] = explore::sweep_db_meta(a.db);
  const std::string& path = a.csv.empty() ? a.json : a.csv;
  if (!force && std::filesystem::exists(path))
    throw core::InputError(path, "", "already exists; pass --force to overwrite it");
  explore::SweepDb db(a.db, hash, spec_json);
  auto rows = db.rows();
  if (!a.csv.empty()) {
    core::write_file_atomic(a.csv, explore::rows_to_csv(rows));
  } else {
    nlohmann::ordered_json j{{"spec_sha256", hash},
                             {"spec", nlohmann::ordered_json::parse(spec_json)},
                             {"hzp_version", core::version()},
                             {"rows", rows}};
    core::write_file_atomic(a.json, j.dump(1) + "\n");
  }
  std::cout << fmt::format("wrote {} ({} rows)\n", path, rows.size());
  return 0;
}

struct PlanArgs {
  std::string model = "llama3-70b";
  std::vector<std::string> clusters{"dgx-h100"};
  std::vector<int> gpus{1024};
  cli::OptionFlags batch_flags;    // the plan's batch and sequence length
  cli::OptionFlags overlay_flags;  // calibration and what-if changes, applied to every cluster
  double memory_limit_GiB = 0;
  double price = 0;
  std::string objective = "throughput";
  int top = 5;
  int jobs = 0;
  bool json = false;
  bool exhaustive = false;
};

struct ValidateArgs {
  std::string dir = "validation/cases";
  std::string filter;
  std::string calibration_dir = "validation/calibration";
  bool json = false;
  bool check = false;
  int jobs = 0;
};

int cmd_validate_cases(const ValidateArgs& a) {
  const auto cases = validation::load_cases(a.dir, a.filter);
  if (cases.empty()) throw core::InputError(a.dir, "--filter", fmt::format("expected cases matching '{}'", a.filter));
  const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!a.json) std::cerr << fmt::format("simulating {} cases on {} processes...\n", cases.size(), jobs);
  const auto scored = explore::run_cases(cases, jobs, a.calibration_dir);
  std::cout << (a.json ? explore::cases_json(scored) : explore::cases_table(scored));
  if (!a.check) return 0;
  int missed = 0;
  for (const auto& s : scored) missed += s.within() ? 0 : 1;
  if (missed > 0) std::cerr << fmt::format("hzp: {} of {} cases outside their tolerance\n", missed, scored.size());
  return missed > 0 ? 1 : 0;
}

struct CalibrateArgs {
  std::string cluster = "dgx-h100";
  std::vector<std::string> results;
  std::string out;
  bool force = false;
};

int cmd_calibrate(const CalibrateArgs& a) {
  const topologies::ClusterSpec cluster = topologies::load_cluster(a.cluster);
  if (!a.force && std::filesystem::exists(a.out)) {
    throw core::InputError(a.out, "--out", "expected a new file (it exists; --force replaces it)");
  }
  std::vector<std::pair<std::string, traces::BenchResults>> inputs;
  std::string measured;
  for (const auto& f : a.results) {
    const std::string text = core::read_file(f);
    inputs.emplace_back(f, traces::bench_results_from_json(text, f));
    const auto& p = inputs.back().second.provenance;
    std::string on;
    for (const char* k : {"gpu", "driver", "cuda", "cublas", "nccl", "host", "date"}) {
      if (p.contains(k)) on += fmt::format("{}{} {}", on.empty() ? "" : ", ", k, p.at(k));
    }
    measured += fmt::format(" {} ({} results, sha256 {}; {})", f, inputs.back().second.kind,
                            core::sha256_hex(text).substr(0, 16), on.empty() ? "no provenance" : on);
  }
  const validation::CalibrationFit fit = validation::fit_calibration(cluster, inputs);
  const std::string source = fmt::format("Fitted by hzp calibrate {} ({}) for {} from:{}.", core::version(),
                                         core::git_revision(), a.cluster, measured);
  core::write_file_atomic(a.out, validation::calibration_json(fit, source));
  for (const auto& n : fit.notes) std::cout << n << "\n";
  std::cout << fmt::format("wrote {} (use it with --calibration)\n", a.out);
  return 0;
}

struct CompareArgs {
  std::string predicted, measured, report;
  bool json = false;
};

int cmd_plot(const std::vector<std::string>& args);

int cmd_validate_compare(const CompareArgs& a) {
  const traces::Timeline p = traces::from_chrome_trace(core::read_file(a.predicted), a.predicted);
  const traces::Timeline m = traces::from_chrome_trace(core::read_file(a.measured), a.measured);
  const validation::Comparison c = validation::compare(p, m);
  if (a.json) {
    nlohmann::ordered_json j;
    j["hzp_version"] = core::version();
    j["schedule_sha256"] = p.header.schedule_sha256;
    j["step_s"] = {{"predicted", c.predicted_step.to_seconds()},
                   {"measured", c.measured_step.to_seconds()},
                   {"error", c.step_error()}};
    j["exposed_communication_s"] = {{"predicted", c.predicted_exposure.exposed.to_seconds()},
                                    {"measured", c.measured_exposure.exposed.to_seconds()}};
    j["overlap_fraction"] = {{"predicted", c.predicted_exposure.overlap()},
                             {"measured", c.measured_exposure.overlap()}};
    for (const auto& [k, e] : c.by_kind) {
      j["by_kind"][k] = {{"predicted_s", e.predicted.to_seconds()},
                         {"measured_s", e.measured.to_seconds()},
                         {"error", e.relative_error()}};
    }
    for (const auto& [k, e] : c.critical_by_kind) {
      j["critical_path_by_kind"][k] = {{"predicted_s", e.predicted.to_seconds()},
                                       {"measured_s", e.measured.to_seconds()}};
    }
    j["critical_path_divergence"] = c.divergence;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (a.report.empty()) {
    std::cout << validation::markdown_report(c, p, m, "");
    return 0;
  }
  // The picture first (beside the report, same name), then the report: a
  // failed picture leaves no report behind.
  const std::filesystem::path report(a.report);
  const std::filesystem::path picture = std::filesystem::path(report).replace_extension(".png");
  const int rc = cmd_plot({"compare", a.predicted, a.measured, "--out", picture.string()});
  if (rc != 0) return rc;
  core::write_file_atomic(a.report, validation::markdown_report(c, p, m, picture.filename().string()));
  std::cerr << fmt::format("wrote {} and {}\n", a.report, picture.string());
  return 0;
}

int cmd_plan(const PlanArgs& a) {
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
  q.base = sc.plan;
  q.overlay = sc.overlay();
  q.memory_limit_GiB = a.memory_limit_GiB;
  if (a.price > 0) q.price_per_gpu_hour = a.price;
  q.objective = a.objective;
  q.top = a.top;
  q.jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  q.exhaustive = a.exhaustive;
  explore::PlanSearch r = explore::search_plans(q);
  nlohmann::ordered_json j{{"hzp_version", core::version()},
                           {"git_revision", core::git_revision()},
                           {"model", q.model},
                           {"objective", q.objective},
                           {"candidates", r.candidates},
                           {"pruned_by_memory_bound", r.pruned_memory},
                           {"pruned_by_compute_bound", r.pruned_bound},
                           {"screened", r.screened},
                           {"simulated_exactly", r.exact},
                           {"seconds", r.seconds},
                           {"candidates_per_second", r.candidates_per_second()},
                           {"plans", nlohmann::ordered_json::array()}};
  std::string text = fmt::format(
      "hzp plan: {} candidates ({} pruned by the memory bound, {} by the compute bound, {} screened on reduced-layer "
      "models, {} simulated exactly) in {:.2f} s = {:.0f} candidates/s\n\n",
      r.candidates, r.pruned_memory, r.pruned_bound, r.screened, r.exact, r.seconds, r.candidates_per_second());
  text += fmt::format("{:>3} {:<16} {:>6}  {:<44} {:>8} {:>10} {:>6} {:>9} {:>9}  {}\n", "#", "cluster", "gpus", "plan",
                      "step s", "tokens/s", "MFU", "mem GiB", "$/Mtok", "bottleneck");
  int rank = 0;
  for (const auto& c : r.best) {
    ++rank;
    text +=
        fmt::format("{:>3} {:<16} {:>6}  {:<44} {:>8.3f} {:>10.0f} {:>5.1f}% {:>9.1f} {:>9}  {}\n", rank, c.cluster,
                    c.gpus, explore::describe_plan(c), c.step_s, c.tokens_per_s, 100 * c.mfu, c.peak_reserved_GiB,
                    c.usd_per_million_tokens ? fmt::format("{:.3f}", *c.usd_per_million_tokens) : "n/a", c.bottleneck);
    j["plans"].push_back(
        {{"cluster", c.cluster},
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
         {"ep", c.options.ep},
         {"micro_batch", c.options.micro_batch},
         {"recompute", plan::to_string(c.options.recompute)},
         {"step_time_s", c.step_s},
         {"tokens_per_s", c.tokens_per_s},
         {"mfu", c.mfu},
         {"peak_reserved_GiB", c.peak_reserved_GiB},
         {"usd_per_million_tokens", c.usd_per_million_tokens ? nlohmann::ordered_json(*c.usd_per_million_tokens)
                                                             : nlohmann::ordered_json(nullptr)},
         {"bottleneck", c.bottleneck}});
  }
  if (r.best.empty()) text += "(no plan fits the memory budget)\n";
  std::cout << (a.json ? j.dump(2) + "\n" : text);
  return r.best.empty() ? kExitInfeasible : 0;
}

int cmd_plot(const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3", "-"};
  argv.insert(argv.end(), args.begin(), args.end());
  const core::ExitStatus st = core::run_program(
      argv, cli::plot_script(),
      "hzp: error: command line: plot: expected python3 with matplotlib (python3-matplotlib)");
  if (st.signaled) return kExitInternal;
  return st.code == 127 ? kExitBadInput : st.code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"hzp: predict one training step of a transformer on a GPU cluster under a sharding plan"};
  app.set_version_flag("--version", fmt::format("hzp {} ({})", core::version(), core::git_revision()));
  app.require_subcommand(1);
  Options o;
  bool models_json = false, clusters_json = false;
  std::string model_template, cluster_template;

  auto* sim = app.add_subcommand("simulate", "simulate one training step and print its metrics");
  add_scenario_options(sim, o, /*engine=*/true);
  sim->add_option("--simgrid-cfg", o.sc.engine_options.simgrid_config,
                  "simgrid: a SimGrid setting KEY:VALUE applied after hzp's own (repeatable)");
  sim->add_flag("!--no-interference", o.sc.engine_options.interference,
                "simgrid: compute does not slow down while collectives share the device");
  sim->add_flag("--json", o.json, "print the summary as JSON");
  sim->add_option("--trace", o.trace, "write a Chrome/Perfetto trace (one strategy)");
  sim->add_option("--csv", o.csv, "write the timeline as CSV (one strategy)");
  sim->add_option("--summary", o.summary, "write the JSON summary to this file");
  sim->add_option("--out-dir", o.out_dir, "write every strategy's trace and summary.json here");
  sim->add_flag("--explain", o.explain, "print the groups, their placement and the per-step communication table");
  sim->add_flag("--adaptive", o.adaptive,
                "choose hzp group sizes (dense and expert) that minimise step time within the memory budget");
  sim->add_option("--memory-limit-GiB", o.memory_limit_GiB, "memory budget per device for --adaptive (default: HBM)");

  auto* sched = app.add_subcommand("schedule", "lower a plan to a Schedule and write it as canonical JSON");
  add_scenario_options(sched, o, /*engine=*/false);
  sched->add_option("--out", o.schedule_out, "the Schedule file to write")->required();

  auto* models_cmd = app.add_subcommand("models", "list the model catalog");
  models_cmd->add_flag("--json", models_json, "as JSON");
  models_cmd->add_option("--template", model_template, "print this catalog entry's JSON, to copy and edit");
  auto* clusters_cmd = app.add_subcommand("clusters", "list the cluster catalog");
  clusters_cmd->add_flag("--json", clusters_json, "as JSON");
  clusters_cmd->add_option("--template", cluster_template, "print this catalog entry's JSON, to copy and edit");
  std::string schema_name;
  bool schema_markdown = false;
  auto* schema_cmd = app.add_subcommand("schema", "print the JSON Schema of an input generated from the option tables");
  schema_cmd->add_option("name", schema_name, "plan | sweep | model | cluster | schedule")
      ->required()
      ->check(CLI::IsMember(explore::schema_names()));
  schema_cmd->add_flag("--markdown", schema_markdown, "as the field reference of docs/REFERENCE.md");

  SweepArgs sw;
  bool sweep_force = false;
  auto* sweep =
      app.add_subcommand("sweep", "simulate a grid of plans and clusters into an SQLite database (resumable)");
  sweep->add_option("--spec", sw.spec, "sweep spec (JSON: base, axes, where; see examples/sweeps/)");
  sweep->add_option("--set", sw.sets, "KEY=V1,V2,... (one value: fixed; several: an axis); repeatable")
      ->allow_extra_args(false);
  sweep->add_option("--where", sw.where, "filter, e.g. 'param_shard <= grad_shard' or 'tp * pp <= 8'; repeatable")
      ->allow_extra_args(false);
  sweep->add_option("--db", sw.db, "the SQLite database (under mpirun: one shard per rank, see `sweep merge`)");
  sweep->add_option("-j,--jobs", sw.jobs, "worker processes (default: the core count)");
  sweep->require_subcommand(0, 1);
  auto* merge = sweep->add_subcommand("merge", "join the shards of an mpirun sweep into one database");
  merge->add_option("out", sw.out, "the merged database")->required();
  merge->add_option("shards", sw.shards, "shard databases")->required();
  auto* exp = sweep->add_subcommand("export", "write a sweep database as CSV or JSON");
  exp->add_option("db", sw.db, "the sweep database")->required();
  exp->add_option("--csv", sw.csv, "CSV file to write");
  exp->add_option("--json", sw.json, "JSON file to write");
  exp->add_flag("--force", sweep_force, "overwrite an existing file");

  PlanArgs pa;
  auto* plan_cmd = app.add_subcommand("plan", "search strategies and parallelism for the best plans that fit");
  plan_cmd->add_option("--model", pa.model, "catalog name or model .json")->capture_default_str();
  plan_cmd->add_option("--cluster", pa.clusters, "catalog names or .json files (repeat or comma-separate)")
      ->delimiter(',')
      ->capture_default_str();
  plan_cmd->add_option("--gpus", pa.gpus, "GPU counts (e.g. 256,512,1024)")->delimiter(',')->capture_default_str();
  pa.batch_flags.add(plan_cmd, cli::plan_specs({"global_batch_tokens", "global_batch_sequences", "seq_len"}),
                     cli::option_defaults());
  pa.overlay_flags.add(plan_cmd, cli::scenario_specs(false, {"calibration", "nic_gbps", "oversubscription"}),
                       cli::option_defaults());
  plan_cmd->add_option("--memory-limit-GiB", pa.memory_limit_GiB, "memory budget per device (default: HBM)");
  plan_cmd->add_option("--price-per-gpu-hour", pa.price, "USD per GPU-hour (default: the cluster file's, if any)");
  plan_cmd->add_option("--objective", pa.objective, "throughput | cost")->capture_default_str();
  plan_cmd->add_option("--top", pa.top, "how many plans to print")->capture_default_str();
  plan_cmd->add_option("-j,--jobs", pa.jobs, "screening processes (default: the core count)");
  plan_cmd->add_flag("--json", pa.json, "as JSON");
  plan_cmd->add_flag("--exhaustive", pa.exhaustive, "screen every plan that passes the memory bound (no pruning)");

  ValidateArgs va;
  auto* validate = app.add_subcommand("validate", "predictions against measurements");
  validate->require_subcommand(1);
  auto* vcases = validate->add_subcommand("cases", "simulate every published measurement in validation/cases");
  vcases->add_option("--dir", va.dir, "directory of case files")->capture_default_str();
  vcases->add_option("--filter", va.filter, "only cases whose name or group contains this");
  vcases
      ->add_option("--calibration-dir", va.calibration_dir,
                   "one calibration per device: <dir>/<cluster's device name>.json, used when present")
      ->capture_default_str();
  vcases->add_flag("--json", va.json, "as JSON");
  vcases->add_flag("--check", va.check, "exit 1 when a case is outside its tolerance");
  vcases->add_option("-j,--jobs", va.jobs, "processes (default: the core count)");
  CalibrateArgs cal;
  auto* calibrate = app.add_subcommand("calibrate", "fit a calibration overlay from hzp-run microbenchmark results");
  calibrate->add_option("--cluster", cal.cluster, "the cluster the measurements were taken on (catalog or .json)")
      ->capture_default_str();
  calibrate->add_option("results", cal.results, "results of hzp-run bench gemm|collectives|overlap (.json)")
      ->required();
  calibrate->add_option("--out", cal.out, "the calibration overlay to write")->required();
  calibrate->add_flag("--force", cal.force, "replace --out if it exists");
  CompareArgs ca;
  auto* vcompare = validate->add_subcommand("compare", "two traces of the same Schedule: predicted against measured");
  vcompare->add_option("predicted", ca.predicted, "predicted trace (.json from --trace)")->required();
  vcompare->add_option("measured", ca.measured, "measured trace (.json, e.g. from hzp-run)")->required();
  vcompare->add_option("--report", ca.report, "write a Markdown report (and a .png beside it) instead of printing");
  vcompare->add_flag("--json", ca.json, "as JSON");

  std::vector<std::string> plot_args;
  auto* plot =
      app.add_subcommand("plot", "draw a sweep heatmap or scaling curve, or a trace's timeline or memory (PNG/SVG)");
  plot->allow_extras();
  plot->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "hzp: error: command line: " << e.what() << " (see hzp --help)\n";
    return kExitBadInput;
  }

  try {
    if (sim->parsed()) return cmd_simulate(o, command_line);
    if (sched->parsed()) return cmd_schedule(o, command_line);
    if (models_cmd->parsed() && !model_template.empty()) {
      std::cout << models::model_text(model_template).text;
      return 0;
    }
    if (clusters_cmd->parsed() && !cluster_template.empty()) {
      std::cout << topologies::cluster_text(cluster_template).first;
      return 0;
    }
    if (models_cmd->parsed()) return cmd_models(models_json);
    if (clusters_cmd->parsed()) return cmd_clusters(clusters_json);
    if (schema_cmd->parsed()) {
      const nlohmann::ordered_json schema = explore::input_schema(schema_name);
      std::cout << (schema_markdown ? cli::schema_reference(schema) : schema.dump(2) + "\n");
      return 0;
    }
    if (merge->parsed()) return cmd_sweep_merge(sw);
    if (exp->parsed()) return cmd_sweep_export(sw, sweep_force);
    if (sweep->parsed()) return cmd_sweep(sw);
    if (plan_cmd->parsed()) return cmd_plan(pa);
    if (vcases->parsed()) return cmd_validate_cases(va);
    if (vcompare->parsed()) return cmd_validate_compare(ca);
    if (calibrate->parsed()) return cmd_calibrate(cal);
    if (plot->parsed()) return cmd_plot(plot->remaining());
  } catch (const core::ProblemError& e) {
    // A library check names option keys: a plan file's keys, or the flags.
    const bool file = g_plan_source != "command line";
    std::cerr << "hzp: error: " << g_plan_source << ": "
              << core::one_line(core::join_problems(e.problems(), [file](const std::string& field) {
                   return file && plan::find_plan_option(field) ? field : cli::flag_for_field(field);
                 }))
              << "\n";
    return kExitBadInput;
  } catch (const core::InputError& e) {
    std::cerr << "hzp: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const core::InfeasibleError& e) {
    std::cerr << "hzp: infeasible: " << e.what() << "\n";
    return kExitInfeasible;
  } catch (const std::exception& e) {
    std::cerr << fmt::format(
        "hzp: internal error: {}\nThis is a bug in hzp {} ({}); please report it with the command line above.\n",
        e.what(), core::version(), core::git_revision());
    return kExitInternal;
  }
  return kExitInternal;
}
