// Launch detection, rank plans and communicator rounds (see launch.hpp).
#include "runtime/launch.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "core/error.hpp"

namespace hzp::runtime {
namespace {

int env_int(const Getenv& getenv, const char* name, int min, int max) {
  const char* v = getenv(name);
  int out = 0;
  const std::string_view s = v == nullptr ? std::string_view{} : std::string_view(v);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (v == nullptr || ec != std::errc() || end != s.data() + s.size() || out < min || out > max) {
    throw core::InputError("environment", name,
                           fmt::format("expected an integer in [{}, {}], got \"{}\"", min, max, v ? v : ""));
  }
  return out;
}

}  // namespace

LaunchInfo detect_launch(const Getenv& getenv) {
  struct Scheme {
    const char* launcher;
    const char *rank, *world, *local;
  };
  static constexpr Scheme kSchemes[] = {
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
  };
  for (const Scheme& sc : kSchemes) {
    if (getenv(sc.rank) == nullptr) continue;
    LaunchInfo l;
    l.launcher = sc.launcher;
    l.world = env_int(getenv, sc.world, 1, 1 << 24);
    l.rank = env_int(getenv, sc.rank, 0, l.world - 1);
    l.local_rank = getenv(sc.local) != nullptr ? env_int(getenv, sc.local, 0, l.world - 1) : 0;
    return l;
  }
  return LaunchInfo{};
}

RankPlan rank_plan(const core::Schedule& s, int rank) {
  RankPlan plan;
  plan.rank = rank;
  auto holds = [rank](const std::vector<int>& ranks) { return std::binary_search(ranks.begin(), ranks.end(), rank); };
  bool found = false;
  for (std::size_t p = 0; p < s.programs.size() && !found; ++p) {
    if (holds(s.programs[p].ranks)) {
      plan.program = p;
      found = true;
    }
  }
  if (!found) {
    throw core::InputError(
        "schedule", "programs",
        fmt::format("expected a rank class holding rank {} (world size {})", rank, s.step.world_size));
  }
  std::set<int> named;
  for (const auto& st : s.programs[plan.program].streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective) named.insert(op.collective().group);
    }
  }
  plan.group_of.assign(s.groups.size(), -1);
  for (int g : named) {
    const core::GroupKind kind = s.group(g).kind;
    for (const auto& candidate : s.groups) {
      if (candidate.kind == kind && holds(candidate.ranks)) {
        plan.group_of[static_cast<std::size_t>(g)] = candidate.id;
        break;
      }
    }
    if (plan.group_of[static_cast<std::size_t>(g)] < 0) {
      throw core::InputError("schedule", fmt::format("groups[{}]", g),
                             fmt::format("expected a group of kind {} holding rank {}", core::to_string(kind), rank));
    }
  }
  return plan;
}

std::vector<SplitRound> comm_split_rounds(const core::Schedule& s) {
  std::map<int, std::vector<SplitRound>> by_kind;  // kind -> its rounds
  for (const auto& g : s.groups) {
    auto& rounds = by_kind[static_cast<int>(g.kind)];
    // First round of this kind whose groups are disjoint from g.
    SplitRound* fit = nullptr;
    for (auto& r : rounds) {
      bool disjoint = true;
      for (int other : r.groups) {
        const auto& o = s.group(other).ranks;
        for (int rank : g.ranks) disjoint = disjoint && !std::binary_search(o.begin(), o.end(), rank);
        if (!disjoint) break;
      }
      if (disjoint) {
        fit = &r;
        break;
      }
    }
    if (fit == nullptr) {
      rounds.push_back(SplitRound{g.kind, {}});
      fit = &rounds.back();
    }
    fit->groups.push_back(g.id);
  }
  std::vector<SplitRound> out;
  for (auto& [kind, rounds] : by_kind) out.insert(out.end(), rounds.begin(), rounds.end());
  return out;
}

std::optional<int> split_colour(const core::Schedule& s, const SplitRound& round, int rank) {
  for (int g : round.groups) {
    const auto& r = s.group(g).ranks;
    if (std::binary_search(r.begin(), r.end(), rank)) return g;
  }
  return std::nullopt;
}

}  // namespace hzp::runtime
