#include "plan/doc_lengths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hzp::plan {

namespace {

// Dolma v1 (allenai/dolma dataset card at a8b60c3, "Fix size #9"; Soldaini et
// al., arXiv:2402.00159): documents (millions) and GPT-NeoX tokens (billions)
// per source. Each source is a part weighted by its documents, its lengths
// taken as exponential of the source's mean (tokens / documents): the card
// gives no spread within a source, the exponential is hzp's assumption.
struct Source {
  const char* name;
  double documents_millions, tokens_billions;
};
constexpr Source kDolmaV1[] = {
    {"CommonCrawl", 4600, 2415},       {"C4", 364, 175},        {"peS2o", 38.8, 57}, {"The Stack", 236, 430},
    {"Project Gutenberg", 0.052, 4.8}, {"Wikipedia", 6.1, 3.6},
};

// The parts' weights scaled to sum to 1, once, so that a draw need not sum them.
DocLengths normalised(DocLengths d) {
  double total = 0;
  for (const DocLengths::Part& p : d.parts) total += p.weight;
  for (DocLengths::Part& p : d.parts) p.weight /= total;
  return d;
}

// Means in GPT-NeoX tokens (tokens / documents): CommonCrawl 525, C4 481,
// peS2o 1,469, The Stack 1,822, Project Gutenberg 92,308, Wikipedia 590.
DocLengths dolma_v1() {
  DocLengths d;
  for (const Source& s : kDolmaV1) {
    d.parts.push_back({s.documents_millions, s.tokens_billions * 1e3 / s.documents_millions, 0, 0});
  }
  return normalised(std::move(d));
}

// A number of the histogram text, spaces around it allowed.
std::optional<double> number(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return core::parse_decimal(s);
}

}  // namespace

double DocLengths::draw(double u, double v) const {
  double target = u;
  const Part* part = &parts.back();
  for (const Part& p : parts) {
    if (target < p.weight) {
      part = &p;
      break;
    }
    target -= p.weight;
  }
  const double len = part->mean > 0 ? -part->mean * std::log1p(-v) : part->lo + (part->hi - part->lo) * (1.0 - v);
  return std::max(1.0, std::round(len));
}

double DocLengths::mean() const {
  double sum = 0;
  for (const Part& p : parts) sum += p.weight * (p.mean > 0 ? p.mean : 0.5 * (p.lo + p.hi));
  return sum;
}

DocLengths exponential_doc_lengths(double mean) {
  DocLengths d;
  d.parts.push_back({1, mean, 0, 0});
  return d;
}

std::vector<core::Problem> parse_doc_lengths(std::string_view text, DocLengths& out) {
  if (text == "dolma-v1") {
    out = dolma_v1();
    return {};
  }
  auto problem = [&](const std::string& what) {
    return std::vector<core::Problem>{
        {"doc_lengths", fmt::format("expected dolma-v1 or a histogram UPPER:WEIGHT,... (bins from 0 up to each "
                                    "UPPER tokens, WEIGHT their share of documents), {}",
                                    what)}};
  };
  DocLengths d;
  double lo = 0, total = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view bin = text.substr(start, comma - start);
    const std::size_t colon = bin.find(':');
    const auto upper = colon == std::string_view::npos ? std::nullopt : number(bin.substr(0, colon));
    const auto weight = colon == std::string_view::npos ? std::nullopt : number(bin.substr(colon + 1));
    if (!upper || !weight) return problem(fmt::format("got '{}' in '{}'", bin, text));
    if (*upper <= lo || *upper > (1 << 21)) {
      return problem(fmt::format("got upper {} after {} (expected increasing uppers up to 2097152)", *upper, lo));
    }
    if (*weight < 0) return problem(fmt::format("got the negative weight {}", *weight));
    if (*weight > 0) d.parts.push_back({*weight, 0, lo, *upper});
    total += *weight;
    lo = *upper;
    start = comma + 1;
  }
  if (!(total > 0)) return problem("got no bin of positive weight");
  out = normalised(std::move(d));
  return {};
}

}  // namespace hzp::plan
