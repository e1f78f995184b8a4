// A Megatron-LM command line as plan options (`hzp simulate
// --from-megatron-args "..."`): its flags for the parallel sizes, batch,
// recompute and overlaps mapped through the plan option table's aliases,
// Megatron-LM's own defaults where they differ from hzp's, and the flags that
// say nothing about the plan listed as ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hzp::cli {

struct MegatronImport {
  /// Plan options by key, Megatron-LM's defaults first, then the flags in order.
  std::vector<std::pair<std::string, nlohmann::json>> values;
  /// The flags that set them ("--tensor-model-parallel-size 8 -> tp 8").
  std::vector<std::string> mapped;
  /// Flags with no plan option (the model's shape, data, logging), as given.
  std::vector<std::string> ignored;
};

/// Reads the arguments (whitespace-separated, `\` line continuations and
/// `--flag=value` allowed). A value that does not fit its option is an
/// InputError naming `source` and the Megatron flag.
[[nodiscard]] MegatronImport import_megatron_args(const std::string& text, const std::string& source);

/// The import as the lines `hzp simulate` prints: what was mapped and what ignored.
[[nodiscard]] std::string describe_import(const MegatronImport& m);

}  // namespace hzp::cli
