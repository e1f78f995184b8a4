// Command-line flags generated from the option tables (plan/options.hpp and
// the scenario's in explore/scenario.hpp): one flag per option, parsed by the
// option's own parser, and problems' fields mapped back to their flags.
#pragma once

#include <CLI/CLI.hpp>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/options.hpp"
#include "explore/scenario.hpp"
#include "plan/options.hpp"

namespace hzp::cli {

/// The flags of a set of options, bound to storage this object owns (keep it
/// alive, and in place, while the CLI::App parses).
class OptionFlags {
 public:
  OptionFlags() = default;
  OptionFlags(const OptionFlags&) = delete;
  OptionFlags& operator=(const OptionFlags&) = delete;

  /// One flag per spec (with its aliases; a Boolean gets its true and false
  /// flags); `defaults` (key -> value) are shown in --help.
  void add(CLI::App* app, const std::vector<const core::OptionSpec*>& specs, const nlohmann::json& defaults);
  /// Whether any of these flags was given.
  [[nodiscard]] bool any_given() const;
  /// The first flag given, for "not both" messages ("" if none).
  [[nodiscard]] std::string first_given() const;
  /// The text given for `key`, if its flag was (not for Booleans).
  [[nodiscard]] std::optional<std::string> text(std::string_view key) const;
  /// Treats `key` as not given (a command's own meaning of a value, e.g. `--strategy all`).
  void forget(std::string_view key);
  /// The given flags' values, parsed and checked, in table order; every
  /// problem at once (fields are option keys).
  [[nodiscard]] std::vector<core::Problem> values(std::vector<std::pair<std::string, nlohmann::json>>& out) const;

 private:
  struct Entry {
    const core::OptionSpec* spec = nullptr;
    std::string text;
    bool on = false, off = false, forgotten = false;
    std::string preset;  // a value flag's value (OptionSpec::value_flags); `on` when given
    CLI::Option* value = nullptr;
    CLI::Option* on_flag = nullptr;
    CLI::Option* off_flag = nullptr;
    [[nodiscard]] bool given() const;
  };
  std::deque<Entry> entries_;  // a deque: CLI11 binds to its elements' addresses
};

/// Every plan option's spec, and those of the scenario (with or without the
/// engine settings), optionally only the listed keys.
[[nodiscard]] std::vector<const core::OptionSpec*> plan_specs(const std::vector<std::string>& only = {});
[[nodiscard]] std::vector<const core::OptionSpec*> scenario_specs(bool engine,
                                                                  const std::vector<std::string>& only = {});
/// The default values of every plan and scenario option, by key.
[[nodiscard]] nlohmann::json option_defaults();

/// The flag a problem's field stands for on the command line
/// ("param_shard" -> "--param-shard"; a key of no table -> "--" + key with '-').
[[nodiscard]] std::string flag_for_field(const std::string& field);

/// Sets each value on the plan or the scenario it belongs to.
void apply_values(const std::vector<std::pair<std::string, nlohmann::json>>& values, explore::Scenario& sc);

}  // namespace hzp::cli
