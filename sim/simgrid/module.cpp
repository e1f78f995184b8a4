// The module's entry point (module.hpp): the one symbol the SimGrid engine's
// child process looks up after loading libhzp_simgrid.so.
#include "sim/simgrid/module.hpp"

#include <unistd.h>

#include <exception>
#include <string>
#include <type_traits>

#include "core/io.hpp"
#include "sim/simgrid/result_wire.hpp"
#include "sim/simgrid/simulation.hpp"

extern "C" void hzp_simgrid_simulate(const hzp::core::Schedule& s, const hzp::cost::PerfModel& pm,
                                     const hzp::sim::EngineOptions& o,
                                     const std::vector<const hzp::cost::CollectiveAlgorithm*>& algorithms, int fd) {
  using namespace hzp::sim::simgrid;
  std::string out;
  try {
    hzp::cost::use_collective_algorithms(algorithms);
    // The result leaves before the engine's teardown, which the child skips.
    (void)Simulation(s, pm, o).run([&](const SimResult& r) {
      (void)hzp::core::write_all_fd(fd, encode_result(r));
      ::close(fd);
      ::_exit(0);
    });
  } catch (...) {
    out = encode_error(std::current_exception());
  }
  (void)hzp::core::write_all_fd(fd, out);
}

// The engine calls this through SimulateEntry: the two must not drift apart.
static_assert(std::is_same_v<decltype(&hzp_simgrid_simulate), hzp::sim::simgrid::SimulateEntry>);
