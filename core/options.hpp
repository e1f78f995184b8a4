// Declarative options: one row per option (key, type, range, help, flag), from
// which a command line, a JSON file reader and writer, sweep keys and a JSON
// Schema are generated, and structured problems that name the option's field.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hzp::core {

/// One thing wrong with an input: the field (an option's key, e.g.
/// "param_shard") and what was expected there. Whoever knows where the input
/// came from maps the field to a flag (`--param-shard`) or a file's key.
struct Problem {
  std::string field;
  std::string message;
  friend bool operator==(const Problem&, const Problem&) = default;
};

/// Problems found by a library check, all of them; the caller maps each field
/// to its flag or file key (see InputError for the one-line rendering).
class ProblemError : public std::runtime_error {
 public:
  explicit ProblemError(std::vector<Problem> problems);
  [[nodiscard]] const std::vector<Problem>& problems() const { return problems_; }

 private:
  std::vector<Problem> problems_;
};

/// The problems as one line: "<name(field)>: <message>; <name(field)>: ...".
template <class NameOf>
[[nodiscard]] std::string join_problems(const std::vector<Problem>& ps, NameOf name_of) {
  std::string s;
  for (const Problem& p : ps) s += (s.empty() ? "" : "; ") + name_of(p.field) + ": " + p.message;
  return s;
}

enum class ValueType {
  Integer,     // a whole number in [min, max]
  Number,      // a finite number in [min, max]
  Boolean,     // true | false
  Choice,      // one of `choices`
  TokenCount,  // an integer, or text with a K/M/G suffix (powers of two): "16M"
  Triple,      // three integers in [min, max]: [g_p, g_g, g_o]; text "8/8/64"
  Text,        // a non-empty string (a catalog name or a file path)
};

/// One option. `key` is its one spelling in files, sweeps, provenance and
/// problems; the command-line flag is derived from it ("param_shard" ->
/// "--param-shard") unless `flag` says otherwise.
struct OptionSpec {
  std::string key;
  ValueType type = ValueType::Integer;
  std::string help;
  double min = 0;
  double max = 0;
  std::vector<std::string> choices;  // Choice: every accepted name
  /// null is a value: the option is unset and its documented rule applies.
  bool nullable = false;
  /// Files must state the key (false for keys added after files were written).
  bool required_in_file = true;
  /// Boolean: the flag that sets true (may be empty) and the one that sets false.
  std::string flag;
  std::string false_flag;
  /// Older spellings of the flag, and the field's own (Megatron-LM's
  /// `--tensor-model-parallel-size`), still accepted on the command line.
  std::vector<std::string> flag_aliases;
  /// Choice: other names of a value (alias -> choice), accepted wherever the
  /// option is read and normalised to the choice (PyTorch's "FULL_SHARD" ->
  /// "fsdp"); the key keeps one spelling.
  std::vector<std::pair<std::string, std::string>> choice_aliases;
  /// Flags without a value that set the option to one (flag -> value text,
  /// Megatron-LM's `--use-distributed-optimizer` -> strategy "zero1").
  std::vector<std::pair<std::string, std::string>> value_flags;
  /// A unit or form for the documentation ("tokens", "Gb/s").
  std::string unit;
};

/// A spec of `type` with its help and, for numbers, its inclusive range.
[[nodiscard]] OptionSpec option_spec(std::string key, ValueType type, std::string help, double min = 0, double max = 0);

/// The row of `key` in a table whose rows have a `spec` (an OptionSpec) and
/// `set(Target&, value)`, or nullptr.
template <class Row>
[[nodiscard]] const Row* find_row(const std::vector<Row>& table, std::string_view key) {
  for (const Row& row : table) {
    if (row.spec.key == key) return &row;
  }
  return nullptr;
}

/// The flag that sets this option ("--" + key with '-' for '_'), or for a
/// Boolean with only a false flag, that one.
[[nodiscard]] std::string flag_of(const OptionSpec& spec);

/// Checks a JSON value against the option (type, range, choices, null) and
/// returns it normalised (a TokenCount's "16M" becomes 16777216), or the
/// message of what was expected.
struct Checked {
  nlohmann::json value;
  std::string problem;  // empty: `value` is good
};
[[nodiscard]] Checked check_value(const OptionSpec& spec, const nlohmann::json& value);

/// The option's value as command-line text (the inverse of value_from_text).
[[nodiscard]] std::string value_to_text(const OptionSpec& spec, const nlohmann::json& value);

/// Parses command-line or `--set` text for the option, then checks it.
/// Integers reject signs, fractions and overflow; numbers reject NaN and inf.
[[nodiscard]] Checked value_from_text(const OptionSpec& spec, std::string_view text);
/// A decimal number as people write one ("12", "0.5", "-3", "1.5e9"), the
/// whole text: no hexadecimal ("0x10"), no sign "+", no inf or nan, no
/// surrounding space; nullopt otherwise.
[[nodiscard]] std::optional<double> parse_decimal(std::string_view text);

/// A check of a hand-declared flag's text against `spec` (the same parser as
/// the option tables'): "" when it is good, else what was expected. Fits
/// CLI11's Option::check.
[[nodiscard]] std::function<std::string(const std::string&)> text_check(OptionSpec spec);
/// Checks of flags declared by hand, through text_check: a file or directory
/// name (not empty), a finite number in [min, max], a whole number in [min, max].
[[nodiscard]] inline std::function<std::string(const std::string&)> file_name() {
  return text_check(option_spec("file", ValueType::Text, ""));
}
[[nodiscard]] inline std::function<std::string(const std::string&)> number_in(double min, double max) {
  return text_check(option_spec("number", ValueType::Number, "", min, max));
}
[[nodiscard]] inline std::function<std::string(const std::string&)> integer_in(double min, double max) {
  return text_check(option_spec("integer", ValueType::Integer, "", min, max));
}

/// "16M" -> 16·2^20 (K, M, G are powers of two); nullopt unless a positive
/// integer of at most 12 digits with an optional suffix.
[[nodiscard]] std::optional<std::int64_t> parse_token_count(std::string_view text);

/// Checks `value` for the row of `key` and sets it on `target`; a problem
/// names the key (an unknown one as "unknown <what>").
template <class Row, class Target>
[[nodiscard]] std::optional<Problem> set_row(const std::vector<Row>& table, Target& target, std::string_view key,
                                             const nlohmann::json& value, std::string_view what) {
  const Row* row = find_row(table, key);
  if (!row) return Problem{std::string(key), "unknown " + std::string(what)};
  Checked c = check_value(row->spec, value);
  if (!c.problem.empty()) return Problem{row->spec.key, c.problem};
  row->set(target, c.value);
  return std::nullopt;
}

/// The option as a JSON Schema property (type, range, enum, default, description).
[[nodiscard]] nlohmann::ordered_json schema_property(const OptionSpec& spec, const nlohmann::json& default_value);

/// A value different from `default_value` that the option accepts (tests use
/// it to prove that every option reaches every channel).
[[nodiscard]] nlohmann::json sample_value(const OptionSpec& spec, const nlohmann::json& default_value);

/// The closest of `candidates` to `word` by edit distance, if close enough to
/// be a likely typo ("did you mean ...?").
[[nodiscard]] std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace hzp::core
