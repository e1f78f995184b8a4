// One file of a catalog compiled into the binary (cmake/embed_catalog.cmake),
// and the lookup every catalog (models, clusters, stacks) shares.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hzp::core {

struct CatalogEntry {
  std::string_view name;  // file name without .json
  std::string_view json;  // the file's text
};

/// The entries' names, in catalog order.
[[nodiscard]] std::vector<std::string> catalog_names(std::span<const CatalogEntry> entries);

/// The JSON text of a catalog entry by name, or of a file when `name_or_path`
/// ends in ".json", and the name errors are reported under
/// ("<dir>/<name>.json" for an entry). An unknown name is an InputError on
/// the command line's `--<what>` listing the catalog.
[[nodiscard]] std::pair<std::string, std::string> catalog_text(std::span<const CatalogEntry> entries,
                                                               const std::string& name_or_path, std::string_view what,
                                                               std::string_view dir);

}  // namespace hzp::core
