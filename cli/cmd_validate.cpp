// `hzp validate cases|compare`, `hzp calibrate` and `hzp plot`: predictions
// against measurements, device overlays fitted from microbenchmarks, pictures.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/plot.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "core/subprocess.hpp"
#include "explore/cases.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/bench_results.hpp"
#include "traces/timeline.hpp"
#include "validation/calibrate.hpp"
#include "validation/collective_cases.hpp"
#include "validation/compare.hpp"
#include "validation/expected_error.hpp"
#include "validation/nccl_tests_log.hpp"

namespace hzp::cli {
namespace {

// A project file by its path in the repository: as given where it exists
// from here, else in the source tree this hzp was built from (so that
// `validate` finds the project's cases from any working directory).
std::string project_path(const std::string& rel) {
  if (std::filesystem::exists(rel)) return rel;
  const std::string in_source = std::string(HZP_SOURCE_DIR) + "/" + rel;
  return std::filesystem::exists(in_source) ? in_source : rel;
}

struct ValidateArgs {
  std::string dir = "validation/cases";
  bool dir_given = false, calibration_dir_given = false;
  std::vector<std::string> filters;
  std::string calibration_dir = "validation/calibration";
  bool json = false;
  bool check = false;
  std::string baseline = "validation/cases_baseline.json";
  bool baseline_given = false;
  std::string write_baseline;
  std::string expected_error = "validation/expected_error.json";
  bool expected_error_given = false;
  std::string write_expected_error;
  int jobs = 0;
};

// The known misses --check holds the cases to: the file given, or the
// default one where it exists (a case directory of one's own has none).
validation::MissBaseline load_baseline(const ValidateArgs& a) {
  if (!a.baseline_given && !std::filesystem::exists(a.baseline)) return {};
  return validation::miss_baseline_from_json(core::read_file(a.baseline), a.baseline);
}

std::string baseline_json(const validation::MissBaseline& b) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["note"] =
      "The validation cases outside their tolerance (their measurement's noise) and their signed error when this "
      "file was written. `hzp validate cases --check` fails on a case outside its tolerance that is not listed, or "
      "a listed one whose |error| grew by more than one percentage point. Rewrite it with `hzp validate cases "
      "--write-baseline validation/cases_baseline.json` and review the diff.";
  j["hzp_version"] = core::version();
  j["git_revision"] = core::git_revision();
  auto& m = j["misses"] = nlohmann::ordered_json::object();
  for (const auto& [name, e] : b.errors) m[name] = std::round(e * 1e4) / 1e4;
  return j.dump(2) + "\n";
}

int cmd_validate_cases(ValidateArgs& a) {
  // The project's own files unless given: found from any working directory.
  const bool own_cases = !a.dir_given;
  if (!a.dir_given) a.dir = project_path(a.dir);
  if (!a.calibration_dir_given) a.calibration_dir = project_path(a.calibration_dir);
  if (!a.baseline_given) a.baseline = project_path(a.baseline);
  if (!a.expected_error_given) a.expected_error = project_path(a.expected_error);
  if (!a.write_baseline.empty() && !a.filters.empty()) {
    throw core::InputError(a.write_baseline, "--write-baseline", "expected every case (no --filter)");
  }
  if (!a.write_expected_error.empty() && !a.filters.empty()) {
    throw core::InputError(a.write_expected_error, "--write-expected-error", "expected every case (no --filter)");
  }
  const validation::MissBaseline baseline = a.check ? load_baseline(a) : validation::MissBaseline{};
  const auto cases = validation::load_cases(a.dir, a.filters);
  if (cases.empty()) {
    throw core::InputError(a.dir, "--filter",
                           fmt::format("expected cases matching '{}'", fmt::join(a.filters, "' or '")));
  }
  const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!a.json) std::cerr << fmt::format("simulating {} cases on {} processes...\n", cases.size(), jobs);
  const auto scored = explore::run_cases(cases, jobs, a.calibration_dir);
  std::cout << (a.json ? explore::cases_json(scored) : explore::cases_table(scored));
  if (!a.write_baseline.empty()) {
    core::write_file_atomic(a.write_baseline, baseline_json(validation::misses_of(scored)));
  }
  const auto checked = validation::checked_runs(scored);
  if (!a.write_expected_error.empty()) {
    core::write_file_atomic(
        a.write_expected_error,
        validation::checked_runs_json(checked, fmt::format("hzp validate cases, {} ({}), {} cases", core::version(),
                                                           core::git_revision(), scored.size())));
  }
  if (!a.check) return 0;
  // The expected errors hzp prints must be the model's as it is now: checked
  // where every case ran and the table is the one of these cases (the
  // project's, or one named with --expected-error).
  std::vector<std::string> stale;
  const bool own_table = a.expected_error_given || own_cases;
  if (a.filters.empty() && own_table && std::filesystem::exists(a.expected_error)) {
    stale = validation::stale_checked_runs(
        validation::checked_runs_from_json(core::read_file(a.expected_error), a.expected_error), checked);
  }
  int missed = 0, recorded = 0;
  for (const auto& s : scored) {
    missed += s.within() ? 0 : 1;
    recorded += !s.within() && baseline.errors.contains(s.name) ? 1 : 0;
  }
  const validation::BaselineCheck c = validation::check_misses(scored, baseline);
  for (const auto& n : c.notes) std::cerr << "hzp: note: " << n << "\n";
  for (const auto& f : c.failures) std::cerr << "hzp: " << f << "\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(stale.size(), 5); ++i) {
    std::cerr << fmt::format("hzp: {} is stale: {}\n", a.expected_error, stale[i]);
  }
  if (!stale.empty()) {
    std::cerr << fmt::format("hzp: {} is stale in {} run(s): rewrite it with --write-expected-error {}\n",
                             a.expected_error, stale.size(), a.expected_error);
  }
  std::cerr << fmt::format("hzp: {} of {} cases outside their tolerance, {} of them recorded misses ({})\n", missed,
                           scored.size(), recorded, baseline.errors.empty() ? "no baseline" : a.baseline);
  return c.failures.empty() && stale.empty() ? 0 : kExitValidationMiss;
}

