// `hzp plan --compare fsdp,hsdp,hzp`: the best plan of each strategy family
// on one cluster and GPU count, each under the stack that runs it (the
// query's, or `family@stack`: FULL_SHARD@torch-fsdp2), each family its own
// search so that no family's branch and bound is cut by another's plans;
// side by side with the terms that decide between them and each family's
// expected error.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "explore/search.hpp"
#include "validation/expected_error.hpp"

namespace hzp::cli {

/// Strategy names as every channel reads them (PyTorch's FULL_SHARD is fsdp,
/// zero3 is fsdp), each once; InputError naming `flag` otherwise.
[[nodiscard]] std::vector<plan::Strategy> strategies_of(const std::vector<std::string>& names, const char* flag);

struct Family {
  plan::Strategy strategy = plan::Strategy::Fsdp;
  std::string stack;  // the stack that runs it
  std::string label;  // "fsdp", or "fsdp@torch-fsdp2" where the families' stacks differ
};
/// "fsdp", "HYBRID_SHARD@torch-fsdp2": a strategy and, after '@', the stack
/// that runs it (default: `stack`). A family its stack does not run is
/// refused (plan::not_runnable), naming --compare.
[[nodiscard]] std::vector<Family> families_of(const std::vector<std::string>& texts, const std::string& stack);

struct Compared {
  Family family;
  std::optional<explore::PlanChoice> best;  // none: no plan of the family fits
  explore::SettingTally tally;              // where the family's candidates went
  validation::ExpectedError expected;       // of the family's device and stack
};

/// One search per family (q.stack and q.strategies replaced, q.top 1); q
/// names one cluster and one GPU count.
[[nodiscard]] std::vector<Compared> compare_families(explore::PlanQuery q, const std::vector<Family>& families);

/// The families' best plans as a table, why each wins or loses against the
/// fastest (explore::why_text, ties within `tolerance`, a fraction), and
/// each family's expected error.
[[nodiscard]] std::string compare_text(const explore::PlanQuery& q, const std::vector<Compared>& families,
                                       double tolerance);
[[nodiscard]] nlohmann::ordered_json compare_json(const std::vector<Compared>& families);

}  // namespace hzp::cli
