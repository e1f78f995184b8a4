// SHA-256 (FIPS 180-4) of a byte string, as lower-case hex. Used to hash
// canonical Schedules and input files for provenance.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hzp::core {

[[nodiscard]] std::string sha256_hex(std::string_view data);

/// SHA-256 of a byte stream fed in pieces (the same digest as sha256_hex of
/// their concatenation): what hashes a canonical Schedule while it is written.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  /// The digest as lower-case hex; the object is spent afterwards.
  [[nodiscard]] std::string hex();

 private:
  std::array<std::uint32_t, 8> h_;
  std::array<unsigned char, 64> block_{};
  std::size_t filled_ = 0;
  std::uint64_t length_ = 0;
};

}  // namespace hzp::core
