// Checks of the flags declared by hand (outputs, budgets, -j) through the
// option tables' own parser (core::text_check): an empty file name, NaN, inf,
// a sign or an overflow is refused with the flag's name, never taken as unset.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "core/options.hpp"
#include "explore/scenario.hpp"

namespace hzp::cli {

using core::file_name;
using core::integer_in;
using core::number_in;

/// Worker processes: 1 to 4 x the cores (more only queue for the same cores).
inline std::function<std::string(const std::string&)> jobs() {
  return integer_in(1, 4.0 * std::max(1u, std::thread::hardware_concurrency()));
}

/// --max-ops (and, for commands that simulate, --max-flows): the work limits
/// a scenario is checked against before it is lowered or simulated.
inline void add_work_limits(CLI::App* app, explore::WorkLimits& limits, bool flows) {
  app->add_option("--max-ops", limits.max_ops,
                  "refuse a plan whose Schedule would hold more ops than this (estimated before lowering)")
      ->capture_default_str()
      ->check(integer_in(1, 1e12));
  if (!flows) return;
  app->add_option("--max-flows", limits.max_flows,
                  "simgrid: refuse a simulation that would put more flows on the network (estimated first)")
      ->capture_default_str()
      ->check(integer_in(1, 1e12));
}

}  // namespace hzp::cli
