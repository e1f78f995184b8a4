// nccl-tests logs and collective cases as bench results (see nccl_tests_log.hpp).
#include "validation/nccl_tests_log.hpp"

#include <fmt/format.h>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

constexpr std::pair<std::string_view, core::CollectiveKind> kTests[] = {
    {"all_gather", core::CollectiveKind::AllGather},
    {"reduce_scatter", core::CollectiveKind::ReduceScatter},
    {"all_reduce", core::CollectiveKind::AllReduce},
    {"broadcast", core::CollectiveKind::Broadcast},
};

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool number(const std::string& s, double& v) {
  try {
    std::size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

traces::BenchResults bench_results_from_nccl_tests(const std::string& text, const std::string& file,
                                                   const std::string& device) {
  traces::BenchResults r;
  r.kind = "collectives";
  r.device = device;
  r.provenance["source"] = "nccl-tests log " + file;
  std::optional<core::CollectiveKind> kind;
  int ranks = 0;
  std::set<std::string> hosts;
  std::vector<std::pair<double, double>> rows;  // (bytes, out-of-place seconds)
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const auto t = tokens(line);
    if (t.empty()) continue;
    if (line.find("Collective test starting:") != std::string::npos) {
      for (const auto& [name, k] : kTests) {
        if (line.find(std::string(name) + "_perf") != std::string::npos) kind = k;
      }
    }
    if (t[0] == "#") {
      // "#  Rank  0 Group  0 Pid 123 on host device 0 [0x..] NVIDIA H100 ..."
      if (t.size() > 8 && t[1] == "Rank" && t[7] == "on") {
        ++ranks;
        hosts.insert(t[8]);
      }
      if (line.find("NCCL version") != std::string::npos) r.provenance["nccl"] = line.substr(line.find("NCCL version"));
      continue;
    }
    if (t[0].starts_with("#")) continue;
    double bytes = 0, seconds = 0;
    // size count type redop root time algbw busbw #wrong (out-of-place), then in-place.
    if (t.size() < 9 || !number(t[0], bytes) || !number(t[5], seconds)) {
      if (t[0].starts_with("Out") || t[0].starts_with("Avg"))
        continue;  // "# Out of bounds values", "# Avg bus bandwidth"
      throw core::InputError(file, fmt::format("line {}", line_no),
                             "expected an nccl-tests data row: size count type redop root time algbw busbw #wrong ...");
    }
    if (bytes > 0 && seconds > 0) rows.emplace_back(bytes, seconds * 1e-6);
  }
  if (!kind) {
    for (const auto& [name, k] : kTests) {
      if (file.find(name) != std::string::npos) kind = k;
    }
  }
  if (!kind) {
    throw core::InputError(file, "collective",
                           "expected a 'Collective test starting: X_perf' line or all_gather, reduce_scatter, "
                           "all_reduce or broadcast in the file name");
  }
  if (ranks < 2 || hosts.empty() || ranks % static_cast<int>(hosts.size()) != 0) {
    throw core::InputError(file, "# Rank",
                           "expected the log's '#  Rank N ... on HOST device ...' lines: at least 2 ranks, the same "
                           "number on every host");
  }
  if (rows.empty()) throw core::InputError(file, "rows", "expected nccl-tests data rows");
  const int per_node = ranks / static_cast<int>(hosts.size());
  for (const auto& [bytes, seconds] : rows) {
    r.collectives.push_back({*kind, static_cast<std::int64_t>(bytes), ranks, per_node, seconds});
  }
  return r;
}

traces::BenchResults bench_results_from_case(const CollectiveCase& c, const std::string& device, double host_floor_us) {
  traces::BenchResults r;
  r.kind = "collectives";
  r.device = device;
  r.provenance["source"] = "validation case " + c.id + ": " + c.source;
  for (const auto& row : c.rows) {
    if (c.gpus_per_process > 1 && row.time_us <= host_floor_us) continue;
    r.collectives.push_back({c.op, static_cast<std::int64_t>(row.bytes), c.gpus, c.ranks_per_node, row.time_us * 1e-6});
  }
  return r;
}

}  // namespace hzp::validation
