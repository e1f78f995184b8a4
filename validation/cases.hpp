// Published measurements as validation cases (validation/cases/*.json): each
// names its source, the full model, cluster and plan, the measured quantity
// with its FLOP-counting convention, and a tolerance. Parsing and scoring live
// here; running a case through plan and engine is composed by the CLI.
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/names.hpp"

namespace hzp::validation {

enum class Quantity {
  IterationTime,   // "iteration_time_s": seconds per training step
  TflopsPerGpu,    // "tflops_per_gpu": achieved TFLOP/s per GPU under the case's FLOP convention
  StatesGiB,       // "states_GiB": parameters + gradients + optimizer state per GPU of the transformer
                   //   layers (Korthikanti's count: the rank class holding the least, a stage of layers only)
  ActivationsGiB,  // "activations_GiB": activations held per GPU at the peak
  ReservedGiB,     // "reserved_GiB": the most device memory the caching allocator held on any GPU
                   //   (PyTorch's reserved_bytes.all.peak)
  TokensPerGpu,    // "tokens_per_s_per_gpu": training tokens per second per GPU
};
inline constexpr core::Names<Quantity, 6> kQuantities{{{Quantity::IterationTime, "iteration_time_s"},
                                                       {Quantity::TflopsPerGpu, "tflops_per_gpu"},
                                                       {Quantity::StatesGiB, "states_GiB"},
                                                       {Quantity::ActivationsGiB, "activations_GiB"},
                                                       {Quantity::ReservedGiB, "reserved_GiB"},
                                                       {Quantity::TokensPerGpu, "tokens_per_s_per_gpu"}}};
[[nodiscard]] std::string_view to_string(Quantity q);

struct Case {
  std::string file;  // where it was read from (errors name it)
  std::string name, group, source, notes;
  std::string model_json;  // the model object, as JSON text (read by the model loader)
  std::string cluster;     // catalog name or path
  std::string stack;       // the software stack that ran it: a catalog name, or
  std::string stack_json;  // the stack object as JSON text when the case gives one (read by the stack loader)
  /// Cases that measure the same work under two data-parallel shardings
  /// carry the same pair name and their role in it ("hierarchical": the
  /// hierarchical or partial sharding; "full": the full-group one): the
  /// speedup of one over the other is scored as well.
  std::string pair, pair_role;
  /// Why this measurement contradicts another of the set (validation/consistency.py); empty: it does not.
  std::string inconsistent;
  std::optional<double> nic_gbps;  // what-if NIC speed per device, Gb/s
  /// The devices' board power limit the run was held to, W, where it was
  /// below the rated one (the rated limit or a cap the device profile lists).
  std::optional<double> power_limit;
  int gpus = 0;
  std::string plan_json;  // the plan object, as JSON text (read by the plan loader)
  Quantity quantity = Quantity::IterationTime;
  double measured = 0;
  std::optional<std::string> flops_convention;  // required for tflops_per_gpu
  double tolerance = 0;                         // |signed error| allowed, relative
};

/// Throws InputError naming the file and key for anything malformed.
[[nodiscard]] Case case_from_json(const std::string& text, const std::string& file);
/// The `*.json` files in `dir` (a case directory), paths as found; throws
/// InputError when `dir` is not a directory of `what`.
[[nodiscard]] std::vector<std::string> case_files(const std::string& dir, const std::string& what);

/// Every `*.json` under `dir` whose name or group contains one of `filters`
/// (all when none), sorted by name.
[[nodiscard]] std::vector<Case> load_cases(const std::string& dir, const std::vector<std::string>& filters = {});

/// FLOPs of one iteration of a GPT model as Megatron-LM counts them
/// (Narayanan et al. 2021, eq. 3, with activation recomputation):
/// 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
[[nodiscard]] double megatron_2021_flops(double batch, double seq, double layers, double hidden, double vocab);
/// The FLOPs the named convention counts for one iteration; throws
/// InputError (naming `file`) for an unknown convention.
struct GptShape {
  double batch = 0, seq = 0, layers = 0, hidden = 0, vocab = 0;
};
[[nodiscard]] double convention_flops(const std::string& convention, const GptShape& g, const std::string& file);

struct Scored {
  std::string name, group;
  Quantity quantity = Quantity::IterationTime;
  double measured = 0, predicted = 0;
  double tolerance = 0;
  bool fits = true;                 // the predicted plan fits in device memory
  std::string pair{}, pair_role{};  // as the case gives them
  bool consistent = true;           // no contradiction marked in the case
  std::string family{}, stack{};    // the device family and software stack that ran it
  int gpus = 0;
  [[nodiscard]] double error() const { return (predicted - measured) / measured; }  // signed, relative
  [[nodiscard]] bool within() const;
};

/// A hierarchical-vs-full pair: the speedup of the hierarchical plan over the
/// full-group one (throughput ratio, or time ratio full / hierarchical),
/// measured and predicted.
struct PairScore {
  std::string pair;
  double measured = 0, predicted = 0;
  [[nodiscard]] double error() const { return predicted / measured - 1; }
  /// Both say the same plan is faster (a measured tie within 2 % agrees with anything).
  [[nodiscard]] bool same_sign() const { return std::abs(measured - 1) < 0.02 || (measured - 1) * (predicted - 1) > 0; }
  /// Within 15 % of the measured speedup and of the same sign: the target of
  /// the sharded-data-parallel validation set.
  [[nodiscard]] bool within() const { return same_sign() && std::abs(error()) <= 0.15; }
};
/// Every pair with one hierarchical and one full member among `scored`, in first-seen order.
[[nodiscard]] std::vector<PairScore> score_pairs(const std::vector<Scored>& scored);

struct Summary {
  std::string group;
  int cases = 0, within = 0;
  double mean_abs = 0, max_abs = 0, mean_signed = 0;
  std::string worst;  // the case with the largest |error|
};
/// Per group (in first-seen order) and, last, over the time-like quantities
/// (iteration time, TFLOP/s, tokens/s): "hopper" (groups starting with
/// "hopper-": H100/H200 runs), "sharded-dp" (the other groups ending in
/// "-sharded"), "megatron-era" (the rest), "all",
/// "all consistent" (without the cases marked inconsistent); "memory" when
/// there are memory cases.
[[nodiscard]] std::vector<Summary> summarize(const std::vector<Scored>& scored);

/// The known misses: the signed error of every case outside its tolerance
/// when the baseline was written (`hzp validate cases --write-baseline`). A
/// case's tolerance is its measurement's noise; the baseline is what keeps CI
/// honest while the model misses some of them: a recorded miss may not get
/// worse, and no new case may fall outside its tolerance.
struct MissBaseline {
  std::map<std::string, double> errors;  // case name -> signed relative error as recorded
};
/// Reads a baseline; throws InputError naming `file` and the key.
[[nodiscard]] MissBaseline miss_baseline_from_json(const std::string& text, const std::string& file);
/// The misses among `scored` (cases outside their tolerance), as a baseline.
[[nodiscard]] MissBaseline misses_of(const std::vector<Scored>& scored);

/// How far a recorded miss may drift before the check fails: one percentage
/// point of |error| (the cases are deterministic; a move this large is a
/// change of the model, to be reviewed as a new baseline).
inline constexpr double kMissSlack = 0.01;

struct BaselineCheck {
  std::vector<std::string> failures;  // one line each: a new miss, or a recorded miss grown past its slack
  std::vector<std::string> notes;     // recorded misses now within tolerance or better by more than the slack
};
/// Each scored case against the baseline: a case outside its tolerance fails
/// unless recorded, and a recorded one fails when its |error| grew by more
/// than kMissSlack. Cases the baseline records but `scored` lacks are ignored
/// (a --filter run).
[[nodiscard]] BaselineCheck check_misses(const std::vector<Scored>& scored, const MissBaseline& baseline);

}  // namespace hzp::validation