struct CollectivesArgs {
  std::string dir = "validation/collectives";
  bool dir_given = false;
  std::string filter;
  bool rows = false;
  bool json = false;
  bool check = false;
};

int cmd_validate_collectives(CollectivesArgs& a) {
  if (!a.dir_given) a.dir = project_path(a.dir);
  const auto cases = validation::load_collective_cases(a.dir, a.filter);
  if (cases.empty()) throw core::InputError(a.dir, "--filter", fmt::format("expected cases matching '{}'", a.filter));
  std::vector<validation::ScoredCollective> scored;
  for (const auto& c : cases) scored.push_back(validation::score_collective_case(c));
  std::cout << (a.json ? validation::collectives_json(scored) : validation::collectives_table(scored, a.rows));
  if (!a.check) return 0;
  int missed = 0;
  for (const auto& f : validation::summarize_collectives(scored)) missed += f.within() ? 0 : 1;
  if (missed > 0) std::cerr << fmt::format("hzp: {} fabric(s) outside 15 % (busbw) / 25 % (time)\n", missed);
  return missed > 0 ? kExitValidationMiss : 0;
}

struct CalibrateArgs {
  std::string cluster = "dgx-h100";
  std::vector<std::string> results;
  std::string out;
  bool force = false;
};

// What `hzp calibrate` reads: hzp-run bench results, a collective validation
// case (a transcribed nccl-tests curve), or a raw nccl-tests log.
traces::BenchResults read_measurements(const std::string& text, const std::string& file,
                                       const topologies::ClusterSpec& cluster) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') {
    return validation::bench_results_from_nccl_tests(text, file, cluster.device.name);
  }
  const nlohmann::json j = core::parse_json(text, file);
  if (j.is_object() && j.contains("rows") && j.contains("op")) {
    const validation::CollectiveCase c = validation::collective_case_from_json(text, file);
    const double host_floor_us = c.gpus_per_process * cluster.device.collective_launch_latency_us;
    return validation::bench_results_from_case(c, cluster.device.name, host_floor_us);
  }
  return traces::bench_results_from_json(text, file);
}

