// SHA-256 (FIPS 180-4) of a byte string, as lower-case hex. Used to hash
// canonical Schedules and input files for provenance.
#pragma once

#include <string>
#include <string_view>

namespace hzp::core {

[[nodiscard]] std::string sha256_hex(std::string_view data);

}  // namespace hzp::core
