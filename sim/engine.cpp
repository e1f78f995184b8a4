// Engine selection by name.
#include "sim/engine.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "sim/analytic/analytic_engine.hpp"

namespace hzp::sim {

std::unique_ptr<Engine> make_engine(const std::string& name, const topologies::PerfModel& pm) {
  if (name == "analytic") return std::make_unique<AnalyticEngine>(pm);
  throw core::InputError("command line", "--engine",
                         fmt::format("expected analytic, got '{}' (the SimGrid engine is not built yet)", name));
}

}  // namespace hzp::sim
