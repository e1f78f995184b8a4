// Sweep specs (see sweep.hpp): reading and checking them against the option
// tables, `--set`, filters, and the expansion into points.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "explore/sweep.hpp"
#include "plan/options.hpp"

namespace hzp::explore {
namespace {

using json = nlohmann::ordered_json;

// Every key a sweep may set: the scenario's options, then the plan's.
const core::OptionSpec* find_key(std::string_view key) {
  if (const ScenarioOption* row = find_scenario_option(key)) return &row->spec;
  if (const plan::PlanOption* row = plan::find_plan_option(key)) return &row->spec;
  return nullptr;
}

std::vector<std::string> known_keys() {
  std::vector<std::string> keys;
  for (const auto& row : scenario_option_table()) keys.push_back(row.spec.key);
  for (const auto& row : plan::plan_option_table()) keys.push_back(row.spec.key);
  return keys;
}

core::InputError unknown_key(const std::string& key, const std::string& file, const std::string& where) {
  const auto near = core::closest(key, known_keys());
  std::string all;
  for (const auto& k : known_keys()) all += (all.empty() ? "" : ", ") + k;
  return core::InputError(file, where,
                          near ? fmt::format("unknown key '{}' (did you mean '{}'?)", key, *near)
                               : fmt::format("unknown key '{}': expected one of {}", key, all));
}

// Checks one value against its key's option; returns it normalised.
json check_value(const std::string& key, const json& v, const std::string& file, const std::string& where) {
  const core::OptionSpec* spec = find_key(key);
  if (!spec) throw unknown_key(key, file, where);
  core::Checked c = core::check_value(*spec, v);
  if (!c.problem.empty()) throw core::InputError(file, where, c.problem);
  return c.value;
}

// A value typed from `--set` text: integer, number, boolean or string.
json value_from_text(const std::string& s) {
  if (s == "true") return true;
  if (s == "false") return false;
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() <= 15) return std::stoll(s);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end && *end == '\0' && std::isfinite(d)) return d;
  return s;
}

// Filters: "a op b", "a * b op c", "a divides b".
struct Filter {
  std::vector<std::string> lhs;  // operands multiplied
  std::string op;
  std::string rhs;
  std::string text;
};

Filter parse_filter(const std::string& text, const std::string& file, const std::string& where) {
  std::istringstream in(text);
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  Filter f;
  f.text = text;
  static const std::set<std::string> ops = {"<", "<=", "==", "!=", ">=", ">", "divides"};
  std::size_t i = 0;
  if (tok.empty()) throw core::InputError(file, where, "expected a filter like 'tp * pp <= 8', got nothing");
  f.lhs.push_back(tok[i++]);
  while (i + 1 < tok.size() && tok[i] == "*") {
    f.lhs.push_back(tok[i + 1]);
    i += 2;
  }
  if (i + 2 != tok.size() || !ops.count(tok[i])) {
    throw core::InputError(
        file, where,
        fmt::format("expected 'KEY [* KEY] OP KEY' with OP one of < <= == != >= > divides, got '{}'", text));
  }
  f.op = tok[i];
  f.rhs = tok[i + 1];
  // Every operand, either side, is a key or a finite number ("1e400" is neither).
  std::vector<std::string> operands = f.lhs;
  if (f.op != "divides" || !find_key(f.rhs)) operands.push_back(f.rhs);
  for (const auto& operand : operands) {
    if (!find_key(operand) && !value_from_text(operand).is_number()) {
      throw core::InputError(file, where,
                             fmt::format("expected a key or a finite number, got '{}' in filter '{}'", operand, text));
    }
  }
  return f;
}

std::optional<double> operand(const std::string& name, const json& point) {
  auto it = point.find(name);
  if (it != point.end()) {
    if (it->is_number()) return it->get<double>();
    return std::nullopt;
  }
  json v = value_from_text(name);
  if (v.is_number()) return v.get<double>();
  return std::nullopt;  // a key the point leaves at its default: the filter does not apply
}

bool passes(const Filter& f, const json& point) {
  double l = 1;
  for (const auto& name : f.lhs) {
    auto v = operand(name, point);
    if (!v) return true;
    l *= *v;
  }
  auto r = operand(f.rhs, point);
  if (!r) return true;
  if (f.op == "<") return l < *r;
  if (f.op == "<=") return l <= *r;
  if (f.op == "==") return l == *r;
  if (f.op == "!=") return l != *r;
  if (f.op == ">=") return l >= *r;
  if (f.op == ">") return l > *r;
  return l != 0 && std::fmod(*r, l) == 0;  // divides
}

}  // namespace

json sweep_schema() {
  json props = json::object();
  json axes = json::object();
  const Scenario sc;
  const plan::PlanOptions o;
  auto add = [&](const core::OptionSpec& spec, const nlohmann::json& def) {
    props[spec.key] = core::schema_property(spec, def);
    axes[spec.key] = {{"type", "array"}, {"minItems", 1}, {"items", core::schema_property(spec, def)}};
  };
  for (const auto& row : scenario_option_table()) add(row.spec, row.get(sc));
  for (const auto& row : plan::plan_option_table()) add(row.spec, row.get(o));
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "hzp/sweep.schema.json"},
          {"title", "hzp sweep spec (hzp sweep --spec FILE)"},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", {"schema_version"}},
          {"properties",
           {{"schema_version", {{"const", 1}}},
            {"base", {{"type", "object"}, {"additionalProperties", false}, {"properties", props}}},
            {"axes",
             {{"type", "object"},
              {"additionalProperties", false},
              {"description", "swept keys in order: the last varies fastest"},
              {"properties", axes}}},
            {"where",
             {{"type", "array"},
              {"items", {{"type", "string"}}},
              {"description", "filters: 'KEY|NUMBER [* KEY|NUMBER] OP KEY|NUMBER' (OP < <= == != >= > divides)"}}}}}};
}

