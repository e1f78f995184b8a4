// Replays a Schedule in dependency order: each stream runs its ops in order,
// waits block until their event is recorded, collectives start when every
// participating program has reached them, send/recv pairs rendezvous. Costs
// come from the caller, so the same walk is the checker (zero costs) and the
// analytic engine's event loop (costs from the performance model).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "schedule/schedule.hpp"

namespace hzp::core {

struct OpTime {
  TimePoint start{};
  TimePoint end{};
};

/// Where an op is in its program: stream and index (times[p][stream][index]).
struct OpAt {
  std::size_t stream = 0, index = 0;
};

/// Costs of the ops that take time. Unset functions cost zero.
struct ReplayCosts {
  std::function<Duration(const Program&, const Op&)> compute;
  /// When set, a compute op's duration given when it starts (replaces
  /// `compute`): what a device whose rate changes over time needs.
  std::function<Duration(const Program&, const Op&, OpAt at, TimePoint start)> compute_at;
  /// A collective's duration once all members have arrived.
  std::function<Duration(const Group&, const Op&)> collective;
  /// When set, a collective's duration seen by one member program given when
  /// it starts (replaces `collective`); every member finishes when the
  /// slowest does. `op` is the member's largest share (all_to_allv).
  std::function<Duration(const Group&, const Op& op, const Program& member, OpAt at, TimePoint start)> collective_at;
  /// A matched send/recv pair; `send` carries the sender's program.
  std::function<Duration(const Program& sender, const Op& send)> p2p;
};

struct ReplayResult {
  /// times[program][stream][op index]
  std::vector<std::vector<std::vector<OpTime>>> times;
  /// When each op was issued by its host thread; same indexing.
  std::vector<std::vector<std::vector<TimePoint>>> issued;
  /// How many ops take time (is_timed) and how many allocate or free, over
  /// every program: what a timeline of the walk will hold.
  std::size_t timed_ops = 0, memory_ops = 0;
};

/// The part of the walk that does not depend on the costs, built once per
/// Schedule (each host thread's issue order, the event slots, each group's
/// participants), for callers that walk one Schedule several times. The
/// Schedule must outlive it.
class ReplayPlan {
 public:
  explicit ReplayPlan(const Schedule& s);
  ~ReplayPlan();
  ReplayPlan(const ReplayPlan&) = delete;
  ReplayPlan& operator=(const ReplayPlan&) = delete;
  /// One walk under these costs, as replay().
  [[nodiscard]] ReplayResult replay(const ReplayCosts& costs) const;

  /// A collective, send or receive of the Schedule, by where it is.
  struct CommSite {
    std::size_t program = 0, stream = 0, index = 0;
    OpKind kind = OpKind::Collective;
  };
  /// Every collective, send and receive, by program, stream and index: what
  /// a caller that reads the walk's communication needs, without a pass over
  /// every op.
  [[nodiscard]] const std::vector<CommSite>& comm_sites() const;

 private:
  struct Impl;
  const Schedule& s_;
  std::unique_ptr<const Impl> impl_;
};

/// Runs the walk. Throws ScheduleError naming the first op that can never
/// start (an event never recorded, a collective some member never reaches, a
/// send without its recv).
[[nodiscard]] ReplayResult replay(const Schedule& s, const ReplayCosts& costs);

}  // namespace hzp::core
