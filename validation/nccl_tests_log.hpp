// Measurements of collectives for `hzp calibrate` that come from nccl-tests
// rather than from `hzp-run bench`: a raw nccl-tests log (all_gather_perf,
// reduce_scatter_perf, all_reduce_perf output) or a validation case
// (validation/collectives/*.json), turned into bench results.
#pragma once

#include <string>

#include "traces/bench_results.hpp"
#include "validation/collective_cases.hpp"

namespace hzp::validation {

/// Parses an nccl-tests log: the collective from its "Collective test
/// starting: X_perf" line or, failing that, the file name; ranks and ranks
/// per node from its "# Rank" lines (ranks ÷ distinct hosts); one result per
/// data row from the out-of-place time. `device` names the device the results
/// are for (the log names GPUs as the driver does). Throws InputError naming
/// the file for a log it cannot read.
[[nodiscard]] traces::BenchResults bench_results_from_nccl_tests(const std::string& text, const std::string& file,
                                                                 const std::string& device);

/// A collective case's rows as bench results. Rows a single nccl-tests
/// process drove several GPUs for and that run no longer than its host's
/// calls take (`host_floor_us`) time the host, not the collective: they are
/// left out.
[[nodiscard]] traces::BenchResults bench_results_from_case(const CollectiveCase& c, const std::string& device,
                                                           double host_floor_us);

}  // namespace hzp::validation
