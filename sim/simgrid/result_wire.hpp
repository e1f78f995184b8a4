// What one SimGrid simulation produced, and how the forked child that ran it
// hands it (or the error that stopped it) back to the parent through a pipe.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "schedule/replay.hpp"

namespace hzp::sim::simgrid {

/// What one simulation produced.
struct SimResult {
  /// times[program][stream][op] of the member emitted for each program: its
  /// slowest member (`--ranks all`) or its representative (`--ranks classes`).
  std::vector<std::vector<std::vector<core::OpTime>>> times;
  std::vector<int> emitted_rank;  // per program
  int ranks_simulated = 0;        // ranks with actors of their own
  long long flows = 0;            // flows put on the network, background included
};

/// The result as bytes: an Ok status, then its numbers as 64-bit integers.
[[nodiscard]] std::string encode_result(const SimResult& r);
/// The error `e` as bytes: its status (input, schedule, infeasible, other)
/// and what it said, so the parent throws the same kind of error.
[[nodiscard]] std::string encode_error(const std::exception_ptr& e);
/// The result back, or the child's error rethrown; a truncated message is a
/// std::runtime_error.
[[nodiscard]] SimResult decode_result(const std::string& in);

}  // namespace hzp::sim::simgrid
