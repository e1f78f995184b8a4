// hzp-run SCHEDULE.json: executes a Schedule (the identical one the engines
// simulate) and writes what it measured as a Timeline. Backends: `host`
// (CPU threads, durations from the performance model; what CI runs) and
// `cuda` (GPUs, when built with CUDA and NCCL and a device is present).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/options.hpp"
#include "runtime/executor.hpp"
#include "runtime/host/host_backend.hpp"
#include "runtime/launch.hpp"
#include "runtime/mpi.hpp"
#include "runtime/platform_info.hpp"
#include "runtime/run_args.hpp"
#include "schedule/check.hpp"
#include "topologies/cluster_spec.hpp"
#include "traces/bench_results.hpp"
#include "traces/timeline.hpp"
#ifdef HZP_HAVE_CUDA
#include <thread>

#include "runtime/cuda/cuda_backend.hpp"
#endif

namespace {

using namespace hzp::run_cli;

// Exit codes (README): 0 ok, 1 internal error, 2 bad input, 3 aborted (the
// watchdog, a device or NCCL failure), 4 unreliable (a wall-clock host run
// with more than kMaxLateFraction of its timed ops late; outputs written and marked).
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitAborted = 3;
constexpr int kExitUnreliable = 4;
hzp::traces::TraceHeader header(const hzp::core::Schedule& s, const std::string& engine, const std::string& detail,
                                const std::string& command_line) {
  hzp::traces::TraceHeader h;
  h.schedule_sha256 = hzp::core::schedule_hash(s);
  h.schedule_name = s.name;
  h.engine = engine;
  h.engine_detail = detail;
  h.hzp_version = hzp::core::version();
  h.git_revision = hzp::core::git_revision();
  h.command_line = command_line;
  h.schedule_provenance_json = s.provenance_json;
  return h;
}

// The --summary JSON: median step, every timed step, memory, and how far it can be trusted.
std::string summary_json(const hzp::core::Schedule& s, const std::string& backend, const std::vector<double>& steps,
                         double median, double peak_reserved_GiB, double peak_used_GiB,
                         const nlohmann::ordered_json& run) {
  nlohmann::ordered_json j;
  j["hzp_version"] = hzp::core::version();
  j["git_revision"] = hzp::core::git_revision();
  j["schedule"] = s.name;
  j["schedule_sha256"] = hzp::core::schedule_hash(s);
  j["backend"] = backend;
  j["steps_s"] = steps;
  j["median_step_s"] = median;
  j["peak_reserved_GiB"] = peak_reserved_GiB;
  j["peak_used_GiB"] = peak_used_GiB;
  for (const auto& [k, v] : run.items()) j[k] = v;
  return j.dump(2) + "\n";
}

// The step on the virtual clock: what sets the wall clock's time scale.
double virtual_step(const hzp::core::Schedule& s, const hzp::cost::PerfModel& pm, hzp::runtime::HostOptions o,
                    const std::vector<std::size_t>& programs) {
  o.clock = hzp::runtime::HostClock::Virtual;
  o.time_scale = 1.0;
  hzp::runtime::HostBackend backend(s, pm, o);
  hzp::runtime::execute(s, programs, backend);
  return hzp::runtime::measured_step(s, backend.times()).to_seconds();
}

int run_host(const Args& a, const hzp::core::Schedule& s, const std::string& command_line) {
  using namespace hzp;
  const topologies::ClusterSpec cluster = topologies::load_cluster(a.cluster.empty() ? s.step.cluster : a.cluster);
  const cost::PerfModel pm(topologies::Topology(cluster, s.step.world_size));
  std::vector<std::size_t> all(s.programs.size());
  std::iota(all.begin(), all.end(), 0);
  runtime::HostOptions o;
  o.clock = *runtime::parse_host_clock(a.clock);
  o.watchdog = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(a.watchdog_s));
  o.late = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double, std::milli>(a.late_ms));
  const bool wall = o.clock == runtime::HostClock::Wall;
  // Wall clock: the step on the virtual clock sets the scale at which each
  // step lasts about --step-seconds of wall time.
  if (wall) {
    const double step = virtual_step(s, pm, o, all);
    o.time_scale = step > 0 ? a.step_seconds / step : 1.0;
  }
  struct Step {
    double seconds;
    double peak_GiB;  // the most bytes the Schedule's buffers held at once (a rank class)
    traces::TimelineRecorder timeline;
  };
  std::vector<Step> measured;
  std::size_t late = 0, timed = 0;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    runtime::HostBackend backend(s, pm, o);
    runtime::execute(s, all, backend);
    const double step = runtime::measured_step(s, backend.times()).to_seconds();
    std::cerr << fmt::format("hzp-run: step {} of {} ({}): {:.6f} s, {} late ops\n", i + 1, a.warmup + a.steps,
                             i < a.warmup ? "warm-up" : "timed", step, backend.late_ops());
    if (i < a.warmup) continue;
    late += backend.late_ops();
    timed += backend.timed_ops();
    Step st{step, backend.peak().gib(), {}};
    const std::string detail =
        wall ? fmt::format("host backend, {} rank classes, wall clock, time scale {:.4g}, {} late ops",
                           s.programs.size(), o.time_scale, backend.late_ops())
             : fmt::format("host backend, {} rank classes, virtual clock", s.programs.size());
    if (!a.trace.empty()) backend.emit(header(s, "host", detail, command_line), st.timeline);
    measured.push_back(std::move(st));
  }
  std::vector<std::size_t> order(measured.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto x, auto y) { return measured[x].seconds < measured[y].seconds; });
  Step& median = measured[order[order.size() / 2]];
  std::cout << fmt::format(
      "{}: {} timed steps on the host backend ({} clock): median {:.6f} s (min {:.6f}, max {:.6f})\n", s.name,
      measured.size(), a.clock, median.seconds, measured[order.front()].seconds, measured[order.back()].seconds);
  // More late ops than kMaxLateFraction: the times measure the host, not the Schedule.
  std::string unreliable;
  if (timed > 0 && static_cast<double>(late) > runtime::kMaxLateFraction * static_cast<double>(timed)) {
    unreliable = fmt::format(
        "{} of {} timed ops ended late (over {:.0f} %): the host fell behind the wall clock, so the times measure "
        "the host; use --clock virtual, or an idle machine, a longer --step-seconds or a larger --late-ms",
        late, timed, 100 * runtime::kMaxLateFraction);
  }
  nlohmann::ordered_json run{
      {"clock", a.clock}, {"late_ops", late}, {"timed_ops", timed}, {"reliable", unreliable.empty()}};
  if (!unreliable.empty()) run["unreliable"] = unreliable;
  core::OutputSet out;
  if (!a.trace.empty()) {
    traces::Timeline t = median.timeline.take();
    t.header.unreliable = unreliable;
    out.add(a.trace, traces::to_chrome_trace(t, traces::peer_links(s)));
  }
  if (!a.summary.empty()) {
    std::vector<double> all_steps;
    for (const auto& m : measured) all_steps.push_back(m.seconds);
    out.add(a.summary, summary_json(s, "host", all_steps, median.seconds, median.peak_GiB, median.peak_GiB, run));
  }
  out.commit();
  if (!a.trace.empty()) std::cout << fmt::format("wrote {} (the median step)\n", a.trace);
  if (!unreliable.empty()) {
    std::cerr << "hzp-run: warning: unreliable: " << unreliable << "\n";
    return kExitUnreliable;
  }
  return 0;
}

