// Strict JSON object reading (see json_reader.hpp).
#include "core/json_reader.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "core/io.hpp"
#include "core/options.hpp"

namespace hzp::core {
namespace {

thread_local SchemaRecorder* g_recorder = nullptr;

SchemaRecorder::Field kind(std::string type, bool nullable = false) {
  SchemaRecorder::Field f;
  f.type = std::move(type);
  f.nullable = nullable;
  return f;
}

SchemaRecorder::Field ranged(std::string type, double min, double max, bool min_exclusive = false) {
  SchemaRecorder::Field f = kind(std::move(type));
  f.min = min;
  f.max = max;
  f.min_exclusive = min_exclusive;
  return f;
}

// "tiers[3].x" -> "tiers[].x": every element of an array is one kind of object.
std::string kind_of(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    out += path[i];
    if (path[i] == '[') {
      while (i + 1 < path.size() && path[i + 1] != ']') ++i;
    }
  }
  return out;
}

}  // namespace

SchemaRecorder::Scope::Scope(SchemaRecorder& r) : previous_(g_recorder) { g_recorder = &r; }
SchemaRecorder::Scope::~Scope() { g_recorder = previous_; }

void SchemaRecorder::object_seen(const std::string& path) { ++objects_[kind_of(path)]; }

void SchemaRecorder::probed(const std::string& path, const std::string& key) {
  fields_[kind_of(path)][key].optional = true;
}

void SchemaRecorder::defaulted(const std::string& path, const std::string& key, const nlohmann::json& value) {
  Field& f = fields_[kind_of(path)][key];
  f.optional = true;
  f.default_value = value;
}

void SchemaRecorder::field(const std::string& path, const std::string& key, const Field& f) {
  Field& have = fields_[kind_of(path)][key];
  if (have.type.empty() || have.type == "any") have.type = f.type;
  have.nullable = have.nullable || f.nullable;
  if (f.min && (!have.min || *f.min < *have.min)) {
    have.min = f.min;
    have.min_exclusive = f.min_exclusive;
  }
  if (f.max && (!have.max || *f.max > *have.max)) have.max = f.max;
  ++have.reads;
}

nlohmann::ordered_json SchemaRecorder::object_schema(const std::string& path) const {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  nlohmann::ordered_json required = nlohmann::ordered_json::array();
  const auto it = fields_.find(path);
  const long long instances = objects_.contains(path) ? objects_.at(path) : 0;
  if (it != fields_.end()) {
    for (const auto& [key, f] : it->second) {
      if (f.type.empty()) continue;  // probed, never present in what was read
      const std::string child = path.empty() ? key : path + "." + key;
      nlohmann::ordered_json p = nlohmann::ordered_json::object();
      if (f.type == "object") {
        p = object_schema(child);
      } else if (f.type == "array" && objects_.contains(child + "[]")) {
        p = {{"type", "array"}, {"items", object_schema(child + "[]")}};
      } else if (f.type != "any") {
        p["type"] = f.type;
      }
      if (f.nullable && p.contains("type")) p["type"] = {p["type"], "null"};
      // Copied: clang before 16 cannot capture a structured binding.
      const bool integer = f.type == "integer";
      auto bound = [integer](double v) {
        return integer ? nlohmann::ordered_json(static_cast<std::int64_t>(v)) : nlohmann::ordered_json(v);
      };
      // An integer read over the whole int64 range has no bound to state
      // (and 2^63 as a double does not convert back to int64).
      constexpr double kInt64Edge = 9.2e18;
      auto bounded = [integer](double v) { return !integer || std::abs(v) < kInt64Edge; };
      if (f.min && bounded(*f.min)) p[f.min_exclusive ? "exclusiveMinimum" : "minimum"] = bound(*f.min);
      if (f.max && bounded(*f.max)) p["maximum"] = bound(*f.max);
      if (f.default_value) p["default"] = *f.default_value;
      props[key] = p;
      if (!f.optional && f.reads >= instances && instances > 0) required.push_back(key);
    }
  }
  return {{"type", "object"}, {"additionalProperties", false}, {"required", required}, {"properties", props}};
}

nlohmann::ordered_json SchemaRecorder::schema(const std::string& title) const {
  nlohmann::ordered_json s = {{"$schema", "https://json-schema.org/draft/2020-12/schema"}, {"title", title}};
  const nlohmann::ordered_json top = object_schema("");
  for (const auto& [k, v] : top.items()) s[k] = v;
  return s;
}

StrictObject::StrictObject(const nlohmann::json& j, std::string file, std::string path)
    : j_(&j), file_(std::move(file)), path_(std::move(path)) {
  if (!j.is_object()) {
    throw InputError(file_, path_.empty() ? "(top level)" : path_, "expected a JSON object");
  }
  if (g_recorder) g_recorder->object_seen(path_);
}

void StrictObject::record(const std::string& key, SchemaRecorder::Field f) const {
  if (g_recorder) g_recorder->field(path_, key, f);
}

std::string StrictObject::key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void StrictObject::fail(const std::string& key, const std::string& expected) const {
  // InputError keeps the message one line, whatever control characters the key holds.
  throw InputError(file_, key_path(key), expected);
}

bool StrictObject::has(const std::string& key) const {
  probed_.insert(key);
  if (g_recorder) g_recorder->probed(path_, key);
  return j_->contains(key);
}

