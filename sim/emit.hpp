// Turns per-op start/end times of a Schedule into TraceSink events: streams,
// ops that take time, and the memory curve of each rank class through the
// caching-allocator model. Shared by every engine, so their Timelines differ
// only in the times.
#pragma once

#include "core/schedule_replay.hpp"
#include "traces/timeline.hpp"

namespace hzp::sim {

/// `times[program][stream][op index]`; `header` is passed to the sink first.
void emit_timeline(const core::Schedule& s, const std::vector<std::vector<std::vector<core::OpTime>>>& times,
                   const traces::TraceHeader& header, traces::TraceSink& sink);

}  // namespace hzp::sim
