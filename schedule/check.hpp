// The Schedule checker: everything an engine or the runtime relies on, checked
// once before any of them runs. Failures name the first offending op.
#pragma once

#include "schedule/schedule.hpp"

namespace hzp::core {

/// Throws ScheduleError when the Schedule breaks the contract:
///  - structure: programs partition ranks 0..world_size-1; groups hold valid,
///    ascending, distinct ranks; streams name existing threads; op ids are
///    unique within a program and ascend along each stream; each event is recorded exactly once;
///  - roles: an op's role fits its kind (Other fits any); the sharding roles
///    (param_gather, grad_reduce, grad_accumulate, optimizer) name a parameter
///    class, and their collectives run on that class's data-parallel groups;
///  - memory: every free matches a live alloc of the same buffer, size and buffer class;
///  - collectives: an op's group contains its program's representative; per
///    (program, group) the sequence numbers run 0, 1, 2, ... in issue order;
///    every participant issues the same (kind, bytes, dtype) at each seq
///    (bytes may differ for all-to-all, which is all_to_allv);
///  - progress: a replay reaches the end (no deadlock, no unmatched op).
///    Callers that hand the Schedule to an engine next may leave this to the
///    engine's own walk (`Progress::ByTheEngine`): it names the same first
///    stuck op, and a walk of a large Schedule costs as much as the rest of
///    the check.
enum class Progress { Walk, ByTheEngine };
void check_schedule(const Schedule& s, Progress progress = Progress::Walk);

}  // namespace hzp::core
