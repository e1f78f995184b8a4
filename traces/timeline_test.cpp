// Timeline writers: Chrome trace JSON parses and carries the right tracks and
// times; CSV rows in microseconds.
#include "traces/timeline.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.hpp"

namespace hzp::traces {
namespace {

Timeline sample() {
  Timeline t;
  t.header.schedule_sha256 = "abc";
  t.header.engine = "analytic";
  t.streams.push_back({0, 0, "dp", {0, 1, 2, 3}, "compute", core::StreamKind::Compute});
  t.streams.push_back({0, 1, "dp", {0, 1, 2, 3}, "param_allgather", core::StreamKind::ParamGather});
  OpRecord gemm{0,
                0,
                7,
                "l0.qkv",
                core::OpKind::Compute,
                "gemm",
                core::GroupKind::World,
                core::Flops(2e9),
                core::Bytes(100),
                core::TimePoint::ns(1500),
                core::TimePoint::ns(4250),
                std::nullopt};
  OpRecord ag{0,
              1,
              3,
              "l0.allgather",
              core::OpKind::Collective,
              "all_gather",
              core::GroupKind::DpShard,
              core::Flops(0),
              core::Bytes(4096),
              core::TimePoint::ns(0),
              core::TimePoint::ns(2000),
              std::nullopt};
  t.ops = {gemm, ag};
  t.memory.push_back(
      {0, core::TimePoint::ns(10), core::Bytes(1LL << 30), core::Bytes(2LL << 30), "x", core::Bytes(1LL << 30)});
  return t;
}

TEST(ChromeTrace, ParsesWithTracksAndTimes) {
  auto j = nlohmann::json::parse(to_chrome_trace(sample()));
  EXPECT_EQ(j["otherData"]["schedule_sha256"], "abc");
  const auto& ev = j["traceEvents"];
  int complete = 0;
  for (const auto& e : ev) {
    if (e["ph"] == "X" && e["name"] == "l0.qkv") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.5);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.75);
      EXPECT_EQ(e["tid"], 0);
      ++complete;
    }
    if (e["ph"] == "X" && e["name"] == "l0.allgather") {
      EXPECT_EQ(e["args"]["group_kind"], "dp_shard");
      EXPECT_EQ(e["tid"], 1);
      ++complete;
    }
    if (e["ph"] == "C") {
      EXPECT_DOUBLE_EQ(e["args"]["GiB"].get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(e["args"]["reserved_GiB"].get<double>(), 2.0);
    }
    if (e["ph"] == "M" && e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "class 0 'dp' (ranks 0-3)");
    }
  }
  EXPECT_EQ(complete, 2);
}

TEST(ChromeTrace, ReadsBackWhatItWrote) {
  Timeline t = sample();
  t.ops[0].issued = core::TimePoint::ns(1250);
  const Timeline r = from_chrome_trace(to_chrome_trace(t), "t.json");
  EXPECT_EQ(r.header.schedule_sha256, "abc");
  EXPECT_EQ(r.header.engine, "analytic");
  ASSERT_EQ(r.streams.size(), 2U);
  EXPECT_EQ(r.streams[1].stream_name, "param_allgather");
  ASSERT_EQ(r.ops.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.ops[i].program, t.ops[i].program);
    EXPECT_EQ(r.ops[i].stream, t.ops[i].stream);
    EXPECT_EQ(r.ops[i].op_id, t.ops[i].op_id);
    EXPECT_EQ(r.ops[i].name, t.ops[i].name);
    EXPECT_EQ(r.ops[i].kind, t.ops[i].kind);
    EXPECT_EQ(r.ops[i].what, t.ops[i].what);
    EXPECT_EQ(r.ops[i].start.count_ns(), t.ops[i].start.count_ns());  // nanoseconds survive
    EXPECT_EQ(r.ops[i].end.count_ns(), t.ops[i].end.count_ns());
    EXPECT_EQ(r.ops[i].bytes.count(), t.ops[i].bytes.count());
  }
  EXPECT_EQ(r.ops[1].group_kind, core::GroupKind::DpShard);
  ASSERT_TRUE(r.ops[0].issued);
  EXPECT_EQ(r.ops[0].issued->count_ns(), 1250);
  EXPECT_FALSE(r.ops[1].issued);
  EXPECT_DOUBLE_EQ(r.ops[0].flops.count(), 2e9);
}

