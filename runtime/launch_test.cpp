// Launch detection, rank plans and communicator rounds on small Schedules
// built by hand.
#include "runtime/launch.hpp"

#include <gtest/gtest.h>

#include <map>

#include "core/error.hpp"

namespace hzp::runtime {
namespace {

Getenv env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Launch, ReadsEachLauncher) {
  EXPECT_EQ(detect_launch(env({})).launcher, "single");
  const LaunchInfo m = detect_launch(
      env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.world, 16);
  EXPECT_EQ(m.local_rank, 1);
  const LaunchInfo t = detect_launch(env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}}));
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(detect_launch(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}})).launcher, "slurm");
  EXPECT_THROW((void)detect_launch(env({{"RANK", "4"}, {"WORLD_SIZE", "4"}})), core::InputError);  // rank >= world
  EXPECT_THROW((void)detect_launch(env({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), core::InputError);
}

// 8 ranks as tp 2 × dp 4: rank = t + 2·d. Two rank classes (t = 0, t = 1).
core::Schedule tp2_dp4() {
  core::Schedule s;
  s.step.world_size = 8;
  for (int d = 0; d < 4; ++d) s.groups.push_back(core::Group{d, core::GroupKind::Tp, {2 * d, 2 * d + 1}});
  for (int t = 0; t < 2; ++t)
    s.groups.push_back(core::Group{4 + t, core::GroupKind::DpShard, {t, t + 2, t + 4, t + 6}});
  for (int t = 0; t < 2; ++t) {
    core::Program p;
    p.id = t;
    p.ranks = {t, t + 2, t + 4, t + 6};
    core::Stream st{0, "compute", core::StreamKind::Compute, 0, {}};
    core::Op tp = core::Op::of(core::OpKind::Collective);
    tp.collective().group = 0;  // as the representative (rank t) sees it
    core::Op dp = tp;
    dp.id = 1;
    dp.collective().group = 4 + t;
    st.ops = {tp, dp};
    p.streams = {st};
    s.programs.push_back(p);
  }
  return s;
}

TEST(Launch, RankPlanFindsTheClassAndTheRanksOwnGroups) {
  const core::Schedule s = tp2_dp4();
  const RankPlan r5 = rank_plan(s, 5);  // t = 1, d = 2
  EXPECT_EQ(r5.program, 1U);
  EXPECT_EQ(r5.group_of[0], 2);  // the tp group of d = 2
  EXPECT_EQ(r5.group_of[5], 5);  // the dp group of t = 1
  EXPECT_EQ(r5.group_of[1], -1);
  EXPECT_THROW((void)rank_plan(s, 8), core::InputError);
}

TEST(Launch, SplitRoundsAreDisjointAndCoverEveryGroupOnce) {
  const core::Schedule s = tp2_dp4();
  const auto rounds = comm_split_rounds(s);
  ASSERT_EQ(rounds.size(), 2U);  // one per kind: the tp groups, the dp groups
  EXPECT_EQ(rounds[0].kind, core::GroupKind::DpShard);
  EXPECT_EQ(rounds[0].groups, (std::vector<int>{4, 5}));
  EXPECT_EQ(rounds[1].groups, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(split_colour(s, rounds[1], 5), 2);
  EXPECT_EQ(split_colour(s, rounds[0], 6), 4);
  // Overlapping groups of one kind go to separate rounds.
  core::Schedule o = s;
  o.groups.push_back(core::Group{6, core::GroupKind::Tp, {1, 2}});
  const auto more = comm_split_rounds(o);
  ASSERT_EQ(more.size(), 3U);
  EXPECT_EQ(more[2].groups, (std::vector<int>{6}));
  EXPECT_FALSE(split_colour(o, more[2], 0).has_value());
}

}  // namespace
}  // namespace hzp::runtime
