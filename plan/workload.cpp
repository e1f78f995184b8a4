// Workload variability: the seeded draws of each rank class (packed documents,
// compute jitter, expert loads) and how they scale an op of the step graph.
#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>

#include "plan/lowering.hpp"

namespace hzp::plan {

namespace {

// splitmix64: a seeded, portable stream of 64-bit values (std:: distributions
// differ between standard libraries; these transforms do not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  double normal() {  // Box–Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
  }
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return Rng{a ^ (b * 0x9e3779b97f4a7c15ULL)}.next(); }

}  // namespace

Workload draw_workload(const PlanOptions& o, std::int64_t seq_len, std::int64_t micro_batches, int variability_class,
                       int stage, int expert_rank, int ep, int experts) {
  Workload w;
  const auto m = static_cast<std::size_t>(micro_batches);
  w.attention.assign(m, 1.0);
  w.compute.assign(m, 1.0);
  const auto vc = static_cast<std::uint64_t>(variability_class);
  for (std::size_t mb = 0; mb < m; ++mb) {
    if (o.doc_mean_tokens > 0) {
      // Documents packed into the sequence; the last one is cut at the end.
      // Data belongs to the data-parallel rank: the same on every stage.
      Rng rng{mix(mix(o.seed, vc), mb)};
      const double s = static_cast<double>(seq_len);
      double filled = 0, squares = 0;
      while (filled < s) {
        double len = std::min(std::max(1.0, std::round(rng.exponential(o.doc_mean_tokens))), s - filled);
        filled += len;
        squares += len * len;
      }
      w.attention[mb] = squares / (s * s);
    }
    if (o.compute_jitter > 0) {
      Rng rng{mix(mix(mix(o.seed ^ 0x6a177e5ULL, vc), static_cast<std::uint64_t>(stage)), mb)};
      w.compute[mb] = std::max(0.5, 1.0 + o.compute_jitter * rng.normal());
    }
  }
  if (o.moe_skew > 0 && ep > 1 && experts > 0) {
    // Zipf loads over experts; rank e holds experts [e·E/ep, (e+1)·E/ep).
    double total = 0, mine = 0;
    const int per_rank = experts / ep;
    for (int j = 0; j < experts; ++j) {
      const double load = 1.0 / std::pow(j + 1.0, o.moe_skew);
      total += load;
      if (j / per_rank == expert_rank) mine += load;
    }
    w.experts = mine / total * ep;
  }
  return w;
}

namespace detail {

models::GraphOp scale_op(const models::GraphOp& op, double compute, double attention, double experts) {
  const bool expert = op.param_class == core::ParamClass::Expert;
  double factor = compute;
  const bool attention_core = op.kind == core::ComputeKind::Attention ||
                              op.attention == models::AttentionPart::Scores ||
                              op.attention == models::AttentionPart::Context;
  if (attention_core) factor *= attention;
  if (expert) factor *= experts;
  models::GraphOp out = op;
  if (factor == 1.0) return out;
  out.flops = op.flops * factor;
  if (expert && out.gemm) {
    // More (or fewer) rows per expert: the GEMM's m (or k, for the weight gradient).
    auto rows = [&](std::int64_t v) {
      return std::max<std::int64_t>(1, std::llround(static_cast<double>(v) * experts));
    };
    if (out.phase == models::Phase::BackwardWeight) {
      out.gemm->k = rows(out.gemm->k);
    } else {
      out.gemm->m = rows(out.gemm->m);
    }
    out.bytes = core::Bytes(static_cast<std::int64_t>(static_cast<double>(op.bytes.count()) * experts));
  }
  return out;
}

}  // namespace detail
}  // namespace hzp::plan