bool StrictObject::has_or_default(const std::string& key, const nlohmann::json& fallback) const {
  if (g_recorder) g_recorder->defaulted(path_, key, fallback);
  return has(key);
}

const nlohmann::json& StrictObject::need(const std::string& key) {
  probed_.insert(key);
  auto it = j_->find(key);
  if (it == j_->end()) fail(key, "missing required key");
  read_.insert(key);
  return *it;
}

const nlohmann::json& StrictObject::raw(const std::string& key) {
  const auto& v = need(key);
  record(key, kind("any"));
  return v;
}

std::string StrictObject::str(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_string()) fail(key, "expected a string");
  record(key, kind("string"));
  return v.get<std::string>();
}

std::string StrictObject::name(const std::string& key) {
  std::string s = str(key);
  const bool control = std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (s.empty() || control) fail(key, "expected a non-empty name without control characters");
  return s;
}

bool StrictObject::boolean(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_boolean()) fail(key, "expected true or false");
  record(key, kind("boolean"));
  return v.get<bool>();
}

std::int64_t StrictObject::integer(const std::string& key, std::int64_t min, std::int64_t max) {
  const auto& v = need(key);
  if (!v.is_number_integer()) fail(key, fmt::format("expected an integer in [{}, {}]", min, max));
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) fail(key, fmt::format("expected an integer in [{}, {}]", min, max));
    x = static_cast<std::int64_t>(u);
  } else {
    x = v.get<std::int64_t>();
  }
  if (x < min || x > max) fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, x));
  record(key, ranged("integer", static_cast<double>(min), static_cast<double>(max)));
  return x;
}

double StrictObject::number(const std::string& key, double min, double max, bool min_exclusive) {
  const auto& v = need(key);
  if (!v.is_number()) fail(key, "expected a number");
  double x = v.get<double>();
  bool low = min_exclusive ? !(x > min) : !(x >= min);
  if (!std::isfinite(x) || low || x > max) {
    fail(key, fmt::format("expected a number in {}{}, {}], got {}", min_exclusive ? "(" : "[", min, max, x));
  }
  record(key, ranged("number", min, max, min_exclusive));
  return x;
}

std::optional<double> StrictObject::number_or_null(const std::string& key, double min, double max) {
  SchemaRecorder::Field f = ranged("number", min, max);
  f.nullable = true;
  record(key, f);
  if (need(key).is_null()) return std::nullopt;
  return number(key, min, max);
}

std::optional<StrictObject> StrictObject::object_or_null(const std::string& key) {
  const auto& v = need(key);
  record(key, kind("object", /*nullable=*/true));
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) fail(key, "expected an object or null");
  return StrictObject(v, file_, key_path(key));
}

StrictObject StrictObject::object(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_object()) fail(key, "expected an object");
  record(key, kind("object"));
  return StrictObject(v, file_, key_path(key));
}

const nlohmann::json& StrictObject::array(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_array()) fail(key, "expected an array");
  record(key, kind("array"));
  return v;
}

StrictObject StrictObject::element(const std::string& array_key, std::size_t index) {
  const auto& a = array(array_key);
  std::string p = fmt::format("{}[{}]", key_path(array_key), index);
  if (index >= a.size()) throw InputError(file_, p, "index out of range");
  if (!a[index].is_object()) throw InputError(file_, p, "expected an object");
  return StrictObject(a[index], file_, p);
}

void StrictObject::finish() const {
  for (const auto& [k, v] : j_->items()) {
    if (read_.contains(k)) continue;
    std::vector<std::string> known;
    for (const auto& r : probed_) {
      if (!j_->contains(r)) known.push_back(r);
    }
    const auto near = closest(k, known);
    fail(k, near ? fmt::format("unknown key (did you mean \"{}\"?)", *near) : "unknown key");
  }
}

namespace {

// Parses refusing a key twice in one object (nlohmann keeps the last one
// silently): a callback keeps the keys of every open object.
template <class Json>
Json parse_unique(const std::string& text, const std::string& file) {
  std::vector<std::set<std::string>> open;
  std::vector<std::string> path;
  auto callback = [&](int, nlohmann::detail::parse_event_t event, Json& value) {
    using E = nlohmann::detail::parse_event_t;
    if (event == E::object_start) open.emplace_back();
    if (event == E::object_end && !open.empty()) open.pop_back();
    if (event == E::key && !open.empty()) {
      const std::string key = value.template get<std::string>();
      if (!open.back().insert(key).second) throw InputError(file, key, "duplicate key (each key once per object)");
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(file, "", fmt::format("not valid JSON (byte {})", e.byte));
  } catch (const nlohmann::json::exception& e) {
    // e.g. out_of_range 406: a number too large for a double
    throw InputError(file, "", fmt::format("not valid JSON (error {}: a number out of range)", e.id));
  }
}

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& file) {
  return parse_unique<nlohmann::json>(text, file);
}

nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& file) {
  return parse_unique<nlohmann::ordered_json>(text, file);
}

nlohmann::json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

void require_schema_version(StrictObject& o, std::int64_t expected) {
  auto v = o.integer("schema_version", 0);
  if (v != expected) o.fail("schema_version", fmt::format("expected {}, got {}", expected, v));
}

}  // namespace hzp::core
