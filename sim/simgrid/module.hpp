// The SimGrid simulation as a module of its own (libhzp_simgrid.so), loaded
// only by the SimGrid engine's child process: the analytic path, and every
// command that does not simulate with SimGrid, never loads SimGrid (or the
// ns-3 libraries it pulls in, whose start-up once cost every hzp command
// ~30 ms).
#pragma once

#include <vector>

#include "cost/collective_algorithm.hpp"
#include "cost/perf_model.hpp"
#include "schedule/schedule.hpp"
#include "sim/engine.hpp"

namespace hzp::sim::simgrid {

/// The module's one entry point: simulates `s`, costing collectives with the
/// parent's `algorithms` (cost::collective_algorithms() there: the module
/// holds its own copy of the cost library), and writes the encoded result
/// (result_wire.hpp: the SimResult, or the error it ended with) to `fd`.
/// The process must not simulate anything else (SimGrid allows one engine a
/// process); a finished result leaves through `_exit` before SimGrid's teardown.
using SimulateEntry = void (*)(const core::Schedule& s, const cost::PerfModel& pm, const EngineOptions& o,
                               const std::vector<const cost::CollectiveAlgorithm*>& algorithms, int fd);
inline constexpr const char* kSimulateEntry = "hzp_simgrid_simulate";

/// Where the module is: $HZP_SIMGRID_MODULE, else lib/libhzp_simgrid.so
/// beside the executable's bin/ (or tests/) folder, else the build tree's.
[[nodiscard]] std::string module_path();

}  // namespace hzp::sim::simgrid
