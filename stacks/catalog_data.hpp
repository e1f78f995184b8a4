// The stack catalog compiled into the binary (generated from stacks/catalog/).
#pragma once

#include <span>

#include "core/catalog_entry.hpp"

namespace hzp::stacks {

/// The files of stacks/catalog/, sorted by name.
[[nodiscard]] std::span<const core::CatalogEntry> stack_catalog();

}  // namespace hzp::stacks