#ifndef HZP_HAVE_CUDA
[[noreturn]] void refuse_without_cuda() {
  throw hzp::core::InputError("command line", "--backend", "expected host: built without CUDA");
}
#endif

#ifdef HZP_HAVE_CUDA
// "gpu H200, driver 13.0, ..." for a trace header.
std::string provenance_text(const std::map<std::string, std::string>& p) {
  std::string out;
  for (const auto& [k, v] : p) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k, v);
  return out;
}

// One rank on one GPU: communicators, backend, warm-up and timed steps; the
// median step (max across ranks) and this rank's trace of it.
int run_cuda_rank(const Args& a, const hzp::core::Schedule& s, const hzp::runtime::LaunchInfo& launch, int device,
                  const std::string& shared_id, const std::string& command_line) {
  using namespace hzp;
  const topologies::ClusterSpec cluster = topologies::load_cluster(a.cluster.empty() ? s.step.cluster : a.cluster);
  const cost::PerfModel pm(topologies::Topology(cluster, s.step.world_size));
  const int rank = a.emulate ? a.rank : launch.rank;
  const runtime::RankPlan plan = runtime::rank_plan(s, rank);
  runtime::cuda::use_device(device);
  std::unique_ptr<runtime::cuda::Communicators> comms;
  if (!a.emulate) comms = std::make_unique<runtime::cuda::Communicators>(s, launch, a.rendezvous, shared_id);
  runtime::cuda::CudaOptions o;
  o.device = device;
  o.emulate_collectives = a.emulate;
  o.nccl_channels = a.nccl_channels;
  o.watchdog = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(a.watchdog_s));
  runtime::cuda::CudaBackend backend(s, plan, pm, comms.get(), o);
  std::vector<double> steps;
  std::vector<traces::TimelineRecorder> timelines;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    if (comms) (void)runtime::cuda::world_max(*comms, 0.0);  // a barrier: every rank starts together
    backend.begin_step();
    runtime::execute(s, {plan.program}, backend);
    std::vector<std::vector<std::vector<core::OpTime>>> times(s.programs.size());
    times[plan.program] = backend.times();
    double step = runtime::measured_step(s, times).to_seconds();
    if (comms) step = runtime::cuda::world_max(*comms, step);
    if (rank == launch.rank || a.emulate) {
      std::cerr << fmt::format("hzp-run: rank {}: step {} of {} ({}): {:.6f} s (max across ranks)\n", rank, i + 1,
                               a.warmup + a.steps, i < a.warmup ? "warm-up" : "timed", step);
    }
    if (i < a.warmup) continue;
    steps.push_back(step);
    if (a.trace.empty()) continue;  // only a traced run keeps each step's Timeline
    traces::TimelineRecorder rec;
    backend.emit(header(s, "cuda",
                        fmt::format("cuda backend, rank {} of {} on GPU {}{}; {}", rank, s.step.world_size, device,
                                    a.emulate ? fmt::format(", collectives emulated on {} SMs", a.nccl_channels) : "",
                                    provenance_text(runtime::cuda::device_provenance(device))),
                        command_line),
                 rec);
    timelines.push_back(std::move(rec));
  }
  std::vector<std::size_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto x, auto y) { return steps[x] < steps[y]; });
  const std::size_t median = order[order.size() / 2];
  if (launch.rank == 0 || a.emulate) {
    std::cout << fmt::format(
        "{}: {} timed steps on {} GPU(s): median {:.6f} s (min {:.6f}, max {:.6f}); rank {} peak memory {:.2f} GiB "
        "reserved, {:.2f} GiB in use (the Schedule's buffers, from the pool)\n",
        s.name, steps.size(), a.emulate ? 1 : launch.world, steps[median], steps[order.front()], steps[order.back()],
        rank, backend.peak_reserved().gib(), backend.peak_used().gib());
  }
  if (!a.trace.empty()) {
    std::string path = a.trace;
    if (!a.emulate && launch.world > 1) path = fmt::format("{}.rank{}.json", a.trace, launch.rank);
    core::write_file_atomic(path, traces::to_chrome_trace(timelines[median].timeline(), traces::peer_links(s)));
  }
  if (!a.summary.empty() && (launch.rank == 0 || a.emulate)) {
    core::write_file_atomic(a.summary,
                            summary_json(s, "cuda", steps, steps[median], backend.peak_reserved().gib(),
                                         backend.peak_used().gib(), {{"clock", "device"}, {"reliable", true}}));
  }
  return 0;
}

