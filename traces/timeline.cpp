// Timeline writers: Chrome trace-event JSON and CSV (see timeline.hpp).
// Times are written in microseconds with nanosecond precision, fixed-point,
// so the same Timeline always gives the same bytes.
#include "traces/timeline.hpp"

#include <fmt/format.h>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace hzp::traces {
namespace {

std::string us(core::TimePoint t) {
  const std::int64_t ns = t.count_ns();
  return fmt::format("{}{}.{:03d}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
}

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (contiguous)
    return ranks.size() == 1 ? fmt::format("rank {}", ranks[0])
                             : fmt::format("ranks {}-{}", ranks.front(), ranks.back());
  return fmt::format("{} ranks from {}", ranks.size(), ranks.front());
}

}  // namespace

std::string to_chrome_trace(const Timeline& t) {
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
    if (r.kind == core::OpKind::Compute) args["flops"] = r.flops.count();
    if (r.kind == core::OpKind::Collective) args["group_kind"] = core::to_string(r.group_kind);
    emit(fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":{},"cat":"{}","args":{}}})", r.program,
                     r.stream, us(r.start), us(r.end - r.start), name.dump(), r.what, args.dump()));
  }
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

}  // namespace hzp::traces
