// The out-of-line part of core/units.hpp: the error a bad duration raises
// (kept here so that the header needs neither fmt nor the error types).
#include "core/units.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace hzp::core {

void throw_bad_duration(const char* unit, double value) {
  throw UnitError(fmt::format("a duration must be a finite, non-negative number of {}, got {}", unit, value));
}

}  // namespace hzp::core
