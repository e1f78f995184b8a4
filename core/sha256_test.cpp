// SHA-256 against the FIPS 180-4 / NIST example vectors.
#include "core/sha256.hpp"

#include <gtest/gtest.h>
#include <algorithm>
#include <string>

namespace hzp::core {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits in the first padded block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Fed in pieces of every size from 1 to 129 bytes, the digest is that of the whole.
TEST(Sha256, StreamedInPiecesEqualsTheWhole) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + i % 26);
  for (std::size_t piece = 1; piece <= 129; ++piece) {
    Sha256 h;
    for (std::size_t at = 0; at < text.size(); at += piece) h.update(std::string_view(text).substr(at, piece));
    EXPECT_EQ(h.hex(), sha256_hex(text)) << "pieces of " << piece;
  }
  Sha256 million;
  for (int i = 0; i < 1000; ++i) million.update(std::string(1000, 'a'));
  EXPECT_EQ(million.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The SHA extensions' rounds give the portable rounds' digest for every
// length around the block and padding boundaries, fed whole and in pieces.
TEST(Sha256, ShaExtensionsAgreeWithThePortableRounds) {
  if (!cpu_has_sha_extensions()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::string text;
  for (int i = 0; i < 4099; ++i) text += static_cast<char>((i * 131 + 7) % 256);
  auto digest = [&text](Sha256Rounds rounds, std::size_t length, std::size_t piece) {
    Sha256 h(rounds);
    for (std::size_t at = 0; at < length; at += piece) {
      h.update(std::string_view(text).substr(at, std::min(piece, length - at)));
    }
    return h.hex();
  };
  for (std::size_t length = 0; length <= 300; ++length) {
    EXPECT_EQ(digest(Sha256Rounds::ShaExtensions, length, 1000), digest(Sha256Rounds::Portable, length, 1000))
        << length << " bytes";
  }
  for (std::size_t piece : {1UL, 63UL, 64UL, 65UL, 200UL, 4099UL}) {
    EXPECT_EQ(digest(Sha256Rounds::ShaExtensions, text.size(), piece),
              digest(Sha256Rounds::Portable, text.size(), piece))
        << "pieces of " << piece;
  }
  Sha256 abc(Sha256Rounds::ShaExtensions);
  abc.update("abc");
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace hzp::core
