// The model catalog compiled into the binary (generated from models/catalog/).
#pragma once

#include <span>

#include "core/catalog_entry.hpp"

namespace hzp::models {

/// The files of models/catalog/, sorted by name.
[[nodiscard]] std::span<const core::CatalogEntry> model_catalog();

}  // namespace hzp::models
