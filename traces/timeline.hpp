// The Timeline: when every op of a Schedule ran, per rank class and stream,
// with the memory in use over time and a header carrying provenance. Engines
// and the runtime emit into a TraceSink; a Timeline is one such listener.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/units.hpp"
#include "schedule/schedule.hpp"

namespace hzp::traces {

inline constexpr int kTimelineSchemaVersion = 1;

struct TraceHeader {
  std::string schedule_sha256;
  std::string schedule_name;
  std::string engine;         // "analytic", "simgrid", "cuda", "host"
  std::string engine_detail;  // how it ran, e.g. "ranks=all (1024 of 1024 ranks simulated)"
  std::string hzp_version;
  std::string git_revision;
  std::string command_line;  // the arguments the run was given
  std::string schedule_provenance_json = "{}";
  /// Empty for a trace that measures what it says; else why it does not (a
  /// wall-clock host run whose host fell behind). Written as otherData's
  /// "unreliable" only when set; `hzp validate compare` refuses such a trace.
  std::string unreliable;
};

struct StreamInfo {
  int program = 0;
  int stream = 0;
  std::string program_name;
  std::vector<int> ranks;
  std::string stream_name;
  core::StreamKind kind = core::StreamKind::Compute;
};

/// One op that took time (compute, collective, send, recv).
struct OpRecord {
  int program = 0;
  int stream = 0;
  int op_id = 0;
  std::string name;
  core::OpKind kind = core::OpKind::Compute;
  std::string what;                                     // compute kind or collective kind
  core::GroupKind group_kind = core::GroupKind::World;  // for collectives
  core::Flops flops{};
  core::Bytes bytes{};
  core::TimePoint start{};
  core::TimePoint end{};
  /// When the host issued it (runtime traces: the host clock from the step's
  /// start; written as args.issued_us), if known.
  std::optional<core::TimePoint> issued;
};

/// Two ops of different rank classes that are one collective, or a send and
/// its receive: the trace draws them as a flow arrow. Ops are named by their
/// program (rank class) and op id.
struct FlowLink {
  int from_program = 0;
  int from_op = 0;
  int to_program = 0;
  int to_op = 0;
  friend bool operator==(const FlowLink&, const FlowLink&) = default;
};

/// Device memory of a rank class right after an alloc or free at `time`.
struct MemoryPoint {
  int program = 0;
  core::TimePoint time{};
  core::Bytes in_use{};    // allocated by live buffers
  core::Bytes reserved{};  // held by the allocator (in_use plus cached free blocks)
  std::string buffer;      // the buffer allocated or freed
  core::Bytes delta{};     // +bytes for an alloc, −bytes for a free
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void on_header(const TraceHeader& h) = 0;
  virtual void on_stream(const StreamInfo& s) = 0;
  // By value: a sink that keeps the record takes it without a copy.
  virtual void on_op(OpRecord r) = 0;
  virtual void on_memory(MemoryPoint m) = 0;
  /// False: the sink reads no op's name or what (emitters may leave them
  /// empty, sparing a string per op of a large Schedule).
  [[nodiscard]] virtual bool wants_names() const { return true; }
  /// How many ops and memory points are coming (a hint, before the first).
  virtual void expect(std::size_t /*ops*/, std::size_t /*memory_points*/) {}
};

struct Timeline {
  TraceHeader header;
  std::vector<StreamInfo> streams;
  std::vector<OpRecord> ops;
  std::vector<MemoryPoint> memory;
};

/// Collects everything it hears into a Timeline; with `names` false, ops
/// come without name and what (enough for metrics, not for a trace file).
class TimelineRecorder final : public TraceSink {
 public:
  TimelineRecorder() = default;
  explicit TimelineRecorder(bool names) : names_(names) {}
  [[nodiscard]] bool wants_names() const override { return names_; }
  void expect(std::size_t ops, std::size_t memory_points) override {
    t_.ops.reserve(t_.ops.size() + ops);
    t_.memory.reserve(t_.memory.size() + memory_points);
  }
  void on_header(const TraceHeader& h) override { t_.header = h; }
  void on_stream(const StreamInfo& s) override { t_.streams.push_back(s); }
  void on_op(OpRecord r) override { t_.ops.push_back(std::move(r)); }
  void on_memory(MemoryPoint m) override { t_.memory.push_back(std::move(m)); }
  [[nodiscard]] const Timeline& timeline() const { return t_; }
  [[nodiscard]] Timeline take() { return std::move(t_); }

 private:
  bool names_ = true;
  Timeline t_;
};

/// The streams of every rank class of a Schedule, to a sink (after its header).
void emit_streams(const core::Schedule& s, TraceSink& sink);
/// The ops of other rank classes that each collective, send and receive pairs
/// with. A collective whose group spans classes q1 < q2 < ... < qk is drawn
/// as a chain: each class links its op to the next class's op of the same
/// group kind and sequence number (k - 1 links per collective, not k^2). A
/// send links to its receive. Peers inside one class share one op and draw
/// nothing. Ordered by source program, then op id. Computed only for a trace
/// being written (O(ops log ops)), never in the engines' hot path.
[[nodiscard]] std::vector<FlowLink> peer_links(const core::Schedule& s);
/// The record of one op that takes time (compute, collective, send, recv);
/// without `names`, its name and what stay empty; `issued`, when its host
/// thread issued it, if known.
[[nodiscard]] OpRecord op_record(const core::Schedule& s, const core::Program& prog, const core::Stream& st,
                                 const core::Op& op, core::TimePoint start, core::TimePoint end, bool names = true,
                                 std::optional<core::TimePoint> issued = std::nullopt);

/// Chrome trace-event JSON, loadable in Perfetto and chrome://tracing: one
/// process per rank class, one thread (track) per stream, a memory counter per
/// rank class, a flow arrow (ph "s"/"f", cat "peers") for each of `flows`
/// (peer_links of the Schedule) whose two ops are in the trace, and the
/// header under "otherData".
[[nodiscard]] std::string to_chrome_trace(const Timeline& t, const std::vector<FlowLink>& flows = {});

/// Reads a trace `to_chrome_trace` wrote (from any engine or the runtime)
/// back into a Timeline: header, streams (names; kinds are not in the
/// trace and stay Compute) and ops. Memory counters are not read. Throws
/// InputError naming `file` and the key for anything that is not such a trace.
[[nodiscard]] Timeline from_chrome_trace(const std::string& text, const std::string& file);

/// CSV: program,stream,op_id,kind,what,name,start_us,end_us,flops,bytes.
[[nodiscard]] std::string to_csv(const Timeline& t);

}  // namespace hzp::traces
