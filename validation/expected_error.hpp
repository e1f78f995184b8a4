// What error to expect of a prediction (issue 43, item 1): every validation
// case's step-time error as a throughput error, recorded with its device
// family, software stack and GPU count (`hzp validate cases
// --write-expected-error validation/expected_error.json`, compiled into the
// binary). Beside a prediction hzp prints the errors of the nearest group of
// those runs (same family and stack, similar scale) and says so where no
// public run of that family and stack was checked; the tolerance within
// which two plans are a tie is the same figure.
#pragma once

#include <string>
#include <vector>

#include "validation/cases.hpp"

namespace hzp::validation {

/// The generation a device belongs to, by its CUDA compute capability:
/// Volta (7.0), Ampere (8.x), Hopper (9.x), Blackwell (10.x and up).
[[nodiscard]] std::string device_family(double compute_capability);

/// Whether a quantity measures speed (step time, TFLOP/s, tokens/s): memory does not.
[[nodiscard]] bool time_like(Quantity q);
/// A case's error as a throughput error: predicted over measured throughput
/// minus one, whatever speed the case measures (+: hzp predicted the run
/// faster than it ran).
[[nodiscard]] double throughput_error(const Scored& s);

/// One checked run: a validation case that measured speed.
struct CheckedRun {
  std::string name, family, stack;
  int gpus = 0;
  double error = 0;  // throughput error
};

/// The speed cases, the ones marked inconsistent with another left out, by name.
[[nodiscard]] std::vector<CheckedRun> checked_runs(const std::vector<Scored>& scored);
[[nodiscard]] std::string checked_runs_json(const std::vector<CheckedRun>& runs, const std::string& source);
/// Reads the table; throws InputError naming `file` and the key.
[[nodiscard]] std::vector<CheckedRun> checked_runs_from_json(const std::string& text, const std::string& file);
/// Where freshly checked runs depart from the recorded ones (a run added,
/// gone, or its error moved by more than `slack`): one line each.
[[nodiscard]] std::vector<std::string> stale_checked_runs(const std::vector<CheckedRun>& recorded,
                                                          const std::vector<CheckedRun>& now, double slack = 0.001);

/// The table compiled into this build (validation/expected_error.json).
[[nodiscard]] const std::vector<CheckedRun>& recorded_checked_runs();

/// The error distribution of the group of checked runs nearest a prediction.
struct ExpectedError {
  std::string family, stack;  // of the prediction
  bool same_family = false, same_stack = false;
  int runs = 0, min_gpus = 0, max_gpus = 0;
  int own_runs = 0;     // checked runs of the prediction's own family and stack, at any scale
  double mean_abs = 0;  // mean |throughput error|
  double bias = 0;      // mean signed throughput error (+: predictions faster than the runs)
  double max_abs = 0;
  /// "11 public Hopper runs under torch-fsdp2-compile at 8-128 GPUs".
  [[nodiscard]] std::string group() const;
  /// Empty where the group is the prediction's own family and stack, else
  /// why it is not ("no public run of hzp-async on Hopper devices was
  /// checked", "only 2 public runs of torch-fsdp2 on Hopper devices were
  /// checked, too few for a group of their own").
  [[nodiscard]] std::string warning() const;
  /// What hzp prints beside a prediction: the figure, the bias, the worst
  /// run and the group, then the warning on a line of its own where there is one.
  [[nodiscard]] std::string text() const;
};

/// Groups are widened until they hold kMinExpectedRuns: the prediction's
/// family and stack at a GPU count within kScaleSpan either way, then at any
/// scale, then its family under any stack, then every run.
inline constexpr int kMinExpectedRuns = 3;
inline constexpr int kScaleSpan = 4;
[[nodiscard]] ExpectedError expected_error(const std::vector<CheckedRun>& runs, const std::string& family,
                                           const std::string& stack, int gpus);
/// From the table compiled in.
[[nodiscard]] ExpectedError expected_error(double compute_capability, const std::string& stack, int gpus);

}  // namespace hzp::validation
