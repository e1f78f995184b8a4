// One file of a catalog compiled into the binary (cmake/embed_catalog.cmake).
#pragma once

#include <string_view>

namespace hzp::core {

struct CatalogEntry {
  std::string_view name;  // file name without .json
  std::string_view json;  // the file's text
};

}  // namespace hzp::core
