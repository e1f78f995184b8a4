// Strict JSON object reading (see json_reader.hpp).
#include "core/json_reader.hpp"

#include <fmt/format.h>
#include <cmath>
#include <fstream>
#include <sstream>

namespace hzp::core {

StrictObject::StrictObject(const nlohmann::json& j, std::string file, std::string path)
    : j_(&j), file_(std::move(file)), path_(std::move(path)) {
  if (!j.is_object()) {
    throw InputError(file_, path_.empty() ? "(top level)" : path_, "expected a JSON object");
  }
}

std::string StrictObject::key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void StrictObject::fail(const std::string& key, const std::string& expected) const {
  // InputError keeps the message one line, whatever control characters the key holds.
  throw InputError(file_, key_path(key), expected);
}

bool StrictObject::has(const std::string& key) const { return j_->contains(key); }

const nlohmann::json& StrictObject::need(const std::string& key) {
  auto it = j_->find(key);
  if (it == j_->end()) fail(key, "missing required key");
  read_.insert(key);
  return *it;
}

const nlohmann::json& StrictObject::raw(const std::string& key) { return need(key); }

std::string StrictObject::str(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_string()) fail(key, "expected a string");
  return v.get<std::string>();
}

bool StrictObject::boolean(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_boolean()) fail(key, "expected true or false");
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
  return x;
}

std::optional<StrictObject> StrictObject::object_or_null(const std::string& key) {
  const auto& v = need(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) fail(key, "expected an object or null");
  return StrictObject(v, file_, key_path(key));
}

StrictObject StrictObject::object(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_object()) fail(key, "expected an object");
  return StrictObject(v, file_, key_path(key));
}

const nlohmann::json& StrictObject::array(const std::string& key) {
  const auto& v = need(key);
  if (!v.is_array()) fail(key, "expected an array");
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
    if (!read_.contains(k)) fail(k, "unknown key");
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& file) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(file, "", fmt::format("not valid JSON (byte {})", e.byte));
  } catch (const nlohmann::json::exception& e) {
    // e.g. out_of_range 406: a number too large for a double
    throw InputError(file, "", fmt::format("not valid JSON (error {}: a number out of range)", e.id));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), path);
}

void require_schema_version(StrictObject& o, std::int64_t expected) {
  auto v = o.integer("schema_version", 0);
  if (v != expected) o.fail("schema_version", fmt::format("expected {}, got {}", expected, v));
}

}  // namespace hzp::core
