// hzp-run SCHEDULE.json: executes a Schedule (the identical one the engines
// simulate) and writes what it measured as a Timeline. Backends: `host`
// (CPU threads, durations from the performance model; what CI runs) and
// `cuda` (GPUs, when built with CUDA and NCCL and a device is present).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <numeric>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/schedule_check.hpp"
#include "runtime/executor.hpp"
#include "runtime/host/host_backend.hpp"
#include "runtime/launch.hpp"
#include "runtime/platform_info.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/timeline.hpp"

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitAborted = 3;

struct Args {
  std::string schedule;
  std::string backend = "host";
  std::string cluster;  // default: the Schedule's
  double step_seconds = 2.0;
  int warmup = 1;
  int steps = 3;
  std::string trace;
  double watchdog_s = 30;
  bool skip_check = false;
  bool force = false;
};

double span_s(const hzp::core::Schedule& s, const std::vector<std::vector<std::vector<hzp::core::OpTime>>>& times) {
  std::int64_t lo = INT64_MAX, hi = 0;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    for (std::size_t k = 0; k < s.programs[p].streams.size(); ++k) {
      for (std::size_t i = 0; i < s.programs[p].streams[k].ops.size(); ++i) {
        const auto kind = s.programs[p].streams[k].ops[i].kind;
        if (kind == hzp::core::OpKind::Compute || kind == hzp::core::OpKind::Collective ||
            kind == hzp::core::OpKind::Send || kind == hzp::core::OpKind::Recv) {
          lo = std::min(lo, times[p][k][i].start.count_ns());
          hi = std::max(hi, times[p][k][i].end.count_ns());
        }
      }
    }
  }
  return hi > lo ? static_cast<double>(hi - lo) * 1e-9 : 0.0;
}

int run_host(const Args& a, const hzp::core::Schedule& s, const std::string& command_line) {
  using namespace hzp;
  const topologies::ClusterSpec cluster = topologies::load_cluster(a.cluster.empty() ? s.step.cluster : a.cluster);
  const topologies::PerfModel pm(topologies::Topology(cluster, s.step.world_size));
  std::vector<std::size_t> all(s.programs.size());
  std::iota(all.begin(), all.end(), 0);
  // The first warm-up step runs in real time (scale 1) and sets the scale at
  // which the others last about --step-seconds of wall time each.
  runtime::HostOptions o;
  o.watchdog = std::chrono::milliseconds(static_cast<std::int64_t>(a.watchdog_s * 1000));
  double scale = 1.0;
  struct Step {
    double seconds;
    std::size_t late;
    traces::TimelineRecorder timeline;
  };
  std::vector<Step> measured;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    o.time_scale = scale;
    runtime::HostBackend backend(s, pm, o);
    runtime::execute(s, all, backend);
    const double step = span_s(s, backend.times());
    if (i == 0 && step > 0) scale = a.step_seconds / step;
    std::cerr << fmt::format("hzp-run: step {} of {} ({}): {:.6f} s, {} late ops\n", i + 1, a.warmup + a.steps,
                             i < a.warmup ? "warm-up" : "timed", step, backend.late_ops());
    if (i < a.warmup) continue;
    Step st{step, backend.late_ops(), {}};
    traces::TraceHeader h;
    h.schedule_sha256 = core::schedule_hash(s);
    h.schedule_name = s.name;
    h.engine = "host";
    h.engine_detail = fmt::format("host backend, {} rank classes, time scale {:.4g}, {} late ops", s.programs.size(),
                                  scale, backend.late_ops());
    h.hzp_version = core::version();
    h.git_revision = core::git_revision();
    h.command_line = command_line;
    h.schedule_provenance_json = s.provenance_json;
    backend.emit(h, st.timeline);
    measured.push_back(std::move(st));
  }
  std::vector<std::size_t> order(measured.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto x, auto y) { return measured[x].seconds < measured[y].seconds; });
  const Step& median = measured[order[order.size() / 2]];
  std::cout << fmt::format("{}: {} timed steps on the host backend: median {:.6f} s (min {:.6f}, max {:.6f})\n", s.name,
                           measured.size(), median.seconds, measured[order.front()].seconds,
                           measured[order.back()].seconds);
  if (!a.trace.empty()) {
    core::write_file_atomic(a.trace, traces::to_chrome_trace(median.timeline.timeline()));
    std::cout << fmt::format("wrote {} (the median step)\n", a.trace);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hzp;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"hzp-run: execute a Schedule and measure it (the same Timeline format as the simulator)"};
  Args a;
  app.add_option("schedule", a.schedule, "Schedule JSON (hzp schedule --out)")->required();
  app.add_option("--backend", a.backend, "host (CPU threads, model durations) | cuda (GPUs)")->capture_default_str();
  app.add_option("--cluster", a.cluster, "host backend: cluster for the performance model (default: the Schedule's)");
  app.add_option("--step-seconds", a.step_seconds, "host backend: wall seconds a timed step should take")
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps (the median is reported)")->capture_default_str();
  app.add_option("--trace", a.trace, "write the median step's Timeline (Chrome trace JSON)");
  app.add_option("--watchdog-s", a.watchdog_s, "abort when no op finishes for this long")->capture_default_str();
  app.add_flag("--skip-check", a.skip_check, "run without checking the Schedule first (to debug hangs)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "hzp-run: error: command line: " << e.what() << "\n";
    return kExitBadInput;
  }
  try {
    if (a.warmup < 1 || a.steps < 1)
      throw core::InputError("command line", "--steps", "expected --warmup and --steps >= 1");
    if (!(a.step_seconds > 0)) throw core::InputError("command line", "--step-seconds", "expected a positive number");
    const core::Schedule s = core::schedule_from_json(core::read_file(a.schedule), a.schedule);
    if (!a.skip_check) core::check_schedule(s);
    const runtime::LaunchInfo launch = runtime::detect_launch([](const char* n) { return std::getenv(n); });
    if (a.backend == "host") {
      if (launch.world > 1) {
        throw core::InputError("environment", launch.launcher,
                               "expected one process: the host backend runs every rank class itself");
      }
      return run_host(a, s, command_line);
    }
    if (a.backend == "cuda") {
      const runtime::PlatformInfo p = runtime::query_platform();
      if (!p.cuda_built) throw core::InputError("command line", "--backend", "expected host: built without CUDA");
      if (p.gpus.empty()) {
        throw core::InputError("command line", "--backend", fmt::format("expected a GPU for cuda: {}", p.error));
      }
      throw core::InputError("command line", "--backend", "expected host: the CUDA executor is not built yet");
    }
    throw core::InputError("command line", "--backend", fmt::format("expected host or cuda, got '{}'", a.backend));
  } catch (const core::InputError& e) {
    std::cerr << "hzp-run: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const core::ScheduleError& e) {
    std::cerr << "hzp-run: error: " << a.schedule << ": " << e.what() << "\n";
    return kExitBadInput;
  } catch (const runtime::RunError& e) {
    std::cerr << "hzp-run: aborted\n";
    return kExitAborted;
  }
}
