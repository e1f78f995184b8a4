// Lengths of the documents packed into training sequences: what decides how
// much a packed sequence's attention costs (Σ lenᵢ² against seq²), and so how
// unevenly ranks that draw different sequences finish.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/options.hpp"

namespace hzp::plan {

/// A distribution of document lengths (tokens) as a mixture: each part, with
/// its share of the documents, is either exponential of a mean or uniform
/// over (lo, hi]. Drawn lengths are rounded and at least one token.
struct DocLengths {
  struct Part {
    double weight = 1;      // share of documents; the parts' weights sum to 1
    double mean = 0;        // > 0: exponential of this mean
    double lo = 0, hi = 0;  // mean == 0: uniform over (lo, hi]
  };
  std::vector<Part> parts;

  /// One length from two uniforms in [0, 1): u picks the part, v the length in it.
  [[nodiscard]] double draw(double u, double v) const;
  /// Mean document length (tokens).
  [[nodiscard]] double mean() const;
};

/// Exponential lengths of mean `mean` (`doc_mean_tokens`).
[[nodiscard]] DocLengths exponential_doc_lengths(double mean);

/// `doc_lengths` as a plan gives it: a catalog name (dolma-v1) or
/// a histogram "UPPER:WEIGHT,UPPER:WEIGHT,...", bins (previous upper, upper]
/// from 0, weights the share of documents in each bin (any positive scale).
/// Problems name `doc_lengths`; empty: `out` holds the distribution.
[[nodiscard]] std::vector<core::Problem> parse_doc_lengths(std::string_view text, DocLengths& out);

}  // namespace hzp::plan
