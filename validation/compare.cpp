// Timeline comparison (see compare.hpp).
#include "validation/compare.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <set>
#include <tuple>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

core::Duration span(const traces::Timeline& t) {
  std::int64_t lo = INT64_MAX, hi = 0;
  for (const auto& r : t.ops) {
    lo = std::min(lo, r.start.count_ns());
    hi = std::max(hi, r.end.count_ns());
  }
  return t.ops.empty() ? core::Duration{} : core::Duration::ns(hi - lo);
}

double rel(core::Duration p, core::Duration m) {
  return m.count_ns() == 0 ? 0.0 : static_cast<double>(p.count_ns() - m.count_ns()) / static_cast<double>(m.count_ns());
}

std::set<std::tuple<int, int, int>> op_set(const traces::Timeline& t) {
  std::set<std::tuple<int, int, int>> s;
  for (const auto& r : t.ops) s.emplace(r.program, r.stream, r.op_id);
  return s;
}

using Intervals = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Sorted, disjoint union.
Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& [a, b] : v) {
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else if (b > a) {
      out.emplace_back(a, b);
    }
  }
  return out;
}

std::int64_t length(const Intervals& v) {
  std::int64_t n = 0;
  for (const auto& [a, b] : v) n += b - a;
  return n;
}

// |a \ b| for two sorted disjoint unions.
std::int64_t minus_length(const Intervals& a, const Intervals& b) {
  std::int64_t n = 0;
  std::size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    std::int64_t at = lo;
    for (std::size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > at) n += b[k].first - at;
      at = std::max(at, b[k].second);
    }
    if (at < hi) n += hi - at;
  }
  return n;
}

bool communication(const traces::OpRecord& r) { return r.kind != core::OpKind::Compute; }

std::string label(const traces::OpRecord& r) {
  return fmt::format("`{}` ({}, class {} stream {} op {})", r.name, kind_key(r), r.program, r.stream, r.op_id);
}

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }
std::string ms(core::Duration d) { return fmt::format("{:.3f}", d.to_ms()); }

}  // namespace

std::string kind_key(const traces::OpRecord& r) {
  if (r.kind == core::OpKind::Collective) return fmt::format("{}/{}", r.what, core::to_string(r.group_kind));
  return r.what;
}

double KindError::relative_error() const { return rel(predicted, measured); }
double Comparison::step_error() const { return rel(predicted_step, measured_step); }
double Exposure::overlap() const {
  return communication.count_ns() == 0
             ? 1.0
             : 1.0 - static_cast<double>(exposed.count_ns()) / static_cast<double>(communication.count_ns());
}

Exposure exposure(const traces::Timeline& t) {
  std::map<int, std::pair<Intervals, Intervals>> by_program;  // (communication, compute)
  for (const auto& r : t.ops) {
    auto& [comm, comp] = by_program[r.program];
    (communication(r) ? comm : comp).emplace_back(r.start.count_ns(), r.end.count_ns());
  }
  Exposure worst;
  bool first = true;
  for (auto& [p, v] : by_program) {
    const Intervals comm = merged(v.first), comp = merged(v.second);
    const auto exposed = core::Duration::ns(minus_length(comm, comp));
    if (first || exposed > worst.exposed) {
      worst = Exposure{exposed, core::Duration::ns(length(comm)), p};
      first = false;
    }
  }
  return worst;
}

CriticalPath critical_path(const traces::Timeline& t) {
  CriticalPath cp;
  if (t.ops.empty()) return cp;
  std::size_t last = 0;
  for (std::size_t i = 1; i < t.ops.size(); ++i) {
    const auto& a = t.ops[i];
    const auto& b = t.ops[last];
    if (std::tuple{a.end.count_ns(), -a.program} > std::tuple{b.end.count_ns(), -b.program}) last = i;
  }
  // The rank class's ops by end time (ties by start, then index: deterministic).
  const int program = t.ops[last].program;
  std::vector<std::size_t> by_end;
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    if (t.ops[i].program == program) by_end.push_back(i);
  }
  std::sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
    return std::tuple{t.ops[a].end.count_ns(), t.ops[a].start.count_ns(), a} <
           std::tuple{t.ops[b].end.count_ns(), t.ops[b].start.count_ns(), b};
  });
  std::size_t at = last;
  std::set<std::size_t> seen{at};
  while (true) {
    cp.ops.push_back(at);
    const std::int64_t start = t.ops[at].start.count_ns();
    auto it = std::upper_bound(by_end.begin(), by_end.end(), start,
                               [&](std::int64_t s, std::size_t i) { return s < t.ops[i].end.count_ns(); });
    std::size_t next = SIZE_MAX;
    while (it != by_end.begin()) {
      --it;
      if (!seen.contains(*it)) {
        next = *it;
        break;
      }
    }
    if (next == SIZE_MAX) break;
    seen.insert(next);
    at = next;
  }
  std::reverse(cp.ops.begin(), cp.ops.end());
  for (std::size_t i : cp.ops) cp.by_kind[kind_key(t.ops[i])] += t.ops[i].end - t.ops[i].start;
  return cp;
}

