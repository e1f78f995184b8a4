// The cluster catalog compiled into the binary (generated from topologies/catalog/).
#pragma once

#include <span>

#include "core/catalog_entry.hpp"

namespace hzp::topologies {

/// The files of topologies/catalog/, sorted by name.
[[nodiscard]] std::span<const core::CatalogEntry> cluster_catalog();

}  // namespace hzp::topologies
