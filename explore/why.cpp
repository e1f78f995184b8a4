// Why a plan wins or loses (see why.hpp).
#include "explore/why.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hzp::explore {
namespace {

double total(const std::map<std::string, double>& m) {
  double t = 0;
  for (const auto& [k, v] : m) t += v;
  return t;
}

double latency(const ShardingTerms& t) { return t.gather_latency_s + t.reduce_latency_s; }
double bandwidth(const ShardingTerms& t) { return t.gather_bandwidth_s + t.reduce_bandwidth_s; }
// Compute-stream waits that neither an exposed collective nor the host
// explains: the bubble.
double bubble(const PlanTerms& p) { return std::max(0.0, p.idle_s - total(p.exposed_s) - p.host_bound_s); }
double busy(const PlanTerms& p) { return p.step_s - p.idle_s; }

// What a group kind's collectives are, where the name alone does not say.
std::string gloss(const std::string& kind) {
  if (kind == "dp_regather" || kind == "edp_regather") {
    return " (the 1/g_o -> 1/g_p gather of updated parameters after the optimizer step)";
  }
  if (kind == "dp_optim" || kind == "edp_optim") return " (the 1/g_g -> 1/g_o gradient reduce-scatter before the step)";
  return "";
}

// The exposed collective time that grew most, and what grew under it.
std::string exposed_term(const PlanTerms& fast, const PlanTerms& slow, const std::string& kind, double grown) {
  const double dl = latency(slow.sharding) - latency(fast.sharding);
  const double db = bandwidth(slow.sharding) - bandwidth(fast.sharding);
  const std::string head = fmt::format("{} collectives exposed {:.3f} s more", kind, grown);
  if (dl + db >= 0.5 * grown && dl >= db) {
    const bool gathers = slow.sharding.gather_latency_s - fast.sharding.gather_latency_s >=
                         slow.sharding.reduce_latency_s - fast.sharding.reduce_latency_s;
    return fmt::format(
        "{} latency: {}; its sharding collectives pay {:.3f} s of NCCL latency against {:.3f} s (more steps: larger "
        "groups, or groups across nodes)",
        gathers ? "all-gather" : "reduce-scatter", head, latency(slow.sharding), latency(fast.sharding));
  }
  if (dl + db >= 0.5 * grown) {
    return fmt::format(
        "bandwidth: {}; its sharding collectives move their bytes in {:.3f} s against {:.3f} s (slower links under "
        "larger groups)",
        head, bandwidth(slow.sharding), bandwidth(fast.sharding));
  }
  return fmt::format(
      "overlap: {}{} while its sharding collectives take {:.3f} s against {:.3f} s: less of them hides "
      "behind compute",
      head, gloss(kind), latency(slow.sharding) + bandwidth(slow.sharding),
      latency(fast.sharding) + bandwidth(fast.sharding));
}

// What one plan's step is made of, when there is nothing to compare it with.
std::string anatomy(const PlanTerms& p) {
  std::string worst;
  double worst_s = 0;
  for (const auto& [k, v] : p.exposed_s) {
    if (v > worst_s) {
      worst_s = v;
      worst = k;
    }
  }
  std::string out = fmt::format("compute stream busy {:.3f} s of {:.3f} s", busy(p), p.step_s);
  if (worst_s > 0) out += fmt::format(", {} collectives exposed {:.3f} s", worst, worst_s);
  if (p.host_bound_s > 0) out += fmt::format(", waits for its host thread {:.3f} s", p.host_bound_s);
  if (bubble(p) > 0) out += fmt::format(", waits with no collective exposed {:.3f} s", bubble(p));
  const double l = latency(p.sharding), b = bandwidth(p.sharding);
  if (l + b > 0) out += fmt::format("; its sharding collectives are {:.0f} % NCCL latency", 100 * l / (l + b));
  if (p.stragglers_s > 0) out += fmt::format("; the expected slowest rank adds {:.3f} s", p.stragglers_s);
  return out;
}

}  // namespace

std::string deciding_term(const PlanTerms& fast, const PlanTerms& slow) {
  std::string kind;
  double grown = 0;
  for (const auto& [k, s] : slow.exposed_s) {
    const auto it = fast.exposed_s.find(k);
    const double d = s - (it == fast.exposed_s.end() ? 0.0 : it->second);
    if (d > grown) {
      grown = d;
      kind = k;
    }
  }
  const double waits = bubble(slow) - bubble(fast);
  const double host = slow.host_bound_s - fast.host_bound_s;
  const double work = busy(slow) - busy(fast);
  // The slowest rank's extra work shows as compute and waits: stragglers
  // decide when they make at least half the difference.
  const double stragglers = slow.stragglers_s - fast.stragglers_s;
  if (stragglers > 0 && stragglers >= 0.5 * (slow.step_s - fast.step_s)) {
    return fmt::format(
        "stragglers: the expected slowest rank adds {:.3f} s to its step against {:.3f} s (its ranks meet more "
        "often, or more ranks wait for one)",
        slow.stragglers_s, fast.stragglers_s);
  }
  if (grown >= waits && grown >= work && grown >= host && grown > 0) return exposed_term(fast, slow, kind, grown);
  if (host >= waits && host >= work && host > 0) {
    return fmt::format(
        "host: the compute stream waits {:.3f} s more for its host thread to issue the next op (the thread's "
        "kernels, collectives, events, allocator calls and blocking waits at the stack's host costs)",
        host);
  }
  if (waits >= work && waits > 0) {
    return fmt::format("bubble: the compute stream waits {:.3f} s more with no collective exposed (pipeline bubble{})",
                       waits, slow.pp > 1 ? fmt::format(", pp {}", slow.pp) : std::string());
  }
  if (work > 0) {
    return fmt::format("compute: {:.3f} s more compute-stream time (recomputation, kernel shapes, launch gaps)", work);
  }
  return "no term differs by more than a millisecond";
}