Comparison compare(const traces::Timeline& predicted, const traces::Timeline& measured) {
  if (predicted.header.schedule_sha256 != measured.header.schedule_sha256) {
    throw core::InputError(
        "measured timeline", "schedule_sha256",
        fmt::format("expected the predicted timeline's Schedule {}, got {}: these are runs of different Schedules",
                    predicted.header.schedule_sha256, measured.header.schedule_sha256));
  }
  if (op_set(predicted) != op_set(measured)) {
    throw core::InputError("measured timeline", "ops",
                           "expected the same ops as the predicted timeline (same program, stream and op ids)");
  }
  Comparison c;
  c.predicted_step = span(predicted);
  c.measured_step = span(measured);
  for (const auto& r : predicted.ops) c.by_kind[kind_key(r)].predicted += r.end - r.start;
  for (const auto& r : measured.ops) c.by_kind[kind_key(r)].measured += r.end - r.start;
  c.predicted_exposure = exposure(predicted);
  c.measured_exposure = exposure(measured);
  const CriticalPath pp = critical_path(predicted), mp = critical_path(measured);
  for (const auto& [k, d] : pp.by_kind) c.critical_by_kind[k].predicted = d;
  for (const auto& [k, d] : mp.by_kind) c.critical_by_kind[k].measured = d;
  c.predicted_path_ops = pp.ops.size();
  c.measured_path_ops = mp.ops.size();
  auto key = [](const traces::OpRecord& r) { return std::tuple{r.program, r.stream, r.op_id}; };
  for (std::size_t back = 0; back < std::max(pp.ops.size(), mp.ops.size()); ++back) {
    const bool in_p = back < pp.ops.size(), in_m = back < mp.ops.size();
    const traces::OpRecord* p = in_p ? &predicted.ops[pp.ops[pp.ops.size() - 1 - back]] : nullptr;
    const traces::OpRecord* m = in_m ? &measured.ops[mp.ops[mp.ops.size() - 1 - back]] : nullptr;
    if (p && m && key(*p) == key(*m)) continue;
    c.divergence = fmt::format("{} ops before the end: predicted {}, measured {}", back,
                               p ? label(*p) : "(path starts)", m ? label(*m) : "(path starts)");
    break;
  }
  return c;
}

std::string markdown_report(const Comparison& c, const traces::Timeline& predicted, const traces::Timeline& measured,
                            const std::string& picture) {
  std::string md = fmt::format("# Predicted vs measured: {}\n\n", predicted.header.schedule_name);
  md += fmt::format("Schedule `{}`.\n\n", predicted.header.schedule_sha256);
  for (const auto* t : {&predicted, &measured}) {
    if (!t->header.unreliable.empty()) {
      md += fmt::format("**Unreliable {} trace** (compared with --accept-unreliable): {}\n\n",
                        t == &predicted ? "predicted" : "measured", t->header.unreliable);
    }
  }
  md += "| | engine | hzp | detail |\n|---|---|---|---|\n";
  md += fmt::format("| predicted | {} | {} ({}) | {} |\n", predicted.header.engine, predicted.header.hzp_version,
                    predicted.header.git_revision, predicted.header.engine_detail);
  md += fmt::format("| measured | {} | {} ({}) | {} |\n\n", measured.header.engine, measured.header.hzp_version,
                    measured.header.git_revision, measured.header.engine_detail);
  md += "| | predicted | measured | error |\n|---|---:|---:|---:|\n";
  md += fmt::format("| step (ms) | {} | {} | {} |\n", ms(c.predicted_step), ms(c.measured_step), pct(c.step_error()));
  md +=
      fmt::format("| exposed communication (ms) | {} | {} | {} |\n", ms(c.predicted_exposure.exposed),
                  ms(c.measured_exposure.exposed), pct(rel(c.predicted_exposure.exposed, c.measured_exposure.exposed)));
  md += fmt::format("| communication hidden by compute | {:.1f}% | {:.1f}% | {:+.1f} points |\n\n",
                    100 * c.predicted_exposure.overlap(), 100 * c.measured_exposure.overlap(),
                    100 * (c.predicted_exposure.overlap() - c.measured_exposure.overlap()));
  md +=
      "## Time by op kind (summed over ops)\n\n| kind | predicted (ms) | measured (ms) | error "
      "|\n|---|---:|---:|---:|\n";
  for (const auto& [k, e] : c.by_kind) {
    md += fmt::format("| {} | {} | {} | {} |\n", k, ms(e.predicted), ms(e.measured), pct(e.relative_error()));
  }
  md += fmt::format(
      "\n## Critical path\n\n{} ops predicted, {} measured. {}\n\n| kind | predicted (ms) | measured (ms) |\n"
      "|---|---:|---:|\n",
      c.predicted_path_ops, c.measured_path_ops,
      c.divergence.empty() ? "The same ops on both." : "They differ " + c.divergence + ".");
  for (const auto& [k, e] : c.critical_by_kind) {
    md += fmt::format("| {} | {} | {} |\n", k, ms(e.predicted), ms(e.measured));
  }
  if (!picture.empty()) md += fmt::format("\n![predicted and measured timelines]({})\n", picture);
  return md;
}

}  // namespace hzp::validation
