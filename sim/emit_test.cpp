// The memory curve a timeline carries: every rank class's allocations and
// frees in time order across its streams, whatever order each stream's own
// times come in.
#include "sim/emit.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hzp::sim {
namespace {

core::Op buffer_op(int id, core::OpKind kind, const std::string& buffer, std::int64_t bytes) {
  core::Op op = core::Op::of(kind);
  op.id = id;
  op.payload = core::Op::Buffer{buffer, core::BufferClass::Activations, core::Bytes(bytes)};
  return op;
}

TEST(EmitTimeline, MemoryPointsInTimeOrderAcrossStreams) {
  core::Schedule s;
  s.step = core::StepInfo{"m", "c", "x", 1, 100, 10, 1, core::Flops(1e12)};
  core::Program p;
  p.ranks = {0};
  p.threads.push_back(core::Thread{0, "main"});
  core::Stream a{0, "compute", core::StreamKind::Compute, 0, {}};
  core::Stream b{1, "gather", core::StreamKind::ParamGather, 0, {}};
  // Stream 0: x allocated at 10 ns, freed at 50. Stream 1: y at 20-30, then
  // w and z whose times (40, then 35) run backwards, as a Schedule read from
  // a file may have them.
  a.ops = {buffer_op(0, core::OpKind::Alloc, "x", 1000), buffer_op(2, core::OpKind::Free, "x", 1000)};
  b.ops = {buffer_op(1, core::OpKind::Alloc, "y", 2000), buffer_op(3, core::OpKind::Free, "y", 2000),
           buffer_op(4, core::OpKind::Alloc, "w", 3000), buffer_op(5, core::OpKind::Alloc, "z", 4000)};
  p.streams = {a, b};
  s.programs.push_back(p);
  auto at = [](std::int64_t t) { return core::OpTime{core::TimePoint::ns(t), core::TimePoint::ns(t)}; };
  const std::vector<std::vector<std::vector<core::OpTime>>> times{{{at(10), at(50)}, {at(20), at(30), at(40), at(35)}}};
  traces::TimelineRecorder rec(false);
  emit_timeline(s, times, traces::TraceHeader{}, rec);
  const auto& mem = rec.timeline().memory;
  ASSERT_EQ(mem.size(), 6U);
  const std::vector<std::pair<std::int64_t, std::string>> want{{10, "x"}, {20, "y"}, {30, "y"},
                                                               {35, "z"}, {40, "w"}, {50, "x"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(mem[i].time.count_ns(), want[i].first) << i;
    EXPECT_EQ(mem[i].buffer, want[i].second) << i;
  }
  // Live bytes: x 1000, +y 3000, -y 1000, +z 5000, +w 8000, -x 7000.
  EXPECT_EQ(mem[1].in_use.count(), 3000);
  EXPECT_EQ(mem[2].in_use.count(), 1000);
  EXPECT_EQ(mem[4].in_use.count(), 8000);
  EXPECT_EQ(mem[5].in_use.count(), 7000);
  EXPECT_EQ(mem[5].delta.count(), -1000);
}

}  // namespace
}  // namespace hzp::sim
