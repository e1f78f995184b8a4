// hzp-run's flags and the checks of its outputs (see run_args.hpp).
#include "runtime/run_args.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/options.hpp"
#include "runtime/host/host_backend.hpp"

namespace hzp::run_cli {
using core::file_name;
using core::integer_in;
using core::number_in;

// The run's Schedule and flags.
void add_run_options(CLI::App& app, Args& a) {
  app.add_option("schedule", a.schedule, "Schedule JSON (hzp schedule --out)");
  app.add_option("--backend", a.backend, "host (CPU threads, model durations) | cuda (GPUs)")->capture_default_str();
  app.add_option("--cluster", a.cluster, "cluster for the performance model (default: the Schedule's)");
  app.add_option("--clock", a.clock,
                 "host backend: wall (sleep each op's time, scaled to --step-seconds; a run with over 5 % of its "
                 "timed ops late is unreliable, exit 4) | virtual (time advanced by the backend: deterministic, "
                 "load-independent, equal to the analytic engine)")
      ->capture_default_str()
      ->check(CLI::IsMember(core::names(runtime::kHostClocks)));
  app.add_option("--step-seconds", a.step_seconds, "host backend, wall clock: wall seconds a timed step should take")
      ->capture_default_str()
      ->check(number_in(1e-3, 86400));
  app.add_option("--late-ms", a.late_ms,
                 "host backend: a worker waking later than this after an op's end counts the delay as real")
      ->capture_default_str()
      ->check(number_in(0, 60000));
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps (the median is reported)")->capture_default_str();
  app.add_option("--trace", a.trace, "write the median step's Timeline (Chrome trace JSON)")->check(file_name());
  app.add_option("--summary", a.summary, "write the steps, the median and the peak memory as JSON")->check(file_name());
  app.add_option("--watchdog-s", a.watchdog_s, "abort (exit 3) when no op is issued or finishes for this long")
      ->capture_default_str()
      ->check(number_in(0.1, 604800));
  app.add_flag("--skip-check", a.skip_check, "run without checking the Schedule first (to debug hangs)");
  app.add_flag("--force", a.force, "replace --trace and --summary if they exist");
  app.add_option("--local-gpus", a.local_gpus, "cuda: one process driving this many GPUs as ranks 0..N-1")
      ->check(integer_in(1, 4096));
  app.add_flag("--emulate-collectives", a.emulate,
               "cuda, one GPU: collectives as kernels on the NCCL channels' SMs lasting the model's time");
  app.add_option("--rank", a.rank, "with --emulate-collectives: the rank whose class to run")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 20));
  app.add_option("--nccl-channels", a.nccl_channels, "SMs an emulated collective occupies")
      ->capture_default_str()
      ->check(integer_in(1, 1024));
  app.add_option("--rendezvous", a.rendezvous, "a fresh shared directory for the NCCL id (torchrun-style launch)");
}

// The `bench` subcommand and its flags.
CLI::App* add_bench_command(CLI::App& app, BenchArgs& b) {
  auto* bench = app.add_subcommand("bench", "microbenchmarks for hzp calibrate (cuda backend)");
  bench->add_option("kind", b.kind, "gemm | collectives | overlap")->required();
  bench->add_option("--schedule", b.schedule, "gemm: every distinct GEMM shape of this Schedule (default: a grid)");
  bench->add_option("--out", b.out, "results JSON")->required()->check(file_name());
  bench->add_flag("--force", b.force, "replace --out if it exists");
  bench->add_option("--reps", b.reps, "timed repetitions (median)")->capture_default_str();
  bench->add_option("--ranks-per-node", b.ranks_per_node, "collectives: ranks per node")->capture_default_str();
  bench->add_option("--rendezvous", b.rendezvous, "collectives: shared directory for the NCCL id");
  bench->add_option("--cluster", b.cluster,
                    "name the results' device as this cluster's catalog device (what hzp calibrate expects)");
  bench->add_option("--channels", b.channels, "overlap: SM counts of the collective beside the GEMM")->delimiter(',');
  return bench;
}

void check_outputs(const Args& a, const BenchArgs& b, bool bench) {
  auto check_new = [](const std::string& path, bool force) {
    if (!path.empty() && !force && std::filesystem::exists(path)) {
      throw core::InputError(path, "", "already exists; pass --force to overwrite it");
    }
    core::require_writable_folder(path);
  };
  if (a.trace == "-" && a.summary == "-") {
    throw core::InputError("command line", "--summary",
                           "expected at most one of --trace and --summary on standard output");
  }
  if (bench) check_new(b.out, b.force);
  check_new(a.trace, a.force);
  check_new(a.summary, a.force);
}

}  // namespace hzp::run_cli
