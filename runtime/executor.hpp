// The executor: what the simulator's Schedule semantics mean on a machine.
// One host thread per Schedule thread issues its streams' ops in ascending op
// id to a Backend, which runs each stream in order and asynchronously to the
// host (a CUDA stream, or a worker thread in the host backend). A `sync` op
// blocks its host thread until its event has happened; `wait` holds back its
// stream; collectives run in Schedule order per group.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/replay.hpp"
#include "schedule/schedule.hpp"

namespace hzp::runtime {

/// Thrown when a run is aborted (the watchdog fired, or a device call failed);
/// the message says which op each rank was waiting on.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// Called by the host thread that owns the op's stream, in issue order,
  /// after `issue_cost`; must not wait for the device.
  virtual void enqueue(std::size_t program, std::size_t stream, std::size_t index) = 0;
  /// Blocks the calling host thread until `event` of `program` has happened
  /// on the device (cudaEventSynchronize). Throws RunError when aborted.
  virtual void host_wait(std::size_t program, const core::Thread& thread, int event) = 0;
  /// The host's cost of issuing one op (the host backend sleeps it; a real
  /// device pays it by itself and does nothing here).
  virtual void issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) = 0;
  /// Blocks until every enqueued op has finished. Throws RunError when aborted.
  virtual void drain() = 0;
  /// Ends the run early (a host thread could not start): waits in the
  /// backend then throw RunError. Default: nothing (a device backend's
  /// watchdog ends its own waits).
  virtual void abort(const std::string& /*why*/) {}
};

/// The ops of one Schedule thread in issue order: (stream index, op index).
[[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> issue_order(const core::Program& p, int thread);

/// The step a run measured: from the first op that takes time (compute,
/// collective, send, recv) to start to the last to end, over the programs
/// whose times are given (times[program][stream][op]; empty for programs this
/// process did not run).
[[nodiscard]] core::Duration measured_step(const core::Schedule& s,
                                           const std::vector<std::vector<std::vector<core::OpTime>>>& times);

/// Runs `programs` of the Schedule on `backend`: one std::thread per
/// Schedule thread of each program, then drains. Rethrows the first error.
void execute(const core::Schedule& s, const std::vector<std::size_t>& programs, Backend& backend);

}  // namespace hzp::runtime
