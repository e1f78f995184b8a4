// Declarative options (see options.hpp): the one parser of option values.
#include "core/options.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace hzp::core {
namespace {

using json = nlohmann::json;

std::string range_text(const OptionSpec& s) {
  if (s.type == ValueType::Number) return fmt::format("[{}, {}]", s.min, s.max);
  return fmt::format("[{}, {}]", static_cast<std::int64_t>(s.min), static_cast<std::int64_t>(s.max));
}

std::string expected_text(const OptionSpec& s) {
  std::string what;
  switch (s.type) {
    case ValueType::Integer: what = "an integer in " + range_text(s); break;
    case ValueType::Number: what = "a finite number in " + range_text(s); break;
    case ValueType::Boolean: what = "true or false"; break;
    case ValueType::Choice: {
      std::string names;
      for (const auto& c : s.choices) names += (names.empty() ? "" : "|") + c;
      what = names;
      break;
    }
    case ValueType::TokenCount:
      what = "a token count in " + range_text(s) + " (an integer, or K/M/G = 2^10/2^20/2^30, e.g. 16M)";
      break;
    case ValueType::Triple: what = "three group sizes [g_p, g_g, g_o], each in " + range_text(s); break;
    case ValueType::Text: what = "a non-empty string"; break;
  }
  return s.nullable ? what + " or null" : what;
}

Checked bad(const OptionSpec& s, const std::string& got) {
  return Checked{json(), fmt::format("expected {}, got {}", expected_text(s), got)};
}

bool integer_in_range(const json& v, const OptionSpec& s) {
  if (!v.is_number_integer()) return false;
  // JSON reads "0" as unsigned: the lower end applies to it too (a file's
  // "tp": 0 passed here while the flag refused it).
  // Compared as integers: above 2^53 a double no longer tells n from n + 1.
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMax)) return false;
  const std::int64_t x = v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>())
                                                : v.get<std::int64_t>();
  auto bound = [](double b) { return b >= 9.2e18 ? kMax : b <= -9.2e18 ? -kMax : static_cast<std::int64_t>(b); };
  return x >= bound(std::ceil(s.min)) && x <= bound(std::floor(s.max));
}

std::optional<std::int64_t> parse_int(std::string_view t) {
  if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::int64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

}  // namespace

ProblemError::ProblemError(std::vector<Problem> problems)
    : std::runtime_error(one_line(join_problems(problems, [](const std::string& f) { return f; }))),
      problems_(std::move(problems)) {}

OptionSpec option_spec(std::string key, ValueType type, std::string help, double min, double max) {
  OptionSpec s;
  s.key = std::move(key);
  s.type = type;
  s.help = std::move(help);
  s.min = min;
  s.max = max;
  return s;
}

std::string flag_of(const OptionSpec& spec) {
  if (!spec.flag.empty()) return spec.flag;
  if (spec.type == ValueType::Boolean && !spec.false_flag.empty()) return spec.false_flag;
  std::string f = "--" + spec.key;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::function<std::string(const std::string&)> text_check(OptionSpec spec) {
  return [spec = std::move(spec)](const std::string& text) { return value_from_text(spec, text).problem; };
}

std::optional<std::int64_t> parse_token_count(std::string_view text) {
  std::int64_t mult = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k': mult = 1LL << 10; break;
      case 'M':
      case 'm': mult = 1LL << 20; break;
      case 'G':
      case 'g': mult = 1LL << 30; break;
      default: break;
    }
    if (mult != 1) digits.remove_suffix(1);
  }
  // Any count an int64 holds (the option's range decides the rest): 12
  // digits cut the flags short of the files' range, and 12 digits times G
  // overflowed.
  const auto v = parse_int(digits);
  if (!v || *v <= 0 || *v > std::numeric_limits<std::int64_t>::max() / mult) return std::nullopt;
  return *v * mult;
}

Checked check_value(const OptionSpec& s, const json& v) {
  if (v.is_null()) return s.nullable ? Checked{json(), ""} : bad(s, "null");
  switch (s.type) {
    case ValueType::Integer:
      if (!integer_in_range(v, s)) return bad(s, v.dump());
      return Checked{v, ""};
    case ValueType::Number:
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < s.min || v.get<double>() > s.max) {
        return bad(s, v.dump());
      }
      return Checked{v, ""};
    case ValueType::Boolean:
      if (!v.is_boolean()) return bad(s, v.dump());
      return Checked{v, ""};
    case ValueType::Choice:
      if (v.is_string()) {
        for (const auto& [alias, choice] : s.choice_aliases) {
          if (v.get<std::string>() == alias) return Checked{json(choice), ""};
        }
      }
      if (!v.is_string() || std::find(s.choices.begin(), s.choices.end(), v.get<std::string>()) == s.choices.end()) {
        return bad(s, v.is_string() ? "\"" + v.get<std::string>() + "\"" : v.dump());
      }
      return Checked{v, ""};
    case ValueType::TokenCount: {
      if (v.is_string()) {
        const auto n = parse_token_count(v.get<std::string>());
        if (!n || static_cast<double>(*n) < s.min || static_cast<double>(*n) > s.max) {
          return bad(s, "\"" + v.get<std::string>() + "\"");
        }
        return Checked{json(*n), ""};
      }
      if (!integer_in_range(v, s)) return bad(s, v.dump());
      return Checked{v, ""};
    }
    case ValueType::Triple:
      if (!v.is_array() || v.size() != 3 ||
          !std::all_of(v.begin(), v.end(), [&](const json& e) { return integer_in_range(e, s); })) {
        return bad(s, v.dump());
      }
      return Checked{v, ""};
    case ValueType::Text:
      if (!v.is_string() || v.get<std::string>().empty()) return bad(s, v.dump());
      return Checked{v, ""};
  }
  return bad(s, v.dump());
}

