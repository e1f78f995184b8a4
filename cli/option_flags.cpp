// Flags generated from the option tables (see option_flags.hpp).
#include "cli/option_flags.hpp"

#include <fmt/format.h>
#include <algorithm>

namespace hzp::cli {
namespace {

bool wanted(const std::vector<std::string>& only, const std::string& key) {
  return only.empty() || std::find(only.begin(), only.end(), key) != only.end();
}

// What --help shows for the value: its kind, or the choices.
std::string type_name(const core::OptionSpec& s) {
  switch (s.type) {
    case core::ValueType::Integer: return "INT";
    case core::ValueType::Number: return "NUMBER";
    case core::ValueType::TokenCount: return "TOKENS";
    case core::ValueType::Triple: return "G_P/G_G/G_O";
    // Text names a catalog entry or a file, unless its unit says what else it is.
    case core::ValueType::Text: return s.unit.empty() ? "NAME|FILE" : "TEXT";
    case core::ValueType::Choice: {
      std::string names;
      for (const auto& c : s.choices) names += (names.empty() ? "" : "|") + c;
      return names;
    }
    case core::ValueType::Boolean: break;
  }
  return "";
}

std::string names_of(const core::OptionSpec& s) {
  std::string names = core::flag_of(s);
  for (const auto& alias : s.flag_aliases) names += "," + alias;
  return names;
}

}  // namespace

bool OptionFlags::Entry::given() const {
  if (forgotten) return false;
  if (value) return value->count() > 0;
  if (!preset.empty()) return on;
  return on || off;
}

void OptionFlags::add(CLI::App* app, const std::vector<const core::OptionSpec*>& specs,
                      const nlohmann::json& defaults) {
  for (const core::OptionSpec* s : specs) {
    Entry& e = entries_.emplace_back();
    e.spec = s;
    const nlohmann::json def = defaults.contains(s->key) ? defaults.at(s->key) : nlohmann::json();
    if (s->type == core::ValueType::Boolean) {
      const bool default_on = def.is_boolean() && def.get<bool>();
      if (!s->flag.empty()) {
        e.on_flag = app->add_flag(s->flag, e.on, fmt::format("{}{}", s->help, default_on ? " (default)" : ""));
      }
      if (!s->false_flag.empty()) {
        e.off_flag =
            app->add_flag(s->false_flag, e.off,
                          fmt::format("{} = false{}", s->key, def.is_boolean() && !default_on ? " (default)" : ""));
      }
      continue;
    }
    std::string help = s->help;
    if (!s->unit.empty()) help += fmt::format(" ({})", s->unit);
    e.value = app->add_option(names_of(*s), e.text, help)->type_name(type_name(*s));
    if (!def.is_null()) e.value->default_str(core::value_to_text(*s, def));
    for (const auto& [flag, text] : s->value_flags) {
      Entry& v = entries_.emplace_back();
      v.spec = s;
      v.preset = text;
      v.on_flag = app->add_flag(flag, v.on, fmt::format("{} {}", core::flag_of(*s), text));
    }
  }
}

bool OptionFlags::any_given() const {
  return std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.given(); });
}

std::string OptionFlags::first_given() const {
  for (const Entry& e : entries_) {
    if (!e.given()) continue;
    if (e.value) return core::flag_of(*e.spec);
    if (!e.preset.empty()) return e.on_flag->get_name();
    return e.on ? e.spec->flag : e.spec->false_flag;
  }
  return "";
}

std::optional<std::string> OptionFlags::text(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.spec->key == key && e.value && e.given()) return e.text;
  }
  return std::nullopt;
}

void OptionFlags::forget(std::string_view key) {
  for (Entry& e : entries_) {
    if (e.spec->key == key) e.forgotten = true;
  }
}

std::vector<core::Problem> OptionFlags::values(std::vector<std::pair<std::string, nlohmann::json>>& out) const {
  std::vector<core::Problem> problems;
  std::vector<std::string> seen;
  for (const Entry& e : entries_) {
    if (!e.given()) continue;
    if (std::find(seen.begin(), seen.end(), e.spec->key) != seen.end()) {
      problems.push_back({e.spec->key, "given twice (a flag and its alias); expected one"});
      continue;
    }
    seen.push_back(e.spec->key);
    if (!e.preset.empty()) {
      core::Checked c = core::value_from_text(*e.spec, e.preset);
      out.emplace_back(e.spec->key, c.value);
      continue;
    }
    if (!e.value) {
      if (e.on && e.off) {
        problems.push_back({e.spec->key, fmt::format("expected {} or {}, not both", e.spec->flag, e.spec->false_flag)});
      } else {
        out.emplace_back(e.spec->key, e.on);
      }
      continue;
    }
    core::Checked c = core::value_from_text(*e.spec, e.text);
    if (c.problem.empty()) {
      out.emplace_back(e.spec->key, c.value);
    } else {
      problems.push_back({e.spec->key, c.problem});
    }
  }
  return problems;
}

std::vector<const core::OptionSpec*> plan_specs(const std::vector<std::string>& only) {
  std::vector<const core::OptionSpec*> out;
  for (const auto& row : plan::plan_option_table()) {
    if (wanted(only, row.spec.key)) out.push_back(&row.spec);
  }
  return out;
}

std::vector<const core::OptionSpec*> scenario_specs(bool engine, const std::vector<std::string>& only) {
  std::vector<const core::OptionSpec*> out;
  for (const auto& row : explore::scenario_option_table()) {
    if ((engine || !row.engine) && wanted(only, row.spec.key)) out.push_back(&row.spec);
  }
  return out;
}

nlohmann::json option_defaults() {
  nlohmann::json d = nlohmann::json::object();
  const explore::Scenario sc;
  for (const auto& row : explore::scenario_option_table()) d[row.spec.key] = row.get(sc);
  const plan::PlanOptions o;
  for (const auto& row : plan::plan_option_table()) d[row.spec.key] = row.get(o);
  return d;
}

std::string flag_for_field(const std::string& field) {
  if (const auto* row = plan::find_plan_option(field)) return core::flag_of(row->spec);
  if (const auto* row = explore::find_scenario_option(field)) return core::flag_of(row->spec);
  core::OptionSpec s;
  s.key = field;
  return core::flag_of(s);
}

void apply_values(const std::vector<std::pair<std::string, nlohmann::json>>& values, explore::Scenario& sc) {
  for (const auto& [key, value] : values) {
    // Values come checked from OptionFlags::values; a problem here is a bug.
    const std::optional<core::Problem> p = explore::set_input(sc, key, value);
    if (p) throw std::logic_error(fmt::format("option {}: {}", p->field, p->message));
  }
}

}  // namespace hzp::cli
