// Timeline writers: Chrome trace-event JSON and CSV (see timeline.hpp).
// Times are written in microseconds with nanosecond precision, fixed-point,
// so the same Timeline always gives the same bytes.
#include "traces/timeline.hpp"

#include <fmt/format.h>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::traces {
namespace {

// "12.345": microseconds with three decimals, exact (integer arithmetic).
std::string us(core::Duration d) {
  const std::int64_t ns = d.count_ns();
  return fmt::format("{}{}.{:03d}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
}
std::string us(core::TimePoint t) { return us(t.since_start()); }

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (contiguous)
    return ranks.size() == 1 ? fmt::format("rank {}", ranks[0])
                             : fmt::format("ranks {}-{}", ranks.front(), ranks.back());
  return fmt::format("{} ranks from {}", ranks.size(), ranks.front());
}

// Flow arrows between the ops of each peer link that are both in the trace:
// from the middle of one slice to the middle of the other ("bp":"e" binds
// the end to the slice that encloses it).
template <class Emit>
void emit_flows(const Timeline& t, const std::vector<FlowLink>& flows, Emit& emit) {
  if (flows.empty()) return;
  std::map<std::pair<int, int>, const OpRecord*> by_op;
  for (const OpRecord& r : t.ops) by_op.emplace(std::pair{r.program, r.op_id}, &r);
  auto mid = [](const OpRecord& r) { return us(r.start + core::Duration::ns((r.end - r.start).count_ns() / 2)); };
  int id = 0;
  for (const FlowLink& f : flows) {
    const auto a = by_op.find({f.from_program, f.from_op});
    const auto b = by_op.find({f.to_program, f.to_op});
    if (a == by_op.end() || b == by_op.end()) continue;
    const OpRecord& from = *a->second;
    const OpRecord& to = *b->second;
    emit(fmt::format(R"({{"ph":"s","id":{},"pid":{},"tid":{},"ts":{},"name":"{}","cat":"peers"}})", id, from.program,
                     from.stream, mid(from), from.what));
    emit(fmt::format(R"({{"ph":"f","bp":"e","id":{},"pid":{},"tid":{},"ts":{},"name":"{}","cat":"peers"}})", id,
                     to.program, to.stream, mid(to), from.what));
    ++id;
  }
}

}  // namespace

void emit_streams(const core::Schedule& s, TraceSink& sink) {
  for (const core::Program& prog : s.programs) {
    for (const core::Stream& st : prog.streams) {
      sink.on_stream(StreamInfo{prog.id, st.id, prog.name, prog.ranks, st.name, st.kind});
    }
  }
}

OpRecord op_record(const core::Schedule& s, const core::Program& prog, const core::Stream& st, const core::Op& op,
                   core::TimePoint start, core::TimePoint end, bool names, std::optional<core::TimePoint> issued) {
  OpRecord rec;
  rec.program = prog.id;
  rec.stream = st.id;
  rec.op_id = op.id;
  rec.kind = op.kind;
  if (names) {
    rec.name = op.name;
    rec.what = op.kind == core::OpKind::Compute      ? std::string(core::to_string(op.compute().kind))
               : op.kind == core::OpKind::Collective ? std::string(core::to_string(op.collective().kind))
                                                     : std::string(core::to_string(op.kind));
  }
  if (op.kind == core::OpKind::Collective) rec.group_kind = s.group(op.collective().group).kind;
  if (op.kind == core::OpKind::Compute) rec.flops = op.compute().flops;
  rec.bytes = core::op_bytes(op);
  rec.start = start;
  rec.end = end;
  rec.issued = issued;
  return rec;
}

