// Names of strategies, recomputation modes and gradient dtypes, and the
// strategy-dependent defaults that need no model or cluster, and whether a
// stack runs a plan.
#include "plan/plan.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hzp::plan {

std::string_view to_string(models::Recompute r) { return core::name_of(models::kRecomputes, r); }
std::optional<models::Recompute> parse_recompute(std::string_view s) {
  return core::parse_name(models::kRecomputes, s);
}
std::string_view to_string(models::Precision p) { return core::name_of(models::kPrecisions, p); }
std::optional<models::Precision> parse_precision(std::string_view s) {
  return core::parse_name(models::kPrecisions, s);
}

std::optional<core::Dtype> parse_grad_dtype(std::string_view s) {
  for (auto d : {core::Dtype::Fp32, core::Dtype::Bf16}) {
    if (s == core::to_string(d)) return d;
  }
  return std::nullopt;
}

std::string_view to_string(Strategy s) { return core::name_of(kStrategies, s); }

std::optional<Strategy> parse_strategy(std::string_view s) {
  if (s == "zero3") return Strategy::Fsdp;  // DeepSpeed's name, an alias
  return core::parse_name(kStrategies, s);
}

std::vector<Strategy> all_strategies() {
  return {Strategy::Ddp,  Strategy::Zero1, Strategy::Zero2, Strategy::Fsdp,
          Strategy::Hsdp, Strategy::Hpz,   Strategy::Hzp};
}

bool resolve_async(const PlanOptions& o, const stacks::StackSpec& stack) {
  return o.async.value_or(o.strategy == Strategy::Hzp && stack.overlap.background_threads);
}

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return out;
}

}  // namespace

std::optional<std::string> not_runnable(const stacks::StackSpec& stack, const PlanOptions& o) {
  const stacks::Runs& runs = stack.runs;
  if (runs.strategies) {
    const auto& names = *runs.strategies;
    const std::string name(to_string(o.strategy));
    const bool listed = std::find(names.begin(), names.end(), name) != names.end() ||
                        (o.strategy == Strategy::Fsdp && std::find(names.begin(), names.end(), "zero3") != names.end());
    if (!listed) return fmt::format("{} runs {}, not {}", stack.name, joined(names), name);
  }
  if (runs.parallelism) {
    const auto& names = *runs.parallelism;
    const std::pair<const char*, int> used[] = {
        {"tp", o.tp}, {"pp", o.pp}, {"cp", o.cp}, {"ep", o.ep}, {"ulysses", o.ulysses}};
    for (const auto& [name, size] : used) {
      if (size > 1 && std::find(names.begin(), names.end(), name) == names.end()) {
        return fmt::format("{} runs {}, not {} {}", stack.name,
                           names.empty() ? std::string("no model parallelism") : "model parallelism " + joined(names),
                           name, size);
      }
    }
  }
  return std::nullopt;
}

}  // namespace hzp::plan
