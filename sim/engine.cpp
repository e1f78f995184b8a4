// Engine selection by name, and the checks every engine shares.
#include "sim/engine.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "sim/analytic/analytic_engine.hpp"
#include "sim/simgrid/simgrid_engine.hpp"

namespace hzp::sim {

std::unique_ptr<Engine> make_engine(const std::string& name, const cost::PerfModel& pm, const EngineOptions& options) {
  if (options.ranks != "all" && options.ranks != "classes") {
    throw core::InputError("command line", "--ranks", fmt::format("expected all or classes, got '{}'", options.ranks));
  }
  if (options.nccl_channels < 1 || options.nccl_channels > 64) {
    throw core::InputError("command line", "--nccl-channels",
                           fmt::format("expected 1 to 64 channels, got {}", options.nccl_channels));
  }
  if (name == "analytic") {
    return std::make_unique<AnalyticEngine>(pm, Contention{options.interference, options.link_sharing});
  }
  if (name == "simgrid") {
    simgrid::check_simgrid_settings(options.simgrid_config);
    return std::make_unique<simgrid::SimGridEngine>(pm, options);
  }
  throw core::InputError("command line", "--engine", fmt::format("expected analytic or simgrid, got '{}'", name));
}

void check_fits(const core::Schedule& s, const topologies::Topology& topo) {
  for (const auto& g : s.groups) {
    for (int r : g.ranks) {
      if (r >= topo.devices()) {
        throw core::InputError("schedule", fmt::format("groups[{}].ranks", g.id),
                               fmt::format("rank {} does not exist on a cluster of {} devices", r, topo.devices()));
      }
    }
  }
}

}  // namespace hzp::sim