std::string to_chrome_trace(const Timeline& t, const std::vector<FlowLink>& flows) {
  // Written by hand, one event per line: nlohmann would hold the whole trace
  // in memory twice for large schedules.
  std::string out;
  out += "{\"displayTimeUnit\":\"ns\",\"otherData\":";
  nlohmann::json header{{"schema_version", kTimelineSchemaVersion},
                        {"schedule_sha256", t.header.schedule_sha256},
                        {"schedule_name", t.header.schedule_name},
                        {"engine", t.header.engine},
                        {"engine_detail", t.header.engine_detail},
                        {"hzp_version", t.header.hzp_version},
                        {"git_revision", t.header.git_revision},
                        {"command_line", t.header.command_line},
                        {"schedule_provenance", nlohmann::json::parse(t.header.schedule_provenance_json)}};
  if (!t.header.unreliable.empty()) header["unreliable"] = t.header.unreliable;
  out += header.dump();
  out += ",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& e) {
    if (!first) out += ",\n";
    first = false;
    out += e;
  };
  int last_program = -1;
  for (const auto& s : t.streams) {
    if (s.program != last_program) {
      nlohmann::json name{{"name", fmt::format("class {} '{}' ({})", s.program, s.program_name, rank_list(s.ranks))}};
      emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{}}})", s.program, name.dump()));
      last_program = s.program;
    }
    nlohmann::json name{{"name", s.stream_name}};
    emit(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{}}})", s.program, s.stream,
                     name.dump()));
    emit(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                     s.program, s.stream, s.stream));
  }
  for (const auto& r : t.ops) {
    nlohmann::json name = r.name;
    nlohmann::json args{{"op", r.op_id}, {"bytes", r.bytes.count()}};
    if (r.issued) args["issued_us"] = r.issued->since_start().to_us();
    if (r.kind == core::OpKind::Compute) args["flops"] = r.flops.count();
    if (r.kind == core::OpKind::Collective) args["group_kind"] = core::to_string(r.group_kind);
    emit(fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":{},"cat":"{}","args":{}}})", r.program,
                     r.stream, us(r.start), us(r.end - r.start), name.dump(), r.what, args.dump()));
  }
  emit_flows(t, flows, emit);
  for (const auto& m : t.memory) {
    emit(fmt::format(
        R"({{"ph":"C","pid":{},"tid":0,"ts":{},"name":"memory","args":{{"GiB":{:.6f},"reserved_GiB":{:.6f}}}}})",
        m.program, us(m.time), m.in_use.gib(), m.reserved.gib()));
  }
  out += "\n]}\n";
  return out;
}

std::string to_csv(const Timeline& t) {
  std::string out = "program,stream,op_id,kind,what,name,start_us,end_us,flops,bytes\n";
  for (const auto& r : t.ops) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", r.program, r.stream, r.op_id, core::to_string(r.kind), r.what,
                       r.name, us(r.start), us(r.end), r.flops.count(), r.bytes.count());
  }
  return out;
}

namespace {

// "12.345" microseconds (three decimals, as `us` writes them) -> nanoseconds:
// a finite number within 10^12 us (11.6 days) of the origin, never below
// `min_us` (a duration is not negative), so that no absurd value overflows
// the integer nanoseconds (issue 42, item 8).
std::int64_t ns_of(const nlohmann::json& v, const std::string& file, const std::string& key, double min_us = -1e12) {
  constexpr double kMaxUs = 1e12;
  if (!v.is_number()) throw core::InputError(file, key, "expected a number of microseconds");
  const double us = v.get<double>();
  if (!std::isfinite(us) || us < min_us || us > kMaxUs) {
    throw core::InputError(file, key,
                           fmt::format("expected microseconds in [{:g}, {:g}], got {:g}", min_us, kMaxUs, us));
  }
  return std::llround(us * 1000.0);
}

// The hzp header in the trace's otherData.
TraceHeader header_from(const nlohmann::json& h, const std::string& file) {
  TraceHeader header;
  auto str = [&](const char* key) {
    if (!h.contains(key) || !h[key].is_string()) {
      throw core::InputError(file, std::string("otherData.") + key, "expected a string");
    }
    return h[key].get<std::string>();
  };
  header.schedule_sha256 = str("schedule_sha256");
  header.schedule_name = str("schedule_name");
  header.engine = str("engine");
  header.engine_detail = str("engine_detail");
  header.hzp_version = str("hzp_version");
  header.git_revision = str("git_revision");
  header.command_line = str("command_line");
  header.schedule_provenance_json = h.value("schedule_provenance", nlohmann::json::object()).dump();
  if (h.contains("unreliable")) header.unreliable = str("unreliable");
  return header;
}

// Reads the op of a complete ("X") event; its kind from the category.
class OpReader {
 public:
  explicit OpReader(const std::string& file) : file_(file) {
    for (int g = 0; g < static_cast<int>(core::kGroupKinds); ++g) {
      group_kinds_.emplace(core::to_string(static_cast<core::GroupKind>(g)), static_cast<core::GroupKind>(g));
    }
  }

