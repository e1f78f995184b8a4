// The GPU backend's decisions, in plain C++ (no CUDA): which communicators a
// rank makes and in what order, which communicator each op uses, the one
// order in which a device issues its NCCL calls, when a cross-thread wait
// may be enqueued, which buffers live across steps, and when the watchdog
// fires. runtime/device/backend.cpp acts on them through DeviceApi; the
// tests check them against every rank of generated Schedules.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device/api.hpp"
#include "runtime/launch.hpp"
#include "schedule/schedule.hpp"

namespace hzp::runtime::device {

/// One ncclCommSplit of the world: every rank calls every split of the plan,
/// in the plan's order (ncclCommSplit is collective over its parent), with
/// its colour (< 0: NCCL_SPLIT_NOCOLOR) and its rank as the key.
struct CommSplit {
  std::string what;
  int colour = -1;
};

/// A rank's communicators: the group splits of comm_split_rounds, then one
/// communicator per ordered pair (sender, receiver) that transfers, the pairs
/// coloured into rounds where each rank is in at most one pair. A send and
/// its recv therefore use the same communicator on both sides, and the two
/// directions between two ranks do not share one (so a send blocked on its
/// receiver never holds up a transfer the other way).
struct CommPlan {
  std::vector<CommSplit> splits;                        // identical sequence on every rank; colours differ
  std::map<int, std::size_t> group_comm;                // Schedule group id (this rank's) -> split index
  std::map<std::pair<int, int>, std::size_t> p2p_comm;  // (sender, receiver) -> split index
};
[[nodiscard]] CommPlan plan_comms(const core::Schedule& s, int rank);

/// The global peer of a send or recv of `prog` executed by `rank` (the
/// representative's peer moved by the rank's offset from it).
[[nodiscard]] int op_peer(const core::Program& prog, const core::Op& op, int rank);
/// The split index of the communicator `op` (a collective, send or recv) uses on `rank`.
[[nodiscard]] std::size_t comm_of(const CommPlan& comms, const RankPlan& plan, const core::Program& prog,
                                  const core::Op& op);

/// NCCL's element type and size for a Schedule dtype (fp8 moves one byte an element).
[[nodiscard]] std::pair<CommType, std::size_t> comm_element(core::Dtype d);
[[nodiscard]] bool is_comm(core::OpKind k);

/// Refuses (RunError) a program that a device cannot issue without risk of
/// a hang: a wait or sync whose record comes later in op id order (the
/// backend's host threads block a wait until its record, and issue NCCL
/// calls in op id order).
void check_issue_order(const core::Program& p);

/// Buffers the program allocates and never frees: model state, allocated
/// in the first step and kept for every later one.
[[nodiscard]] std::set<std::string> persistent_buffers(const core::Program& p);

/// The host threads' meeting point within a step: event records (a wait or
/// sync blocks until its event was recorded in this step), the NCCL issue
/// turn (one ticket per NCCL op in op id order, so one thread at a time
/// calls NCCL on the device, in the same order on every rank of a class),
/// and the abort that ends every such wait at once.
class StepSync {
 public:
  explicit StepSync(const core::Program& p);
  void begin_step();
  [[nodiscard]] int ticket(std::size_t stream, std::size_t index) const { return tickets_.at(stream).at(index); }
  void recorded(int event);
  /// Blocks until `event` is recorded in this step; throws RunError on abort.
  void wait_recorded(int event, const std::string& who);
  /// Blocks until it is `ticket`'s turn; throws RunError on abort.
  void take_turn(int ticket, const std::string& who);
  void end_turn();
  void abort(const std::string& why);
  [[nodiscard]] bool aborted() const;
  [[nodiscard]] std::string why() const;
  /// What each blocked host thread waits for (the watchdog's report).
  [[nodiscard]] std::vector<std::string> waiting() const;

 private:
  void block(const std::string& who, const std::function<bool()>& ready);
  std::vector<std::vector<int>> tickets_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  long step_ = 0;
  std::map<int, long> recorded_;  // event -> the step it was last recorded in
  int turn_ = 0;
  bool aborted_ = false;
  std::string why_;
  std::multiset<std::string> waiting_;
};

/// The watchdog's decision: fire when something is pending (an op enqueued
/// and not finished, or a host thread blocked) and nothing finished for `limit`.
class WatchState {
 public:
  using Clock = std::chrono::steady_clock;
  WatchState(std::chrono::milliseconds limit, Clock::time_point now) : limit_(limit), last_(now) {}
  [[nodiscard]] bool observe(std::size_t finished, bool pending, Clock::time_point now);

 private:
  std::chrono::milliseconds limit_;
  Clock::time_point last_;
  std::size_t seen_ = 0;
};

}  // namespace hzp::runtime::device