TEST(ChromeTrace, NamesWhatIsWrongWithABadTrace) {
  auto err = [](const std::string& text) {
    try {
      (void)from_chrome_trace(text, "bad.json");
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(err("[1, 2").find("bad.json"), std::string::npos);
  EXPECT_NE(err(R"({"traceEvents": []})").find("otherData"), std::string::npos);
  std::string good = to_chrome_trace(sample());
  const std::string kind = "\"group_kind\":\"dp_shard\"";
  const auto at = good.find(kind);
  ASSERT_NE(at, std::string::npos);
  good.replace(at, kind.size(), "\"group_kind\":\"nope\"");
  EXPECT_NE(err(good).find("args.group_kind"), std::string::npos) << err(good);
  // Absurd times: a start 10^308 us before the origin, a duration of 10^308
  // us or below zero (issue 42, item 8: they made a step of -9.2e12 ms).
  const std::string trace = to_chrome_trace(sample());
  for (const auto& [from, to, key] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"\"ts\":", "\"ts\":-1e308,\"was\":", ".ts"},
                                                                      {"\"dur\":", "\"dur\":1e308,\"was\":", ".dur"},
                                                                      {"\"dur\":", "\"dur\":-1,\"was\":", ".dur"}}) {
    std::string bad = trace;
    bad.replace(bad.find(from), from.size(), to);
    const std::string e = err(bad);
    EXPECT_NE(e.find(key + ": expected microseconds in"), std::string::npos) << e;
  }
}

// Three rank classes of two ranks each; group 0 (dp_shard) spans all three,
// group 1 (tp) lies inside class 0. Each class runs two all-gathers on its
// dp_shard group; class 0 also an all-reduce over tp; class 0 sends to class
// 1 and class 1 to class 2. Derived by hand: 2 all-gathers x 2 links (0->1,
// 1->2) + 2 sends = 6 links; the tp all-reduce links nothing.
core::Schedule three_classes() {
  core::Schedule s;
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 2, 4}});
  s.groups.push_back(core::Group{1, core::GroupKind::Tp, {0, 1}});
  for (int c = 0; c < 3; ++c) {
    core::Program p;
    p.id = c;
    p.name = "c" + std::to_string(c);
    p.ranks = {2 * c, 2 * c + 1};
    core::Stream st{0, "comm", core::StreamKind::Comm, 0, {}};
    auto push = [&](core::OpKind kind, int group, int peer, int seq) {
      core::Op op = core::Op::of(kind);
      op.id = static_cast<int>(st.ops.size());
      if (kind == core::OpKind::Collective) {
        op.collective().group = group;
        op.collective().seq = seq;
      } else {
        op.transfer().peer = peer;
        op.transfer().seq = seq;
      }
      st.ops.push_back(op);
    };
    push(core::OpKind::Collective, 0, -1, 0);
    push(core::OpKind::Collective, 0, -1, 1);
    if (c == 0) push(core::OpKind::Collective, 1, -1, 0);
    if (c > 0) push(core::OpKind::Recv, -1, 2 * (c - 1), 0);
    if (c < 2) push(core::OpKind::Send, -1, 2 * (c + 1), 0);
    p.streams.push_back(st);
    s.programs.push_back(p);
  }
  return s;
}

TEST(PeerLinks, ChainsCollectivesAcrossClassesAndPairsSends) {
  const std::vector<FlowLink> links = peer_links(three_classes());
  const std::vector<FlowLink> expected{{0, 0, 1, 0}, {0, 1, 1, 1}, {0, 3, 1, 2},
                                       {1, 0, 2, 0}, {1, 1, 2, 1}, {1, 3, 2, 2}};
  EXPECT_EQ(links, expected);
}

TEST(ChromeTrace, DrawsAFlowPerLinkWhoseOpsItHolds) {
  const core::Schedule s = three_classes();
  const std::vector<FlowLink> flows = peer_links(s);
  ASSERT_EQ(flows.size(), 6U);
  Timeline t;
  // Every op but class 2's recv (id 2) ran from 10 to 30 ns: 5 of the 6 links
  // have both ends in the trace.
  for (const core::Program& p : s.programs) {
    for (const core::Op& op : p.streams[0].ops) {
      if (p.id == 2 && op.id == 2) continue;
      OpRecord r;
      r.program = p.id;
      r.op_id = op.id;
      r.kind = op.kind;
      r.what = op.kind == core::OpKind::Collective ? "all_gather" : std::string(core::to_string(op.kind));
      r.group_kind = core::GroupKind::DpShard;
      r.start = core::TimePoint::ns(10);
      r.end = core::TimePoint::ns(30);
      t.ops.push_back(r);
    }
  }
  const auto j = nlohmann::json::parse(to_chrome_trace(t, flows));
  std::map<int, int> starts, finishes;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "s") {
      ++starts[e["id"].get<int>()];
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.02);  // the middle of its slice
    }
    if (e["ph"] == "f") {
      ++finishes[e["id"].get<int>()];
      EXPECT_EQ(e["bp"], "e");
    }
  }
  EXPECT_EQ(starts.size(), 5U);
  EXPECT_EQ(starts, finishes);
  // The flows do not come back as ops.
  EXPECT_EQ(from_chrome_trace(to_chrome_trace(t, flows), "t.json").ops.size(), t.ops.size());
}

TEST(Csv, Rows) {
  std::string csv = to_csv(sample());
  EXPECT_NE(csv.find("0,0,7,compute,gemm,l0.qkv,1.500,4.250,2000000000,100\n"), std::string::npos);
}

}  // namespace
}  // namespace hzp::traces
