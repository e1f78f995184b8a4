// `hzp sweep` (run a grid into a database), `sweep merge` and `sweep export`.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/option_flags.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "explore/sweep.hpp"
#include "explore/sweep_db.hpp"

namespace hzp::cli {
namespace {

struct SweepArgs {
  std::string spec, db, out, csv, json;
  std::vector<std::string> sets, where, shards;
  int jobs = 0;
  bool force = false;
  explore::WorkLimits limits;
  // simulate's single-value flags: --model X is --set model=X.
  cli::OptionFlags scenario_flags, plan_flags;
};

// The single-value flags into the spec's base: over a value the spec file
// gives, never beside the same key's --set or axis.
void add_flag_values(const SweepArgs& a, explore::SweepSpec& spec) {
  std::vector<std::pair<std::string, nlohmann::json>> values;
  std::vector<core::Problem> problems = a.scenario_flags.values(values);
  for (auto& p : a.plan_flags.values(values)) problems.push_back(std::move(p));
  if (!problems.empty()) throw core::ProblemError(std::move(problems));
  for (const auto& [key, value] : values) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const bool axis = std::any_of(spec.axes.begin(), spec.axes.end(), [&](const auto& x) { return x.first == key; });
    const bool set =
        std::any_of(a.sets.begin(), a.sets.end(), [&](const std::string& s) { return s.rfind(key + "=", 0) == 0; });
    if (axis || set) {
      throw core::InputError("command line", flag, fmt::format("expected {} or --set {}=..., not both", flag, key));
    }
    spec.base[key] = nlohmann::ordered_json::parse(value.dump());
  }
}

int cmd_sweep(const SweepArgs& a) {
  explore::SweepSpec spec;
  std::string file = "command line";
  if (!a.spec.empty()) {
    spec = explore::sweep_from_json(core::read_file(a.spec), a.spec);
    file = a.spec;
  }
  add_flag_values(a, spec);
  for (const auto& set : a.sets) explore::add_set(spec, set);
  for (const auto& w : a.where) spec.where.push_back(w);
  if (a.db.empty()) throw core::InputError("command line", "--db", "expected the sweep database to write");
  explore::SweepOptions o;
  o.limits = a.limits;
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
  if (sum.rounded > 0) {
    std::cout << fmt::format(
        "{} point(s) ran a rounded global batch (--round-batch): columns batch_sequences and batch_rounded_from\n",
        sum.rounded);
  }
  // The reasons, grouped: how many points failed each way, and the first of them.
  constexpr std::size_t kGroupsShown = 10;
  for (std::size_t i = 0; i < std::min(kGroupsShown, sum.error_groups.size()); ++i) {
    const auto& g = sum.error_groups[i];
    std::cerr << fmt::format("sweep: {} point(s) failed{}: {}\n", g.points, g.points > 1 ? ", the first" : "", g.first);
  }
  if (sum.error_groups.size() > kGroupsShown) {
    std::cerr << fmt::format("sweep: and {} other kind(s) of error\n", sum.error_groups.size() - kGroupsShown);
  }
  if (sum.errors > 0) {
    std::cerr << fmt::format("sweep: hzp sweep export {} --csv FILE holds every point's reason\n", o.db);
  }
  if (sum.interrupted) {
    std::cerr << "hzp: sweep interrupted; run the same command again to resume\n";
    return 130;
  }
  // A sweep whose every point failed answered nothing: not a success.
  if (sum.ran > 0 && sum.errors == sum.ran) return kExitEveryPointFailed;
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

int cmd_sweep_export(const SweepArgs& a) {
  const bool force = a.force;
  if (a.csv.empty() == a.json.empty())
    throw core::InputError("command line", "--csv", "expected --csv FILE or --json FILE");
  auto [hash, spec_json] = explore::sweep_db_meta(a.db);
  const nlohmann::ordered_json spec = core::parse_ordered_json(spec_json, a.db + " (meta.spec)");
  const std::string& path = a.csv.empty() ? a.json : a.csv;
  if (!force && path != "-" && std::filesystem::exists(path))
    throw core::InputError(path, "", "already exists; pass --force to overwrite it");
  explore::SweepDb db(a.db, hash, spec_json);
  auto rows = db.rows();
  if (!a.csv.empty()) {
    core::write_file_atomic(a.csv, explore::rows_to_csv(rows));
  } else {
    nlohmann::ordered_json j{{"spec_sha256", hash}, {"spec", spec}, {"hzp_version", core::version()}, {"rows", rows}};
    core::write_file_atomic(a.json, j.dump(1) + "\n");
  }
  // "-" is standard output: the note goes to standard error, out of the data's way.
  (path == "-" ? std::cerr : std::cout) << fmt::format("wrote {} ({} rows)\n", path, rows.size());
  return 0;
}

int run_sweep_cmd(SweepArgs& a) { return cmd_sweep(a); }
int run_merge(SweepArgs& a) { return cmd_sweep_merge(a); }
int run_export(SweepArgs& a) { return cmd_sweep_export(a); }

// The three commands share one set of arguments.
class SweepCommand : public Command {
 public:
  SweepCommand(std::shared_ptr<SweepArgs> args, CLI::App* app, int (*fn)(SweepArgs&))
      : args_(std::move(args)), app_(app), run_(fn) {}
  [[nodiscard]] bool parsed() const override { return app_->parsed(); }
  int run() override { return run_(*args_); }

 private:
  std::shared_ptr<SweepArgs> args_;
  CLI::App* app_;
  int (*run_)(SweepArgs&);
};

}  // namespace

void add_sweep_commands(CLI::App& app, Commands& out) {
  auto a = std::make_shared<SweepArgs>();
  auto* sweep =
      app.add_subcommand("sweep", "simulate a grid of plans and clusters into an SQLite database (resumable)");
  sweep->add_option("--spec", a->spec, "sweep spec (JSON: base, axes, where; see examples/sweeps/)")
      ->check(file_name());
  sweep->add_option("--set", a->sets, "KEY=V1,V2,... (one value: fixed; several: an axis); repeatable")
      ->allow_extra_args(false);
  sweep
      ->add_option("--where", a->where,
                   "filter EXPR OP EXPR (keys, numbers, + - * / ( )), e.g. 'tp * pp <= 8' or 'tokens_per_gpu * gpus >= "
                   "16M'; repeatable")
      ->allow_extra_args(false);
  sweep->add_option("--db", a->db, "the SQLite database (under mpirun: one shard per rank, see `sweep merge`)")
      ->check(file_name());
  sweep->add_option("-j,--jobs", a->jobs, "worker processes (default: the core count)")->check(jobs());
  add_work_limits(sweep, a->limits, /*flows=*/true);
  a->scenario_flags.add(sweep, scenario_specs(true), option_defaults());
  a->plan_flags.add(sweep, plan_specs(), option_defaults());
  sweep->require_subcommand(0, 1);
  auto* merge = sweep->add_subcommand("merge", "join the shards of an mpirun sweep into one database");
  merge->add_option("out", a->out, "the merged database")->required();
  merge->add_option("shards", a->shards, "shard databases")->required();
  auto* exp = sweep->add_subcommand("export", "write a sweep database as CSV or JSON");
  exp->add_option("db", a->db, "the sweep database")->required();
  exp->add_option("--csv", a->csv, "CSV file to write")->check(file_name());
  exp->add_option("--json", a->json, "JSON file to write")->check(file_name());
  exp->add_flag("--force", a->force, "overwrite an existing file");
  out.push_back(std::make_unique<SweepCommand>(a, merge, run_merge));
  out.push_back(std::make_unique<SweepCommand>(a, exp, run_export));
  out.push_back(std::make_unique<SweepCommand>(a, sweep, run_sweep_cmd));
}

}  // namespace hzp::cli
