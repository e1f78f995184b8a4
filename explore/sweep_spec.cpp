// Sweep specs (see sweep.hpp): reading and checking them against the option
// tables, `--set`, filters, and the expansion into points.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstring>
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

// Filters: "EXPR OP EXPR" with OP one of < <= == != >= > divides, EXPR of
// keys, numbers (with K/M/G = 2^10/2^20/2^30), + - * / and parentheses:
// "tp * pp <= 8", "global_batch_tokens == gpus * 16K", "gpus >= 2 * (tp + 1)".
struct Expr {
  char op = 0;       // 0: a leaf; else + - * /
  std::string name;  // a leaf's key, or empty for a number
  double number = 0;
  std::vector<Expr> args;  // op: the two operands
};

struct Filter {
  Expr lhs, rhs;
  std::string op;
  std::string text;
  std::string where;  // where the filter was given ("where[0]")
};

// The value a point runs with for `key`: its own, else the option's default
// (what the point's Scenario starts from).
json value_at(const std::string& key, const json& point) {
  if (auto it = point.find(key); it != point.end()) return *it;
  static const Scenario defaults;
  if (const ScenarioOption* row = find_scenario_option(key)) return row->get(defaults);
  return plan::find_plan_option(key)->get(defaults.plan);
}

bool numeric(core::ValueType t) {
  return t == core::ValueType::Integer || t == core::ValueType::Number || t == core::ValueType::TokenCount;
}

class FilterParser {
 public:
  FilterParser(const std::string& text, const std::string& file, const std::string& where)
      : text_(text), file_(file), where_(where) {}

  Filter parse() {
    Filter f;
    f.text = text_;
    skip();
    if (pos_ == text_.size()) fail("expected a filter like 'tp * pp <= 8', got nothing");
    f.lhs = sum();
    f.op = comparison();
    f.rhs = sum();
    skip();
    if (pos_ != text_.size()) fail(fmt::format("unexpected '{}'", text_.substr(pos_)));
    return f;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw core::InputError(file_, where_,
                           fmt::format("{} in filter '{}' (expected EXPR OP EXPR: keys, numbers, + - * / ( ), OP one "
                                       "of < <= == != >= > divides)",
                                       what, text_));
  }
  void skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  std::string comparison() {
    skip();
    for (const char* op : {"<=", ">=", "==", "!=", "<", ">", "divides"}) {
      if (text_.compare(pos_, std::strlen(op), op) == 0) {
        pos_ += std::strlen(op);
        return op;
      }
    }
    fail(pos_ < text_.size() ? fmt::format("expected a comparison at '{}'", text_.substr(pos_))
                             : std::string("expected a comparison"));
  }
  Expr sum() {
    Expr e = product();
    for (char c = 0; (c = eat('+') ? '+' : eat('-') ? '-' : 0);) e = Expr{c, "", 0, {std::move(e), product()}};
    return e;
  }
  Expr product() {
    Expr e = atom();
    for (char c = 0; (c = eat('*') ? '*' : eat('/') ? '/' : 0);) e = Expr{c, "", 0, {std::move(e), atom()}};
    return e;
  }
  Expr atom() {
    if (eat('(')) {
      Expr e = sum();
      if (!eat(')')) fail("expected ')'");
      return e;
    }
    skip();
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' || text_[pos_] == '.'))
      ++pos_;
    const std::string word = text_.substr(start, pos_ - start);
    if (word.empty())
      fail(pos_ < text_.size() ? fmt::format("expected a key or a number at '{}'", text_.substr(pos_))
                               : std::string("expected a key or a number at the end"));
    if (std::isalpha(static_cast<unsigned char>(word[0])) || word[0] == '_') {
      const core::OptionSpec* spec = word == "divides" ? nullptr : find_key(word);
      if (spec && !numeric(spec->type)) {
        fail(fmt::format("'{}' is {}, not a number: filters compare numbers", word,
                         spec->type == core::ValueType::Boolean ? "true or false"
                         : spec->type == core::ValueType::Triple ? "a triple"
                                                                 : "text"));
      }
      if (spec) return Expr{0, word, 0, {}};
      if (word == "divides") fail("expected a key or a number before 'divides'");
      const auto near = core::closest(word, known_keys());
      fail(near ? fmt::format("unknown key '{}' (did you mean '{}'?)", word, *near)
                : fmt::format("unknown key '{}'", word));
    }
    return Expr{0, "", number(word), {}};
  }
  double number(const std::string& word) const {
    if (const auto n = core::parse_token_count(word)) return static_cast<double>(*n);
    char* end = nullptr;
    const double d = std::strtod(word.c_str(), &end);
    if (end != word.c_str() + word.size() || !std::isfinite(d)) {
      fail(fmt::format("expected a key or a finite number, got '{}'", word));
    }
    return d;
  }

  const std::string& text_;
  const std::string& file_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

Filter parse_filter(const std::string& text, const std::string& file, const std::string& where) {
  Filter f = FilterParser(text, file, where).parse();
  f.where = where;
  return f;
}

// Evaluates filters at points: every key at the value the point runs with
// (its own or the default), never skipped. A key left unset (null: derived
// when the point runs) and a division by zero are refused, naming the point.
class FilterEvaluator {
 public:
  FilterEvaluator(const Filter& f, const json& point, const std::string& file) : f_(f), point_(point), file_(file) {}

  bool passes() const {
    const double l = evaluate(f_.lhs), r = evaluate(f_.rhs);
    if (f_.op == "<") return l < r;
    if (f_.op == "<=") return l <= r;
    if (f_.op == "==") return l == r;
    if (f_.op == "!=") return l != r;
    if (f_.op == ">=") return l >= r;
    if (f_.op == ">") return l > r;
    return l != 0 && std::fmod(r, l) == 0;  // divides
  }

 private:
  double evaluate(const Expr& e) const {
    if (e.op == 0) return e.name.empty() ? e.number : key(e.name);
    const double a = evaluate(e.args[0]), b = evaluate(e.args[1]);
    switch (e.op) {
      case '+': return a + b;
      case '-': return a - b;
      case '*': return a * b;
      default:
        if (b == 0) fail("divides by zero");
        return a / b;
    }
  }
  double key(const std::string& name) const {
    const json v = value_at(name, point_);
    if (v.is_number()) return v.get<double>();
    if (const core::OptionSpec* spec = find_key(name); spec && v.is_string()) {  // a token count as text ("16M")
      if (const core::Checked c = core::check_value(*spec, v); c.problem.empty() && c.value.is_number()) {
        return c.value.get<double>();
      }
    }
    fail(fmt::format("'{}' is unset (derived when the point runs); set it in base or axes to filter on it", name));
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw core::InputError(file_, f_.where, fmt::format("filter '{}' {} at point {}", f_.text, what, point_.dump()));
  }

  const Filter& f_;
  const json& point_;
  const std::string& file_;
};

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
    if (!std::all_of(filters.begin(), filters.end(),
                     [&](const Filter& f) { return FilterEvaluator(f, inputs, file).passes(); })) {
      continue;
    }
    // The identity of a point: its inputs with keys sorted.
    nlohmann::json sorted = nlohmann::json::parse(inputs.dump());
    points.push_back(SweepPoint{idx, inputs, sorted.dump()});
  }
  if (points.empty()) {
    throw core::InputError(file, "where", fmt::format("the filters keep none of the {} point(s)", total));
  }
  return points;
}

}  // namespace hzp::explore
