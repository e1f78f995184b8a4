// Name tables: one per enum that has names, the one every reader and writer
// of that enum uses (input files, the Schedule, flags, printed output). A
// table lists each enumerator once with its one name; aliases a reader also
// accepts stay beside the reader that accepts them.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hzp::core {

template <class E, std::size_t N>
using Names = std::array<std::pair<E, std::string_view>, N>;

/// The name of `v` in its table ("?" if the table misses it).
template <class E, std::size_t N>
[[nodiscard]] constexpr std::string_view name_of(const Names<E, N>& table, E v) {
  for (const auto& [e, n] : table) {
    if (e == v) return n;
  }
  return "?";
}

/// The enumerator named `s`, if the table has the name.
template <class E, std::size_t N>
[[nodiscard]] constexpr std::optional<E> parse_name(const Names<E, N>& table, std::string_view s) {
  for (const auto& [e, n] : table) {
    if (n == s) return e;
  }
  return std::nullopt;
}

/// Every name, in the table's order.
template <class E, std::size_t N>
[[nodiscard]] std::vector<std::string> names(const Names<E, N>& table) {
  std::vector<std::string> out;
  out.reserve(N);
  for (const auto& [e, n] : table) out.emplace_back(n);
  return out;
}

/// The names joined with `sep` ("a|b|c"), for an error that lists the choices.
template <class E, std::size_t N>
[[nodiscard]] std::string joined_names(const Names<E, N>& table, std::string_view sep = "|") {
  std::string out;
  for (const auto& [e, n] : table) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

}  // namespace hzp::core
