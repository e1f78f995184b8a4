// Where this process sits in a launch, which rank class it executes, and the
// communicators it needs: the set-up of hzp-run that needs no GPU.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace hzp::runtime {

/// One process per GPU under mpirun (OMPI_COMM_WORLD_*), a PMI launcher
/// (PMI_RANK/PMI_SIZE), Slurm's srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID)
/// or torchrun (RANK/WORLD_SIZE/LOCAL_RANK); or a single process.
struct LaunchInfo {
  std::string launcher = "single";  // "mpirun", "pmi", "slurm", "torchrun" or "single"
  int rank = 0;
  int world = 1;
  int local_rank = 0;
};
using Getenv = std::function<const char*(const char*)>;
/// Throws InputError naming the variable when one is present but malformed
/// (not a number, rank outside [0, world)).
[[nodiscard]] LaunchInfo detect_launch(const Getenv& getenv);

/// What one global rank executes: its rank class (the Schedule program whose
/// ranks contain it) and, for every group the program's ops name (as its
/// representative sees them), the group of the same kind that contains this
/// rank.
struct RankPlan {
  int rank = 0;
  std::size_t program = 0;
  std::vector<int> group_of;  // indexed by Schedule group id: this rank's group, -1 when unused
};
/// Throws InputError when no program holds the rank or a named group has no
/// counterpart containing it.
[[nodiscard]] RankPlan rank_plan(const core::Schedule& s, int rank);

/// Communicator set-up with ncclCommSplit: every rank takes part in every
/// round; in a round each rank passes the id of the one group of the round
/// that holds it as its colour (or none). Groups of one round are disjoint;
/// rounds follow group-kind order, then group order.
struct SplitRound {
  core::GroupKind kind = core::GroupKind::World;
  std::vector<int> groups;  // ids
};
[[nodiscard]] std::vector<SplitRound> comm_split_rounds(const core::Schedule& s);
/// The colour of `rank` in a round: the id of its group there, or nullopt.
[[nodiscard]] std::optional<int> split_colour(const core::Schedule& s, const SplitRound& round, int rank);

}  // namespace hzp::runtime