int cmd_calibrate(const CalibrateArgs& a) {
  const topologies::ClusterSpec cluster = topologies::load_cluster(a.cluster);
  if (!a.force && std::filesystem::exists(a.out)) {
    throw core::InputError(a.out, "--out", "expected a new file (it exists; --force replaces it)");
  }
  std::vector<std::pair<std::string, traces::BenchResults>> inputs;
  std::string measured;
  for (const auto& f : a.results) {
    const std::string text = core::read_file(f);
    inputs.emplace_back(f, read_measurements(text, f, cluster));
    const auto& p = inputs.back().second.provenance;
    std::string on;
    for (const char* k : {"source", "gpu", "driver", "cuda", "cublas", "nccl", "host", "date"}) {
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
  bool force = false;
  bool accept_unreliable = false;  // compare a trace its run marked unreliable
};

// A trace whose run marked it unreliable (hzp-run on the wall clock, its
// host behind the Schedule) measures the host: refused unless asked for.
void check_reliable(const CompareArgs& a, const std::string& file, const traces::Timeline& t) {
  if (t.header.unreliable.empty() || a.accept_unreliable) return;
  throw core::InputError(file, "otherData.unreliable",
                         fmt::format("the run that wrote this trace marked it unreliable ({}); rerun it (hzp-run "
                                     "--clock virtual, or on an idle machine) or pass --accept-unreliable",
                                     t.header.unreliable));
}

int cmd_validate_compare(const CompareArgs& a) {
  const traces::Timeline p = traces::from_chrome_trace(core::read_file(a.predicted), a.predicted);
  const traces::Timeline m = traces::from_chrome_trace(core::read_file(a.measured), a.measured);
  check_reliable(a, a.predicted, p);
  check_reliable(a, a.measured, m);
  const validation::Comparison c = validation::compare(p, m);
  if (a.json) {
    nlohmann::ordered_json j;
    j["hzp_version"] = core::version();
    j["schedule_sha256"] = p.header.schedule_sha256;
    if (!p.header.unreliable.empty()) j["unreliable"]["predicted"] = p.header.unreliable;
    if (!m.header.unreliable.empty()) j["unreliable"]["measured"] = m.header.unreliable;
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
  if (a.report.empty() || a.report == "-") {
    std::cout << validation::markdown_report(c, p, m, "");
    return 0;
  }
  // The picture first (beside the report, same name), then the report: a
  // failed picture leaves no report behind.
  const std::filesystem::path report(a.report);
  const std::filesystem::path picture = std::filesystem::path(report).replace_extension(".png");
  if (!a.force && std::filesystem::exists(report)) {
    throw core::InputError(a.report, "", "already exists; pass --force to overwrite it");
  }
  std::vector<std::string> plot{"compare", a.predicted, a.measured, "--out", picture.string()};
  if (a.force) plot.emplace_back("--force");
  const int rc = run_plot(plot);
  if (rc != 0) return rc;
  core::write_file_atomic(a.report, validation::markdown_report(c, p, m, picture.filename().string()));
  std::cerr << fmt::format("wrote {} and {}\n", a.report, picture.string());
  return 0;
}

int run_cases(ValidateArgs& a) { return cmd_validate_cases(a); }
int run_calibrate(CalibrateArgs& a) { return cmd_calibrate(a); }
int run_collectives(CollectivesArgs& a) { return cmd_validate_collectives(a); }
int run_compare(CompareArgs& a) { return cmd_validate_compare(a); }

class PlotCommand : public Command {
 public:
  explicit PlotCommand(CLI::App* app) : app_(app) {}
  [[nodiscard]] bool parsed() const override { return app_->parsed(); }
  int run() override { return run_plot(app_->remaining()); }

 private:
  CLI::App* app_;
};

}  // namespace

int run_plot(const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3", "-"};
  argv.insert(argv.end(), args.begin(), args.end());
  const core::ExitStatus st = core::run_program(
      argv, plot_script(), "hzp: error: command line: plot: expected python3 with matplotlib (python3-matplotlib)");
  if (st.signaled) return kExitInternal;
  return st.code == 127 ? kExitBadInput : st.code;
}

namespace {

void add_validate_cases(CLI::App* validate, Commands& out) {
  auto* cases = validate->add_subcommand("cases", "simulate every published measurement in validation/cases");
  auto vc = std::make_unique<SimpleCommand<ValidateArgs>>(cases, run_cases);
  ValidateArgs& va = vc->args;
  cases->add_option("--dir", va.dir, "directory of case files")->capture_default_str()->each([&va](const std::string&) {
    va.dir_given = true;
  });
  cases->add_option("--filter", va.filters, "only cases whose name or group contains this (repeat: any of them)");
  cases
      ->add_option(
          "--calibration-dir", va.calibration_dir,
          "calibrations: <dir>/<device name>.<stack>.json (fitted under that stack), else <dir>/<device name>.json")
      ->capture_default_str()
      ->each([&va](const std::string&) { va.calibration_dir_given = true; });
  cases->add_flag("--json", va.json, "as JSON");
  cases->add_flag("--check", va.check,
                  "exit 4 when a case is outside its tolerance and not a recorded miss, or a recorded miss got worse");
  cases->add_option("--baseline", va.baseline, "the recorded misses --check allows (used where it exists unless given)")
      ->capture_default_str()
      ->each([&va](const std::string&) { va.baseline_given = true; });
  cases
      ->add_option("--write-expected-error", va.write_expected_error,
                   "write every speed case's error with its device family, stack and GPU count (the expected "
                   "error hzp prints beside a prediction)")
      ->check(file_name());
  cases
      ->add_option("--expected-error", va.expected_error,
                   "the recorded expected errors --check holds current (used where it exists)")
      ->capture_default_str()
      ->each([&va](const std::string&) { va.expected_error_given = true; });
  cases->add_option("--write-baseline", va.write_baseline, "write the cases outside their tolerance as a baseline")
      ->check(file_name());
  cases->add_option("-j,--jobs", va.jobs, "processes (default: the core count)")->check(jobs());
  out.push_back(std::move(vc));
}

}  // namespace

void add_validate_commands(CLI::App& app, Commands& out) {
  auto* validate = app.add_subcommand("validate", "predictions against measurements");
  validate->require_subcommand(1);
  add_validate_cases(validate, out);

  auto* coll =
      validate->add_subcommand("collectives", "the collective model against nccl-tests in validation/collectives");
  auto kv = std::make_unique<SimpleCommand<CollectivesArgs>>(coll, run_collectives);
  CollectivesArgs& ka = kv->args;
  coll->add_option("--dir", ka.dir, "directory of collective cases")
      ->capture_default_str()
      ->each([&ka](const std::string&) { ka.dir_given = true; });
  coll->add_option("--filter", kv->args.filter, "only cases whose id contains this");
  coll->add_flag("--rows", kv->args.rows, "every measured row beside its prediction");
  coll->add_flag("--json", kv->args.json, "cases and the per-fabric summary as JSON");
  coll->add_flag("--check", kv->args.check, "exit 4 when a fabric's mean error is outside 15 % / 25 %");
  out.push_back(std::move(kv));

  auto* compare = validate->add_subcommand("compare", "two traces of the same Schedule: predicted against measured");
  auto cc = std::make_unique<SimpleCommand<CompareArgs>>(compare, run_compare);
  compare->add_option("predicted", cc->args.predicted, "predicted trace (.json from --trace)")->required();
  compare->add_option("measured", cc->args.measured, "measured trace (.json, e.g. from hzp-run)")->required();
  compare
      ->add_option("--report", cc->args.report,
                   "write a Markdown report (and a .png beside it) instead of printing; - prints it (no picture)")
      ->check(file_name());
  compare->add_flag("--json", cc->args.json, "as JSON");
  compare->add_flag("--force", cc->args.force, "replace the report and its picture if they exist");
  compare->add_flag("--accept-unreliable", cc->args.accept_unreliable,
                    "compare a trace its run marked unreliable (hzp-run's host fell behind), flagged in the output");
  out.push_back(std::move(cc));

  auto* calibrate =
      app.add_subcommand("calibrate", "fit a calibration overlay from hzp-run microbenchmarks or nccl-tests results");
  auto kc = std::make_unique<SimpleCommand<CalibrateArgs>>(calibrate, run_calibrate);
  CalibrateArgs& cal = kc->args;
  calibrate->add_option("--cluster", cal.cluster, "the cluster the measurements were taken on (catalog or .json)")
      ->capture_default_str();
  calibrate
      ->add_option("results", cal.results,
                   "results of hzp-run bench gemm|collectives|overlap (.json), nccl-tests logs, or collective cases "
                   "(validation/collectives/*.json)")
      ->required();
  calibrate->add_option("--out", cal.out, "the calibration overlay to write")->required()->check(file_name());
  calibrate->add_flag("--force", cal.force, "replace --out if it exists");
  out.push_back(std::move(kc));

  auto* plot =
      app.add_subcommand("plot", "draw a sweep heatmap or scaling curve, or a trace's timeline or memory (PNG/SVG)");
  plot->allow_extras();
  plot->prefix_command();
  plot->footer(
      "subcommands (each with --help):\n"
      "  heatmap DB --x KEY --y KEY [--metric COLUMN] --out FILE   a sweep's metric over two keys\n"
      "  scaling DB [--x gpus] --out FILE                        tokens/s and MFU against ideal scaling\n"
      "  timeline TRACE [--program N] --out FILE                 one rank class's streams over the step\n"
      "  memory TRACE [--hbm-GiB X] --out FILE                   memory in use over the step, and the HBM\n"
      "  compare PREDICTED MEASURED [--program N] --out FILE     two traces of one Schedule\n"
      "  collectives LOG... [--mark N] --out FILE                nccl-tests logs' bus bandwidth");
  out.push_back(std::make_unique<PlotCommand>(plot));
}

}  // namespace hzp::cli
