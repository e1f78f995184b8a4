// What the replay walk reports when it cannot finish: the op that can never
// start, named by program, stream and op. Internal to schedule/.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace hzp::core {

/// "program P ('name') stream 'S' op N 'name' (kind)".
[[nodiscard]] std::string describe_op(const Program& p, const Stream& st, const Op& op);

/// Throws ScheduleError naming the root cause of a deadlock, given each
/// stream's next op (`next[program][stream]`): a stuck wait is followed to
/// the stream that should record its event; a wait is named only when the
/// waits form a cycle.
[[noreturn]] void report_deadlock(const Schedule& s, const std::vector<std::vector<std::size_t>>& next);

}  // namespace hzp::core