json SweepSpec::to_json() const {
  json axes_json = json::object();
  for (const auto& [k, vs] : axes) axes_json[k] = vs;
  return json{{"schema_version", 1}, {"base", base}, {"axes", axes_json}, {"where", where}};
}

std::string SweepSpec::hash() const { return core::sha256_hex(to_json().dump()); }

SweepSpec sweep_from_json(const std::string& text, const std::string& file) {
  const json j = core::parse_ordered_json(text, file);
  if (!j.is_object()) throw core::InputError(file, "", "expected a JSON object");
  SweepSpec s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "schema_version") {
      if (*it != 1) throw core::InputError(file, "schema_version", fmt::format("expected 1, got {}", it->dump()));
    } else if (k == "base") {
      if (!it->is_object()) throw core::InputError(file, "base", "expected an object of key: value");
      for (auto b = it->begin(); b != it->end(); ++b) {
        s.base[b.key()] = check_value(b.key(), *b, file, "base." + b.key());
      }
    } else if (k == "axes") {
      if (!it->is_object()) throw core::InputError(file, "axes", "expected an object of key: [values]");
      for (auto a = it->begin(); a != it->end(); ++a) {
        if (!a->is_array() || a->empty()) {
          throw core::InputError(file, "axes." + a.key(), "expected a non-empty array of values");
        }
        std::vector<json> values;
        for (std::size_t i = 0; i < a->size(); ++i) {
          values.push_back(check_value(a.key(), (*a)[i], file, fmt::format("axes.{}[{}]", a.key(), i)));
        }
        s.axes.emplace_back(a.key(), std::move(values));
      }
    } else if (k == "where") {
      if (!it->is_array()) throw core::InputError(file, "where", "expected an array of filter strings");
      for (std::size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) throw core::InputError(file, fmt::format("where[{}]", i), "expected a string");
        (void)parse_filter((*it)[i].get<std::string>(), file, fmt::format("where[{}]", i));
        s.where.push_back((*it)[i].get<std::string>());
      }
    } else {
      throw core::InputError(file, k, "unknown key: expected schema_version, base, axes, where");
    }
  }
  if (!j.contains("schema_version")) throw core::InputError(file, "schema_version", "expected 1");
  return s;
}

void add_set(SweepSpec& spec, const std::string& set) {
  const auto eq = set.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == set.size()) {
    throw core::InputError("command line", "--set", fmt::format("expected key=v1,v2,..., got '{}'", set));
  }
  const std::string key = set.substr(0, eq);
  const core::OptionSpec* option = find_key(key);
  if (!option) throw unknown_key(key, "command line", "--set " + key);
  std::vector<json> values;
  std::stringstream in(set.substr(eq + 1));
  for (std::string v; std::getline(in, v, ',');) {
    core::Checked c = core::value_from_text(*option, v);
    if (!c.problem.empty()) throw core::InputError("command line", "--set " + key, c.problem);
    values.push_back(c.value);
  }
  if (values.size() == 1) {
    spec.base[key] = values[0];
  } else {
    spec.axes.emplace_back(key, std::move(values));
  }
}

std::vector<SweepPoint> expand(const SweepSpec& spec, const std::string& file) {
  std::vector<Filter> filters;
  for (std::size_t i = 0; i < spec.where.size(); ++i) {
    filters.push_back(parse_filter(spec.where[i], file, fmt::format("where[{}]", i)));
  }
  std::set<std::string> seen;
  for (const auto& [k, vs] : spec.axes) {
    if (!seen.insert(k).second || spec.base.contains(k)) {
      throw core::InputError(file, "axes." + k, "expected each key once (in base or in axes)");
    }
  }
  std::int64_t total = 1;
  for (const auto& [k, vs] : spec.axes) {
    total *= static_cast<std::int64_t>(vs.size());
    if (total > 10'000'000) throw core::InputError(file, "axes", "expected at most 10 million points");
  }
  std::vector<SweepPoint> points;
  for (std::int64_t idx = 0; idx < total; ++idx) {
    json inputs = spec.base;
    std::int64_t rest = idx;
    for (auto it = spec.axes.rbegin(); it != spec.axes.rend(); ++it) {  // the last axis varies fastest
      const auto n = static_cast<std::int64_t>(it->second.size());
      inputs[it->first] = it->second[static_cast<std::size_t>(rest % n)];
      rest /= n;
    }
    if (!std::all_of(filters.begin(), filters.end(), [&](const Filter& f) { return passes(f, inputs); })) continue;
    // The identity of a point: its inputs with keys sorted.
    nlohmann::json sorted = nlohmann::json::parse(inputs.dump());
    points.push_back(SweepPoint{idx, inputs, sorted.dump()});
  }
  return points;
}

}  // namespace hzp::explore
