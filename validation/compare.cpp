// Timeline comparison (see compare.hpp).
#include "validation/compare.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <set>
#include <tuple>

#include "core/error.hpp"

namespace hzp::validation {
namespace {

std::string kind_key(const traces::OpRecord& r) {
  if (r.kind == core::OpKind::Collective) return fmt::format("{}/{}", r.what, core::to_string(r.group_kind));
  return r.what;
}

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

}  // namespace

double KindError::relative_error() const { return rel(predicted, measured); }
double Comparison::step_error() const { return rel(predicted_step, measured_step); }

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
  return c;
}

}  // namespace hzp::validation
