// SHA-256 (FIPS 180-4) of a byte string, as lower-case hex. Used to hash
// canonical Schedules and input files for provenance.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hzp::core {

[[nodiscard]] std::string sha256_hex(std::string_view data);

/// How the 64 rounds of a block run: the portable C++ of FIPS 180-4, or the
/// x86 SHA extensions (SHA-NI: two rounds an instruction, about 5x faster),
/// used where the CPU has them. Both give the same digest.
enum class Sha256Rounds { Portable, ShaExtensions };
/// Whether this CPU runs the SHA extensions (x86-64 with SHA, SSSE3 and SSE4.1).
[[nodiscard]] bool cpu_has_sha_extensions();

/// SHA-256 of a byte stream fed in pieces (the same digest as sha256_hex of
/// their concatenation): what hashes a canonical Schedule while it is written.
class Sha256 {
 public:
  /// The fastest rounds this CPU runs.
  Sha256();
  /// These rounds (ShaExtensions only where cpu_has_sha_extensions()).
  explicit Sha256(Sha256Rounds rounds);
  void update(std::string_view data);
  /// The digest as lower-case hex; the object is spent afterwards.
  [[nodiscard]] std::string hex();

 private:
  void compress(const unsigned char* blocks, std::size_t count);
  std::array<std::uint32_t, 8> h_;
  Sha256Rounds rounds_;
  std::array<unsigned char, 64> block_{};
  std::size_t filled_ = 0;
  std::uint64_t length_ = 0;
};

}  // namespace hzp::core