std::string value_to_text(const OptionSpec& s, const json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return v.get<std::string>();
  if (s.type == ValueType::Triple) return fmt::format("{}/{}/{}", v[0].dump(), v[1].dump(), v[2].dump());
  return v.dump();
}

std::optional<double> parse_decimal(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789.eE-+") != std::string_view::npos || text.front() == '+') {
    return std::nullopt;
  }
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

Checked value_from_text(const OptionSpec& s, std::string_view text) {
  const std::string quoted = fmt::format("'{}'", text);
  if (text.empty()) return bad(s, "nothing");
  if (s.nullable && text == "null") return Checked{json(), ""};
  switch (s.type) {
    case ValueType::Integer: {
      const auto v = parse_int(text);
      if (!v) return bad(s, quoted);
      return check_value(s, json(*v));
    }
    case ValueType::Number: {
      const std::optional<double> d = parse_decimal(text);
      if (!d) return bad(s, quoted);
      Checked c = check_value(s, json(*d));
      if (!c.problem.empty()) return bad(s, quoted);
      return c;
    }
    case ValueType::Boolean:
      if (text == "true") return Checked{json(true), ""};
      if (text == "false") return Checked{json(false), ""};
      return bad(s, quoted);
    case ValueType::Choice: {
      Checked c = check_value(s, json(std::string(text)));
      return c.problem.empty() ? c : bad(s, quoted);
    }
    case ValueType::TokenCount: {
      Checked c = check_value(s, json(std::string(text)));
      return c.problem.empty() ? c : bad(s, quoted);
    }
    case ValueType::Triple: {
      json a = json::array();
      std::string_view rest = text;
      for (int i = 0; i < 3; ++i) {
        const auto slash = rest.find('/');
        const auto v = parse_int(rest.substr(0, slash));
        if (!v || (i < 2) != (slash != std::string_view::npos)) return bad(s, quoted);
        a.push_back(*v);
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
      }
      Checked c = check_value(s, a);
      return c.problem.empty() ? c : bad(s, quoted);
    }
    case ValueType::Text: return check_value(s, json(std::string(text)));
  }
  return bad(s, quoted);
}

nlohmann::ordered_json schema_property(const OptionSpec& s, const json& default_value) {
  nlohmann::ordered_json p;
  auto typed = [&](const char* type) {
    p["type"] = s.nullable ? nlohmann::ordered_json{type, "null"} : nlohmann::ordered_json(type);
  };
  switch (s.type) {
    case ValueType::Integer:
      typed("integer");
      p["minimum"] = static_cast<std::int64_t>(s.min);
      p["maximum"] = static_cast<std::int64_t>(s.max);
      break;
    case ValueType::Number:
      typed("number");
      p["minimum"] = s.min;
      p["maximum"] = s.max;
      break;
    case ValueType::Boolean: typed("boolean"); break;
    case ValueType::Choice:
      typed("string");
      p["enum"] = s.choices;
      for (const auto& [alias, choice] : s.choice_aliases) p["enum"].push_back(alias);
      break;
    case ValueType::TokenCount:
      p["type"] = s.nullable ? nlohmann::ordered_json{"integer", "string", "null"}
                             : nlohmann::ordered_json{"integer", "string"};
      p["minimum"] = static_cast<std::int64_t>(s.min);
      p["maximum"] = static_cast<std::int64_t>(s.max);
      p["pattern"] = "^[0-9]{1,12}[KkMmGg]?$";
      break;
    case ValueType::Triple:
      typed("array");
      p["items"] = {{"type", "integer"},
                    {"minimum", static_cast<std::int64_t>(s.min)},
                    {"maximum", static_cast<std::int64_t>(s.max)}};
      p["minItems"] = 3;
      p["maxItems"] = 3;
      break;
    case ValueType::Text:
      typed("string");
      p["minLength"] = 1;
      break;
  }
  p["default"] = default_value;
  p["description"] = s.unit.empty() ? s.help : fmt::format("{} ({})", s.help, s.unit);
  return p;
}

json sample_value(const OptionSpec& s, const json& def) {
  switch (s.type) {
    case ValueType::Integer: {
      const auto d = def.is_null() ? static_cast<std::int64_t>(s.min) : def.get<std::int64_t>();
      return static_cast<double>(d + 1) <= s.max ? d + 1 : d - 1;
    }
    case ValueType::Number: {
      const double mid = (s.min + std::min(s.max, s.min + 1.0)) / 2;
      return !def.is_null() && def.get<double>() == mid ? s.min : mid;
    }
    case ValueType::Boolean: return def.is_null() ? true : !def.get<bool>();
    case ValueType::Choice:
      for (const auto& c : s.choices) {
        if (def.is_null() || c != def.get<std::string>()) return c;
      }
      return def;
    case ValueType::TokenCount: {
      const std::int64_t v = std::max<std::int64_t>(static_cast<std::int64_t>(s.min), 1LL << 20);
      return def.is_number_integer() && def.get<std::int64_t>() == v ? v * 2 : v;
    }
    case ValueType::Triple: {
      const auto lo = static_cast<std::int64_t>(s.min);
      return json{lo, lo, lo * 2};
    }
    case ValueType::Text: return def.is_string() ? def.get<std::string>() + "-x" : "x";
  }
  return def;
}

std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::optional<std::string> best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const std::size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace hzp::core
