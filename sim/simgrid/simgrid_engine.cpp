// The SimGrid engine's driver (see simgrid_engine.hpp): checks the Schedule,
// simulates it in a forked child (simulation.hpp), reads the result back
// (result_wire.hpp) and emits the Timeline.
#include "sim/simgrid/simgrid_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <stdexcept>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/schedule_replay.hpp"
#include "core/subprocess.hpp"
#include "sim/emit.hpp"
#include "sim/simgrid/result_wire.hpp"
#include "sim/simgrid/simulation.hpp"

namespace hzp::sim::simgrid {
namespace {

// Runs the simulation in a child process and returns what it reported.
SimResult simulate_forked(const core::Schedule& s, const topologies::PerfModel& pm, const EngineOptions& o) {
  core::Child child(
      [&](int, int fd) {
        std::string out;
        try {
          // The result leaves before the engine's teardown, which the child skips.
          (void)Simulation(s, pm, o).run([&](const SimResult& r) {
            (void)core::write_all_fd(fd, encode_result(r));
            ::close(fd);
            ::_exit(0);
          });
        } catch (...) {
          out = encode_error(std::current_exception());
        }
        (void)core::write_all_fd(fd, out);
        return 0;
      },
      core::ChildOptions{});
  const std::string data = child.read_all();
  const core::ExitStatus status = child.wait();
  if (status.signaled) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process died of signal {}", status.signal));
  }
  if (!status.ok() || data.empty()) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process exited with status {}", status.code));
  }
  return decode_result(data);
}

}  // namespace

void SimGridEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  check_fits(s, pm_.topology());
  // The walk with zero costs names the first offending op of a broken
  // Schedule before any actor runs.
  (void)core::replay(s, core::ReplayCosts{});
  SimResult r;
  try {
    r = simulate_forked(s, pm_, options_);
  } catch (const std::runtime_error& e) {
    // SimGrid aborts on a setting it does not know or accept.
    const bool died = std::string(e.what()).find("simulation process died") != std::string::npos;
    if (!died || options_.simgrid_config.empty()) throw;
    throw core::InputError("command line", "--simgrid-cfg",
                           fmt::format("expected SimGrid settings it accepts (key:value), got '{}' ({})",
                                       fmt::join(options_.simgrid_config, " "), e.what()));
  }
  header.engine = name();
  const int world = pm_.topology().devices();
  header.engine_detail = fmt::format(
      "ranks={} ({} of {} ranks in detail), {} NCCL channels, {} flows, compute slowdown under "
      "collectives {}",
      options_.ranks, r.ranks_simulated, world, options_.nccl_channels, r.flows,
      options_.interference ? pm_.topology().spec().device.comm_compute_slowdown : 1.0);
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r.times, header, sink);
}

}  // namespace hzp::sim::simgrid
