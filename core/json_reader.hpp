// Strict reading of JSON configuration objects: every key must be known, every
// required key present, and each value of the expected type and range. Errors
// name the file and the full key path (e.g. "scale_out.tiers[1].radix").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.hpp"
#include "core/names.hpp"

namespace hzp::core {

/// Records what readers ask of their input — every key, its type and range,
/// whether every object of its kind holds it — so the JSON Schema of an input
/// is derived from the reader that enforces it and cannot drift from it.
/// While a recorder's Scope is alive, every StrictObject on that thread
/// reports to it.
class SchemaRecorder {
 public:
  struct Field {
    std::string type;  // integer | number | string | boolean | object | array | any
    bool nullable = false;
    bool optional = false;  // probed with has(): read only when present
    std::optional<double> min, max;
    bool min_exclusive = false;
    long long reads = 0;
    std::optional<nlohmann::json> default_value;  // what an absent key means
  };
  class Scope {
   public:
    explicit Scope(SchemaRecorder& r);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SchemaRecorder* previous_;
  };

  void object_seen(const std::string& path);
  void field(const std::string& path, const std::string& key, const Field& f);
  void probed(const std::string& path, const std::string& key);
  void defaulted(const std::string& path, const std::string& key, const nlohmann::json& value);
  /// The JSON Schema of everything recorded: objects closed to unknown keys,
  /// a key required when every object of its kind held it and it was not
  /// optional, integer and number ranges as the reader checks them.
  [[nodiscard]] nlohmann::ordered_json schema(const std::string& title) const;

 private:
  [[nodiscard]] nlohmann::ordered_json object_schema(const std::string& path) const;
  std::map<std::string, long long> objects_;  // object path ("a.b[]") -> instances read
  std::map<std::string, std::map<std::string, Field>> fields_;
};

class StrictObject {
 public:
  /// `file` names the input in error messages; `path` is the key path of this
  /// object inside the file ("" at top level).
  StrictObject(const nlohmann::json& j, std::string file, std::string path = "");

  [[nodiscard]] bool has(const std::string& key) const;
  /// has(), for a key whose absence means `fallback` (recorded as the
  /// schema's default).
  [[nodiscard]] bool has_or_default(const std::string& key, const nlohmann::json& fallback) const;
  [[nodiscard]] const nlohmann::json& raw(const std::string& key);

  [[nodiscard]] std::string str(const std::string& key);
  /// A name people read and files are named after: not empty, no control characters.
  [[nodiscard]] std::string name(const std::string& key);
  [[nodiscard]] bool boolean(const std::string& key);
  /// An integer in [min, max].
  [[nodiscard]] std::int64_t integer(const std::string& key, std::int64_t min = 0, std::int64_t max = INT64_MAX);
  /// A finite number in [min, max] (a strictly positive range when min_exclusive).
  [[nodiscard]] double number(const std::string& key, double min, double max = 1e300, bool min_exclusive = false);
  /// A finite number in [min, max], or nullopt when the value is null (a
  /// figure the file states as unknown).
  [[nodiscard]] std::optional<double> number_or_null(const std::string& key, double min, double max);
  /// A nested object, or nullopt when the value is null.
  [[nodiscard]] std::optional<StrictObject> object_or_null(const std::string& key);
  [[nodiscard]] StrictObject object(const std::string& key);
  /// The array at `key` (its elements are read by the caller with `element`).
  [[nodiscard]] const nlohmann::json& array(const std::string& key);
  [[nodiscard]] StrictObject element(const std::string& array_key, std::size_t index);

  /// Throws when the object holds a key that was never read.
  void finish() const;

  [[nodiscard]] std::string key_path(const std::string& key) const;
  [[nodiscard]] const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

 private:
  const nlohmann::json& need(const std::string& key);
  void record(const std::string& key, SchemaRecorder::Field f) const;
  const nlohmann::json* j_;
  std::string file_;
  std::string path_;
  std::set<std::string> read_;
  mutable std::set<std::string> probed_;  // every key asked for, present or not (for "did you mean")
};

/// Parses `text` as JSON; a syntax error names `file` and the byte offset, a
/// key given twice in one object names the key.
nlohmann::json parse_json(const std::string& text, const std::string& file);
/// The same, keeping the keys in the order the file gives them.
nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& file);

/// Reads and parses a JSON file; a missing file is an InputError.
nlohmann::json read_json_file(const std::string& path);

/// The value of string `key` among named choices; anything else fails with the list.
template <class E>
E choose(StrictObject& o, const std::string& key, std::initializer_list<std::pair<const char*, E>> options) {
  const std::string v = o.str(key);
  std::string names;
  for (const auto& [n, e] : options) {
    if (v == n) return e;
    names += (names.empty() ? "" : "|") + std::string(n);
  }
  o.fail(key, "expected one of " + names + ", got \"" + v + "\"");
}

/// The same over an enum's name table (the one its writers use too).
template <class E, std::size_t N>
E choose(StrictObject& o, const std::string& key, const Names<E, N>& table) {
  const std::string v = o.str(key);
  if (const std::optional<E> e = parse_name(table, v)) return *e;
  o.fail(key, "expected one of " + joined_names(table) + ", got \"" + v + "\"");
}

/// Requires `schema_version` == `expected` and reads it.
void require_schema_version(StrictObject& o, std::int64_t expected);

}  // namespace hzp::core
