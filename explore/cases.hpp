// `hzp validate cases`: every published measurement in validation/cases/
// simulated under its own model, cluster and plan, against what was measured.
#pragma once

#include <string>
#include <vector>

#include "validation/cases.hpp"

namespace hzp::explore {

/// The calibration for the device of a case's cluster and the case's stack:
/// `<dir>/<device name with spaces as '-'>.<stack>.json` (fitted under that
/// stack: host costs and effective efficiencies hold for it only), else
/// `<dir>/<device>.json` (hardware figures only, no "stack": every stack),
/// else none ("").
[[nodiscard]] std::string calibration_for(const validation::Case& c, const std::string& dir);

/// Simulates one case with the analytic engine (and the calibration overlay,
/// if any); the prediction of the case's quantity.
[[nodiscard]] validation::Scored run_case(const validation::Case& c, const std::string& calibration = "");

/// All cases, over `jobs` forked processes (the case order is kept), each
/// with its device's calibration from `calibration_dir`.
[[nodiscard]] std::vector<validation::Scored> run_cases(const std::vector<validation::Case>& cases, int jobs,
                                                        const std::string& calibration_dir);

/// The table people read: every case, then the summary per group.
[[nodiscard]] std::string cases_table(const std::vector<validation::Scored>& scored);
/// The same as JSON.
[[nodiscard]] std::string cases_json(const std::vector<validation::Scored>& scored);

}  // namespace hzp::explore
