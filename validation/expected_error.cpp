// The expected error of a prediction (see expected_error.hpp).
#include "validation/expected_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::validation {

std::string expected_error_table();  // validation/expected_error.json, generated into the build

std::string device_family(double compute_capability) {
  if (compute_capability >= 10) return "Blackwell";
  if (compute_capability >= 9) return "Hopper";
  if (compute_capability >= 8) return "Ampere";
  if (compute_capability >= 7) return "Volta";
  return "older";
}

bool time_like(Quantity q) {
  return q == Quantity::IterationTime || q == Quantity::TflopsPerGpu || q == Quantity::TokensPerGpu;
}

double throughput_error(const Scored& s) {
  return s.quantity == Quantity::IterationTime ? s.measured / s.predicted - 1 : s.predicted / s.measured - 1;
}

std::vector<CheckedRun> checked_runs(const std::vector<Scored>& scored) {
  std::vector<CheckedRun> runs;
  for (const auto& s : scored) {
    if (!time_like(s.quantity) || !s.consistent) continue;
    runs.push_back({s.name, s.family, s.stack, s.gpus, throughput_error(s)});
  }
  std::sort(runs.begin(), runs.end(), [](const CheckedRun& a, const CheckedRun& b) { return a.name < b.name; });
  return runs;
}

std::string checked_runs_json(const std::vector<CheckedRun>& runs, const std::string& source) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["note"] =
      "Each validation case that measured speed, its error as a throughput error (predicted / measured throughput - "
      "1: + means hzp predicted the run faster than it ran), with the device family, software stack and GPU count "
      "that ran it. hzp prints the errors of the group nearest a prediction beside it. Rewrite with `hzp validate "
      "cases --write-expected-error validation/expected_error.json` whenever the model or the cases change (`hzp "
      "validate cases --check` fails while it is stale).";
  j["source"] = source;
  j["runs"] = nlohmann::ordered_json::array();
  // One run a line, so that a rewrite reads as a diff of the runs that moved.
  std::string text = j.dump(1);
  text.erase(text.rfind('['));
  text += "[";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const CheckedRun& r = runs[i];
    const nlohmann::ordered_json row{{"name", r.name},
                                     {"family", r.family},
                                     {"stack", r.stack},
                                     {"gpus", r.gpus},
                                     {"error", std::round(r.error * 1e4) / 1e4}};
    text += (i == 0 ? "\n  " : ",\n  ") + row.dump();
  }
  return text + "\n ]\n}\n";
}

std::vector<CheckedRun> checked_runs_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  (void)o.integer("schema_version", 1, 1);
  (void)o.str("note");
  (void)o.str("source");
  std::vector<CheckedRun> runs;
  const std::size_t n = o.array("runs").size();
  for (std::size_t i = 0; i < n; ++i) {
    core::StrictObject g = o.element("runs", i);
    CheckedRun r;
    r.name = g.str("name");
    r.family = g.str("family");
    r.stack = g.str("stack");
    r.gpus = static_cast<int>(g.integer("gpus", 1, 1'000'000));
    r.error = g.number("error", -1, 100);
    g.finish();
    runs.push_back(r);
  }
  o.finish();
  return runs;
}

std::vector<std::string> stale_checked_runs(const std::vector<CheckedRun>& recorded, const std::vector<CheckedRun>& now,
                                            double slack) {
  std::map<std::string, const CheckedRun*> before;
  for (const auto& r : recorded) before[r.name] = &r;
  std::vector<std::string> out;
  for (const auto& r : now) {
    const auto it = before.find(r.name);
    if (it == before.end()) {
      out.push_back(fmt::format("{}: {:+.1f} %, not recorded", r.name, 100 * r.error));
      continue;
    }
    const CheckedRun& b = *it->second;
    if (b.family != r.family || b.stack != r.stack || b.gpus != r.gpus || std::abs(b.error - r.error) > slack) {
      out.push_back(fmt::format("{}: recorded {} / {} / {} GPUs {:+.1f} %, now {} / {} / {} GPUs {:+.1f} %", r.name,
                                b.family, b.stack, b.gpus, 100 * b.error, r.family, r.stack, r.gpus, 100 * r.error));
    }
    before.erase(it);
  }
  for (const auto& [name, r] : before) out.push_back(fmt::format("{}: recorded, no longer among the cases", name));
  return out;
}

