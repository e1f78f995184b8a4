// SHA-256 following FIPS 180-4 section 6.2: 512-bit blocks, 64 rounds.
#include "core/sha256.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HZP_SHA_EXTENSIONS 1
#endif

namespace hzp::core {
namespace {

// First 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress_portable(std::array<std::uint32_t, 8>& h, const unsigned char* block) {
  std::array<std::uint32_t, 64> w{};
  for (int t = 0; t < 16; ++t) {
    w[static_cast<std::size_t>(t)] = (std::uint32_t{block[4 * t]} << 24) | (std::uint32_t{block[4 * t + 1]} << 16) |
                                     (std::uint32_t{block[4 * t + 2]} << 8) | std::uint32_t{block[4 * t + 3]};
  }
  for (std::size_t t = 16; t < 64; ++t) {
    std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, k] = h;
  for (std::size_t t = 0; t < 64; ++t) {
    std::uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

#ifdef HZP_SHA_EXTENSIONS
// The same rounds on the SHA extensions (Intel SDM, SHA256RNDS2, SHA256MSG1,
// SHA256MSG2). The state is held as two registers of four words, high word
// first: (a, b, e, f) and (c, d, g, h), the operands SHA256RNDS2 takes. Each
// instruction runs two rounds from the low two words of message plus round
// constant; its result is the new (a, b, e, f), and the old one is then
// (c, d, g, h). Words w[16..63] come four at a time: MSG1 adds sigma0 of the
// next word to w[t-16..t-13], the words w[t-7..t-4] are added, and MSG2 adds
// sigma1 of w[t-2], w[t-1] and then of the two words it has just made.
__attribute__((target("sha,ssse3,sse4.1"))) void compress_sha_extensions(std::array<std::uint32_t, 8>& h,
                                                                         const unsigned char* blocks,
                                                                         std::size_t count) {
  // Reverses the bytes of each 32-bit word: the message is big-endian.
  const __m128i big_endian = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i abef =
      _mm_set_epi32(static_cast<int>(h[0]), static_cast<int>(h[1]), static_cast<int>(h[4]), static_cast<int>(h[5]));
  __m128i cdgh =
      _mm_set_epi32(static_cast<int>(h[2]), static_cast<int>(h[3]), static_cast<int>(h[6]), static_cast<int>(h[7]));
  for (std::size_t b = 0; b < count; ++b, blocks += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // w[i % 4]: message words 4i .. 4i + 3, word 4i lowest
    for (std::size_t i = 0; i < 4; ++i) {
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * i)), big_endian);
    }
    for (std::size_t i = 0; i < 16; ++i) {
      __m128i& now = w[i % 4];
      if (i >= 4) {
        const __m128i& next = w[(i + 1) % 4];    // words 4i - 12 ..
        const __m128i& before = w[(i + 2) % 4];  // 4i - 8 ..
        const __m128i& last = w[(i + 3) % 4];    // 4i - 4 .. 4i - 1
        now = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(now, next), _mm_alignr_epi8(last, before, 4)),
                                   last);
      }
      __m128i wk = _mm_add_epi32(now, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound.data() + 4 * i)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // two rounds: cdgh now holds (a, b, e, f)
      wk = _mm_shuffle_epi32(wk, 0x0e);              // the upper two words down
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // two more: back in place
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  h[0] = static_cast<std::uint32_t>(_mm_extract_epi32(abef, 3));
  h[1] = static_cast<std::uint32_t>(_mm_extract_epi32(abef, 2));
  h[4] = static_cast<std::uint32_t>(_mm_extract_epi32(abef, 1));
  h[5] = static_cast<std::uint32_t>(_mm_extract_epi32(abef, 0));
  h[2] = static_cast<std::uint32_t>(_mm_extract_epi32(cdgh, 3));
  h[3] = static_cast<std::uint32_t>(_mm_extract_epi32(cdgh, 2));
  h[6] = static_cast<std::uint32_t>(_mm_extract_epi32(cdgh, 1));
  h[7] = static_cast<std::uint32_t>(_mm_extract_epi32(cdgh, 0));
}
#endif

}  // namespace

bool cpu_has_sha_extensions() {
#ifdef HZP_SHA_EXTENSIONS
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    const bool ssse3 = (c & bit_SSSE3) != 0, sse41 = (c & bit_SSE4_1) != 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    return ssse3 && sse41 && (b & bit_SHA) != 0;
  }();
  return has;
#else
  return false;
#endif
}

Sha256::Sha256(Sha256Rounds rounds) : Sha256() {
  if (rounds == Sha256Rounds::ShaExtensions && !cpu_has_sha_extensions()) {
    throw std::invalid_argument("SHA-256: this CPU has no SHA extensions");
  }
  rounds_ = rounds;
}

void Sha256::compress(const unsigned char* blocks, std::size_t count) {
#ifdef HZP_SHA_EXTENSIONS
  if (rounds_ == Sha256Rounds::ShaExtensions) {
    compress_sha_extensions(h_, blocks, count);
    return;
  }
#endif
  for (std::size_t b = 0; b < count; ++b) compress_portable(h_, blocks + 64 * b);
}

// Initial hash: first 32 bits of the fractional parts of the square roots of the first 8 primes.
Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      rounds_(cpu_has_sha_extensions() ? Sha256Rounds::ShaExtensions : Sha256Rounds::Portable) {}

void Sha256::update(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t n = data.size();
  length_ += n;
  if (filled_ > 0) {
    const std::size_t take = std::min(n, 64 - filled_);
    std::copy(p, p + take, block_.begin() + static_cast<std::ptrdiff_t>(filled_));
    filled_ += take;
    p += take;
    n -= take;
    if (filled_ < 64) return;
    compress(block_.data(), 1);
    filled_ = 0;
  }
  compress(p, n / 64);
  p += n / 64 * 64;
  n %= 64;
  std::copy(p, p + n, block_.begin());
  filled_ = n;
}

std::string Sha256::hex() {
  // Padding: 0x80, zeros, then the message length in bits, big-endian, to a multiple of 64 bytes.
  const std::uint64_t bits = length_ * 8;
  block_[filled_++] = 0x80;
  if (filled_ > 56) {
    std::fill(block_.begin() + static_cast<std::ptrdiff_t>(filled_), block_.end(), 0);
    compress(block_.data(), 1);
    filled_ = 0;
  }
  std::fill(block_.begin() + static_cast<std::ptrdiff_t>(filled_), block_.begin() + 56, 0);
  for (std::size_t i = 0; i < 8; ++i) block_[63 - i] = static_cast<unsigned char>(bits >> (8 * i));
  compress(block_.data(), 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (std::uint32_t v : h_) {
    for (int s = 28; s >= 0; s -= 4) out.push_back(kHex[(v >> s) & 0xf]);
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

}  // namespace hzp::core
