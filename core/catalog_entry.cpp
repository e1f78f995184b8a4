// The catalog lookup (see catalog_entry.hpp).
#include "core/catalog_entry.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"

namespace hzp::core {

std::vector<std::string> catalog_names(std::span<const CatalogEntry> entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.emplace_back(e.name);
  return names;
}

std::pair<std::string, std::string> catalog_text(std::span<const CatalogEntry> entries, const std::string& name_or_path,
                                                 std::string_view what, std::string_view dir) {
  if (name_or_path.size() > 5 && name_or_path.ends_with(".json")) return {read_file(name_or_path), name_or_path};
  for (const auto& e : entries) {
    if (e.name == name_or_path) return {std::string(e.json), fmt::format("{}/{}.json", dir, e.name)};
  }
  std::string known;
  for (const auto& n : catalog_names(entries)) known += (known.empty() ? "" : ", ") + n;
  throw InputError(
      "command line", fmt::format("--{}", what),
      fmt::format("unknown {} '{}'; expected a catalog name ({}) or a .json file", what, name_or_path, known));
}

}  // namespace hzp::core