std::string why_text(const std::vector<PlanTerms>& plans, double hbm_GiB, double tolerance) {
  if (plans.empty()) return "";
  if (plans.size() == 1) {
    const PlanTerms& p = plans.front();
    return fmt::format(
        "why: {}'s step, nothing to compare with: {}{}\n", p.name, anatomy(p),
        p.fits ? "" : fmt::format("; needs {:.1f} GiB a device where {:.0f} GiB fit", p.reserved_GiB, hbm_GiB));
  }
  auto faster = [](const PlanTerms* a, const PlanTerms& b) { return !a || b.step_s < a->step_s; };
  const PlanTerms* ref = nullptr;
  for (const PlanTerms& p : plans) {
    if (p.fits && faster(ref, p)) ref = &p;
  }
  const bool any_fits = ref != nullptr;
  for (const PlanTerms& p : plans) {
    if (!any_fits && faster(ref, p)) ref = &p;
  }
  const PlanTerms* runner_up = nullptr;
  for (const PlanTerms& p : plans) {
    if (&p != ref && p.fits == ref->fits && faster(runner_up, p)) runner_up = &p;
  }
  std::size_t width = 0;
  for (const PlanTerms& p : plans) width = std::max(width, p.name.size());
  std::string out = fmt::format(
      "why: each plan against {}, the fastest plan {}; '=' within {:.1f} % of it, the error expected of this "
      "device and stack (a tie)\n",
      ref->name, any_fits ? "that fits" : "(none fits)", 100 * tolerance);
  for (const PlanTerms& p : plans) {
    const double d = p.step_s - ref->step_s;
    const bool tie = std::abs(d) < tolerance * ref->step_s && (p.fits || !any_fits);
    std::string line;
    if (!p.fits && any_fits) {
      line = fmt::format(
          "memory: needs {:.1f} GiB a device where {:.0f} GiB fit; the largest part at the peak is {} "
          "({:.1f} GiB){}",
          p.reserved_GiB, hbm_GiB, p.largest_memory, p.largest_memory_GiB,
          d < 0 ? fmt::format("; it would be {:.3f} s faster", -d) : std::string());
    } else if (&p == ref) {
      const bool tied = runner_up && runner_up->step_s - p.step_s < tolerance * p.step_s;
      const std::string versus =
          !runner_up ? ""
          : tied     ? fmt::format("ties with {} ({:.3f} s faster as predicted, within the expected error)",
                                   runner_up->name, runner_up->step_s - p.step_s)
                     : fmt::format("wins against {} by {:.3f} s", runner_up->name, runner_up->step_s - p.step_s);
      line = runner_up ? fmt::format("{}; {} pays {}", versus, runner_up->name, deciding_term(p, *runner_up))
                       : "the only plan " + (p.fits ? std::string("that fits; ") : std::string("; ")) + anatomy(p);
    } else {
      line = fmt::format("{:+.3f} s ({:+.1f} %): {}", d, 100 * d / ref->step_s,
                         d >= 0 ? deciding_term(*ref, p) : "faster, and " + deciding_term(p, *ref));
    }
    out += fmt::format("  {} {:<{}} {}\n", tie ? "=" : " ", p.name, width, line);
  }
  return out;
}

std::vector<PlanTerms> plan_terms(const ScenarioResult& r, const cost::PerfModel& pm) {
  std::vector<PlanTerms> out;
  for (const StrategyResult& run : r.runs) {
    const sim::Metrics& m = run.metrics;
    PlanTerms t;
    t.name = std::string(plan::to_string(run.strategy));
    t.step_s = m.step_time.to_seconds();
    t.fits = m.fits();
    t.reserved_GiB = m.peak_reserved().gib();
    if (const sim::ProgramMemory* w = m.worst_memory(); w && !w->at_peak.empty()) {
      t.largest_memory = w->at_peak.front().first;
      t.largest_memory_GiB = w->at_peak.front().second.gib();
    }
    for (const auto& [k, d] : m.exposed_comm) t.exposed_s[k] = d.to_seconds();
    t.idle_s = m.compute_idle.to_seconds();
    t.host_bound_s = m.split.host_bound.to_seconds();
    t.pp = run.plan.options.pp;
    t.sharding = sharding_terms(run.schedule, m, pm);
    t.stragglers_s = stragglers_seconds(r.model, pm, run.plan, run.schedule);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace hzp::explore