// The machine's GPUs; none is one line naming --backend.
hzp::runtime::PlatformInfo require_gpu() {
  using namespace hzp;
  runtime::PlatformInfo p = runtime::query_platform();
  if (p.gpus.empty()) {
    throw core::InputError("command line", "--backend", fmt::format("expected a GPU for cuda: {}", p.error));
  }
  return p;
}

int run_cuda(const Args& a, const hzp::core::Schedule& s, const hzp::runtime::PlatformInfo& p,
             const std::string& command_line) {
  using namespace hzp;
  runtime::LaunchInfo launch = runtime::detect_launch([](const char* n) { return std::getenv(n); });
  if (a.emulate) {
    if (launch.world > 1) throw core::InputError("command line", "--emulate-collectives", "expected one process");
    return run_cuda_rank(a, s, launch, 0, "", command_line);
  }
  if (a.local_gpus > 0) {
    // One process, one thread per GPU, ranks 0..N-1.
    if (launch.world > 1) throw core::InputError("command line", "--local-gpus", "expected one process");
    if (a.local_gpus != s.step.world_size || a.local_gpus > static_cast<int>(p.gpus.size())) {
      throw core::InputError(
          "command line", "--local-gpus",
          fmt::format("expected the Schedule's {} ranks on at most {} GPUs", s.step.world_size, p.gpus.size()));
    }
    const std::string id = runtime::cuda::new_nccl_id();
    std::vector<std::thread> ranks;
    std::vector<int> rc(static_cast<std::size_t>(a.local_gpus), 0);
    std::vector<std::string> errors(rc.size());
    for (int r = 0; r < a.local_gpus; ++r) {
      ranks.emplace_back([&, r] {
        runtime::LaunchInfo l{"local", r, a.local_gpus, r};
        try {
          rc[static_cast<std::size_t>(r)] = run_cuda_rank(a, s, l, r, id, command_line);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
          rc[static_cast<std::size_t>(r)] = kExitAborted;
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (const auto& e : errors) {
      if (!e.empty()) throw runtime::RunError(e);
    }
    return *std::max_element(rc.begin(), rc.end());
  }
  if (launch.world != s.step.world_size) {
    throw core::InputError(
        "environment", launch.launcher,
        fmt::format("expected {} processes (the Schedule's ranks), got {}", s.step.world_size, launch.world));
  }
  return run_cuda_rank(a, s, launch, launch.local_rank, "", command_line);
}

int run_bench(const BenchArgs& b) {
  using namespace hzp;
  const runtime::PlatformInfo p = runtime::query_platform();
  if (p.gpus.empty()) throw core::InputError("command line", "bench", fmt::format("expected a GPU: {}", p.error));
  const runtime::LaunchInfo launch = runtime::detect_launch([](const char* n) { return std::getenv(n); });
  traces::BenchResults r;
  if (b.kind == "gemm") {
    std::vector<core::GemmShape> shapes;
    if (!b.schedule.empty()) {
      const core::Schedule s = core::schedule_from_json(core::read_file(b.schedule), b.schedule);
      for (const auto& prog : s.programs) {
        for (const auto& st : prog.streams) {
          for (const auto& op : st.ops) {
            if (op.kind == core::OpKind::Compute && op.compute().gemm &&
                std::find(shapes.begin(), shapes.end(), *op.compute().gemm) == shapes.end()) {
              shapes.push_back(*op.compute().gemm);
            }
          }
        }
      }
    } else {
      for (std::int64_t n : {1024, 2048, 4096, 8192, 16384}) shapes.push_back(core::GemmShape{n, n, n, 1});
    }
    r = runtime::cuda::bench_gemm(shapes, launch.local_rank, b.reps);
  } else if (b.kind == "collectives") {
    if (launch.world < 2) throw core::InputError("command line", "bench collectives", "expected >= 2 ranks (mpirun)");
    core::Schedule world;
    world.step.world_size = launch.world;
    world.name = "bench";
    core::Group g{0, core::GroupKind::World, {}};
    for (int i = 0; i < launch.world; ++i) g.ranks.push_back(i);
    world.groups.push_back(g);
    core::Program prog;
    prog.ranks = g.ranks;
    world.programs.push_back(prog);
    runtime::cuda::use_device(launch.local_rank);
    runtime::cuda::Communicators comms(world, launch, b.rendezvous);
    std::vector<std::int64_t> sizes;
    for (std::int64_t n = 1 << 10; n <= (1LL << 30); n *= 4) sizes.push_back(n);
    r = runtime::cuda::bench_collectives(comms, launch, b.ranks_per_node, sizes, launch.local_rank, b.reps);
    for (auto& c : r.collectives) c.seconds = runtime::cuda::world_max(comms, c.seconds);
    if (launch.rank != 0) return 0;
  } else if (b.kind == "overlap") {
    r = runtime::cuda::bench_overlap(nullptr, core::GemmShape{8192, 8192, 8192, 1}, 256LL << 20, b.channels,
                                     launch.local_rank, b.reps);
  } else {
    throw core::InputError("command line", "bench",
                           fmt::format("expected gemm, collectives or overlap, got '{}'", b.kind));
  }
  if (!b.cluster.empty()) {
    r.device = runtime::bench_device_name(r.provenance["gpu"], topologies::load_cluster(b.cluster).device.name);
  }
  core::write_file_atomic(b.out, traces::to_json(r));
  std::cout << fmt::format("wrote {} ({} results)\n", b.out, r.gemm.size() + r.collectives.size() + r.overlap.size());
  return 0;
}
#endif

// What the parsed command line asks for: the benchmarks, or the Schedule
// checked and run on a backend. Errors are thrown for main to report.
int run_parsed(const Args& args, [[maybe_unused]] const BenchArgs& b, bool bench, const std::string& command_line) {
  using namespace hzp;
  const runtime::LaunchInfo launch = runtime::detect_launch([](const char* n) { return std::getenv(n); });
  // Host backend under mpirun (MPI): every process runs every rank class;
  // process 0 alone writes the outputs.
  const bool host_mpi =
      args.backend == "host" && launch.world > 1 && launch.launcher == "mpirun" && runtime::mpi_built();
  Args a = args;
  if (host_mpi && launch.rank != 0) a.trace.clear(), a.summary.clear();
  check_outputs(a, b, bench);
  if (bench) {
#ifdef HZP_HAVE_CUDA
    return run_bench(b);
#else
    throw core::InputError("command line", "bench", "expected a build with CUDA (the benchmarks run on GPUs)");
#endif
  }
  if (a.schedule.empty()) throw core::InputError("command line", "schedule", "expected a Schedule file");
  if (a.warmup < 1 || a.steps < 1)
    throw core::InputError("command line", "--steps", "expected --warmup and --steps >= 1");
  // A run holds a few numbers a step, and with --trace each timed step's
  // Timeline until the median is known (issue 42, item 2): both bounded.
  if (a.warmup > kMaxSteps || a.steps > kMaxSteps) {
    throw core::InputError("command line", a.steps > kMaxSteps ? "--steps" : "--warmup",
                           fmt::format("expected at most {} steps", kMaxSteps));
  }
  if (!a.trace.empty() && a.steps > kMaxTracedSteps) {
    throw core::InputError("command line", "--steps",
                           fmt::format("expected at most {} timed steps with --trace (each step's Timeline is kept "
                                       "until the median is known), got {}",
                                       kMaxTracedSteps, a.steps));
  }
  if (!(a.step_seconds > 0)) throw core::InputError("command line", "--step-seconds", "expected a positive number");
  if (a.backend != "host" && a.clock != "wall") {
    throw core::InputError("command line", "--clock", "expected wall with --backend cuda (a GPU keeps its own time)");
  }
  // A backend this machine cannot run is refused before the Schedule is read
  // (a large one takes seconds to parse).
  if (a.backend != "host" && a.backend != "cuda") {
    throw core::InputError("command line", "--backend", fmt::format("expected host or cuda, got '{}'", a.backend));
  }
#ifdef HZP_HAVE_CUDA
  const runtime::PlatformInfo gpus = a.backend == "cuda" ? require_gpu() : runtime::PlatformInfo{};
#else
  if (a.backend == "cuda") refuse_without_cuda();
#endif
  const core::Schedule s = core::schedule_from_json(core::read_file(a.schedule), a.schedule);
  if (!a.skip_check) core::check_schedule(s);
  if (a.backend == "host") {
    if (host_mpi) {
      runtime::mpi_init();
      if (runtime::mpi_size() != launch.world) {
        throw core::InputError("environment", launch.launcher,
                               fmt::format("expected one process, or {} MPI processes as the environment says (MPI "
                                           "has {}): the host backend runs every rank class itself",
                                           launch.world, runtime::mpi_size()));
      }
      std::cerr << fmt::format(
          "hzp-run: process {} of {} (mpirun, MPI rank {} of {}): the host backend runs every rank class\n",
          launch.rank, launch.world, runtime::mpi_rank(), runtime::mpi_size());
      const int rc = run_host(a, s, command_line);
      runtime::mpi_barrier();
      return rc;
    }
    if (launch.world > 1) {
      throw core::InputError("environment", launch.launcher,
                             "expected one process (or mpirun with a build with MPI): the host backend runs every "
                             "rank class itself");
    }
    return run_host(a, s, command_line);
  }
#ifdef HZP_HAVE_CUDA
  return run_cuda(a, s, gpus, command_line);
#else
  refuse_without_cuda();
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hzp;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"hzp-run: execute a Schedule and measure it (the same Timeline format as the simulator)"};
  Args a;
  add_run_options(app, a);
  BenchArgs b;
  CLI::App* bench = add_bench_command(app, b);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "hzp-run: error: command line: " << e.what() << "\n";
    return kExitBadInput;
  }
  // MPI_Finalize on every way out, once MPI was initialised (MPI requires it before exit).
  struct Finalize {
    ~Finalize() { runtime::mpi_finalize(); }
  } finalize;
  try {
    return run_parsed(a, b, bench->parsed(), command_line);
  } catch (const core::InputError& e) {
    std::cerr << "hzp-run: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const core::ScheduleError& e) {
    std::cerr << "hzp-run: error: " << a.schedule << ": " << e.what() << "\n";
    return kExitBadInput;
  } catch (const runtime::RunError& e) {
    std::string what = e.what();
    while (!what.empty() && what.back() == '\n') what.pop_back();
    std::cerr << "hzp-run: aborted: " << what << "\n";
    return kExitAborted;
  } catch (const std::exception& e) {
    std::cerr << fmt::format(
        "hzp-run: internal error: {}\nThis is a bug in hzp {} ({}); please report it with the command line above.\n",
        e.what(), core::version(), core::git_revision());
    return kExitInternal;
  }
}
