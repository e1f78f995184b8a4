// Turns per-op start/end times of a Schedule into TraceSink events: streams,
// ops that take time, and the memory curve of each rank class through the
// caching-allocator model. Shared by every engine, so their Timelines differ
// only in the times.
#pragma once

#include "schedule/replay.hpp"
#include "traces/timeline.hpp"

namespace hzp::sim {

/// `times[program][stream][op index]`; `header` is passed to the sink first.
/// `issued`, same indexing, when the engine knows when each op's host thread
/// issued it (the analytic engine): the records carry it, so that host-bound
/// waiting can be told from waiting on the device (metrics.hpp, TimeSplit).
void emit_timeline(const core::Schedule& s, const std::vector<std::vector<std::vector<core::OpTime>>>& times,
                   const traces::TraceHeader& header, traces::TraceSink& sink,
                   const std::vector<std::vector<std::vector<core::TimePoint>>>* issued = nullptr);
/// The same from a walk (core::replay): its times, issue times and op counts.
void emit_timeline(const core::Schedule& s, const core::ReplayResult& r, const traces::TraceHeader& header,
                   traces::TraceSink& sink);

}  // namespace hzp::sim
