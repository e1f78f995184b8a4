// Timeline writers: Chrome trace JSON parses and carries the right tracks and
// times; CSV rows in microseconds.
#include "traces/timeline.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
}

TEST(Csv, Rows) {
  std::string csv = to_csv(sample());
  EXPECT_NE(csv.find("0,0,7,compute,gemm,l0.qkv,1.500,4.250,2000000000,100\n"), std::string::npos);
}

}  // namespace
}  // namespace hzp::traces