  OpRecord read(const nlohmann::json& e, int pid, int tid, const std::string& at) const {
    if (!e.contains("args") || !e["args"].is_object() || !e["args"].contains("op")) {
      throw core::InputError(file_, at + ".args.op", "expected the op id");
    }
    OpRecord r;
    r.program = pid;
    r.stream = tid;
    r.op_id = e["args"]["op"].get<int>();
    r.name = e.value("name", "");
    r.what = e.value("cat", "");
    r.kind = collectives_.contains(r.what) ? core::OpKind::Collective
             : r.what == "send"            ? core::OpKind::Send
             : r.what == "recv"            ? core::OpKind::Recv
                                           : core::OpKind::Compute;
    if (r.kind == core::OpKind::Collective) {
      auto g = group_kinds_.find(e["args"].value("group_kind", ""));
      if (g == group_kinds_.end()) throw core::InputError(file_, at + ".args.group_kind", "expected a group kind");
      r.group_kind = g->second;
    }
    r.flops = core::Flops(e["args"].value("flops", 0.0));
    r.bytes = core::Bytes(e["args"].value("bytes", std::int64_t{0}));
    if (e["args"].contains("issued_us")) {
      r.issued = core::TimePoint::ns(ns_of(e["args"]["issued_us"], file_, at + ".args.issued_us"));
    }
    const std::int64_t start = ns_of(e.value("ts", nlohmann::json()), file_, at + ".ts");
    r.start = core::TimePoint::ns(start);
    r.end = core::TimePoint::ns(start + ns_of(e.value("dur", nlohmann::json()), file_, at + ".dur", 0));
    return r;
  }

 private:
  const std::string& file_;
  std::map<std::string, core::GroupKind> group_kinds_;
  const std::set<std::string> collectives_{"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"};
};

}  // namespace

Timeline from_chrome_trace(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  if (!j.is_object()) throw core::InputError(file, "", "expected an hzp trace (JSON object)");
  if (!j.contains("otherData") || !j["otherData"].is_object()) {
    throw core::InputError(file, "otherData", "expected the hzp trace header");
  }
  if (!j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    throw core::InputError(file, "traceEvents", "expected an array of trace events");
  }
  const nlohmann::json& h = j["otherData"];
  if (h.value("schema_version", 0) != kTimelineSchemaVersion) {
    throw core::InputError(file, "otherData.schema_version", fmt::format("expected {}", kTimelineSchemaVersion));
  }
  Timeline t;
  t.header = header_from(h, file);
  const OpReader ops(file);
  const auto& events = j["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const std::string at = fmt::format("traceEvents[{}]", i);
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || !e.contains("pid") ||
        !e["pid"].is_number_integer()) {
      throw core::InputError(file, at, "expected a trace event with ph and pid");
    }
    const std::string ph = e["ph"].get<std::string>();
    const int pid = e["pid"].get<int>();
    const int tid = e.value("tid", 0);
    if (ph == "M" && e.value("name", "") == "thread_name") {
      StreamInfo s;
      s.program = pid;
      s.stream = tid;
      s.stream_name = e["args"].value("name", "");
      t.streams.push_back(std::move(s));
    } else if (ph == "X") {
      t.ops.push_back(ops.read(e, pid, tid, at));
    }
  }
  return t;
}

}  // namespace hzp::traces