const std::vector<CheckedRun>& recorded_checked_runs() {
  static const std::vector<CheckedRun> runs =
      checked_runs_from_json(expected_error_table(), "validation/expected_error.json (compiled in)");
  return runs;
}

std::string ExpectedError::group() const {
  if (runs == 0) return "no public run was checked";
  const std::string where = same_family ? fmt::format(" {}", family) : "";
  const std::string under = same_stack ? fmt::format(" under {}", stack) : same_family ? " under every stack" : "";
  const std::string scale =
      min_gpus == max_gpus ? fmt::format("{} GPUs", min_gpus) : fmt::format("{}-{} GPUs", min_gpus, max_gpus);
  return fmt::format("{} public{} run{}{} at {}", runs, where, runs == 1 ? "" : "s", under, scale);
}

std::string ExpectedError::warning() const {
  if (same_family && same_stack) return "";
  if (own_runs == 0) return fmt::format("no public run of {} on {} devices was checked", stack, family);
  return fmt::format("only {} public run{} of {} on {} devices {} checked, too few for a group of their own", own_runs,
                     own_runs == 1 ? "" : "s", stack, family, own_runs == 1 ? "was" : "were");
}

std::string ExpectedError::text() const {
  if (runs == 0) return "expected error: unknown (no public run was checked)\n";
  std::string out = fmt::format(
      "expected error of step time, tokens/s and cost: +-{:.1f} % (bias {:+.1f} %: hzp {} than the runs; worst {:.1f} "
      "%), from {}\n",
      100 * mean_abs, 100 * bias, bias >= 0 ? "faster" : "slower", 100 * max_abs, group());
  if (!warning().empty()) out += fmt::format("warning: {}; the figure above is the nearest group's\n", warning());
  return out;
}

ExpectedError expected_error(const std::vector<CheckedRun>& runs, const std::string& family, const std::string& stack,
                             int gpus) {
  ExpectedError e{family, stack};
  const auto near = [gpus](const CheckedRun& r) {
    return r.gpus * kScaleSpan >= gpus && r.gpus <= static_cast<long long>(gpus) * kScaleSpan;
  };
  const auto same_family = [&](const CheckedRun& r) { return r.family == family; };
  const auto same_both = [&](const CheckedRun& r) { return same_family(r) && r.stack == stack; };
  const std::vector<std::function<bool(const CheckedRun&)>> groups{
      [&](const CheckedRun& r) { return same_both(r) && near(r); }, same_both, same_family,
      [](const CheckedRun&) { return true; }};
  e.own_runs = static_cast<int>(std::count_if(runs.begin(), runs.end(), same_both));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::vector<const CheckedRun*> in;
    for (const auto& r : runs) {
      if (groups[g](r)) in.push_back(&r);
    }
    if (static_cast<int>(in.size()) < kMinExpectedRuns && g + 1 < groups.size()) continue;
    e.same_family = g <= 2;
    e.same_stack = g <= 1;
    e.runs = static_cast<int>(in.size());
    for (const CheckedRun* r : in) {
      e.mean_abs += std::abs(r->error) / static_cast<double>(in.size());
      e.bias += r->error / static_cast<double>(in.size());
      e.max_abs = std::max(e.max_abs, std::abs(r->error));
      e.min_gpus = e.min_gpus == 0 ? r->gpus : std::min(e.min_gpus, r->gpus);
      e.max_gpus = std::max(e.max_gpus, r->gpus);
    }
    break;
  }
  return e;
}

ExpectedError expected_error(double compute_capability, const std::string& stack, int gpus) {
  return expected_error(recorded_checked_runs(), device_family(compute_capability), stack, gpus);
}

}  // namespace hzp::validation
