// The Schedule contract: canonical JSON and hash, the checker's rejections,
// and the replay's timing on cases small enough to work out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "schedule/check.hpp"
#include "schedule/names.hpp"
#include "schedule/replay.hpp"
#include "schedule/schedule.hpp"

namespace hzp::core {
namespace {

Op compute(int id, const std::string& name, double flops) {
  Op op = Op::of(OpKind::Compute);
  op.id = id;
  op.name = name;
  op.payload = Op::Compute{ComputeKind::Gemm, Flops(flops), Bytes(100), Dtype::Bf16, GemmShape{8, 8, 8, 1}, 1, {}};
  return op;
}
Op collective(int id, int group, int seq, std::int64_t bytes) {
  Op op = Op::of(OpKind::Collective);
  op.id = id;
  op.name = "ag";
  op.payload = Op::Collective{CollectiveKind::AllGather, group, seq, Bytes(bytes), Dtype::Bf16};
  return op;
}
Op event_op(int id, OpKind kind, int event) {
  Op op = Op::of(kind);
  op.id = id;
  op.name = kind == OpKind::Record ? "rec" : "wait";
  op.event().id = event;
  return op;
}

// Two programs (ranks 0 and 1), one all-gather over both, then a GEMM that waits on it.
Schedule two_rank_schedule() {
  Schedule s;
  s.name = "t";
  s.step = StepInfo{"m", "c", "x", 2, 4, 2, 1, Flops(1e9)};
  s.groups.push_back(Group{0, GroupKind::DpShard, {0, 1}});
  for (int p = 0; p < 2; ++p) {
    Program prog;
    prog.id = p;
    prog.name = "r" + std::to_string(p);
    prog.ranks = {p};
    prog.threads.push_back(Thread{0, "main", Duration::ns(0)});
    Stream comp{0, "compute", StreamKind::Compute, 0, {}};
    Stream ag{1, "ag", StreamKind::ParamGather, 0, {}};
    ag.ops.push_back(collective(0, 0, 0, 1000));
    ag.ops.push_back(event_op(1, OpKind::Record, 7));
    comp.ops.push_back(compute(2, "pre", 10));
    comp.ops.push_back(event_op(3, OpKind::Wait, 7));
    comp.ops.push_back(compute(4, "post", 10));
    prog.streams = {comp, ag};
    s.programs.push_back(prog);
  }
  return s;
}

std::string schedule_error(const Schedule& s) {
  try {
    check_schedule(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Schedule, CanonicalJsonRoundTripsAndHashes) {
  Schedule s = two_rank_schedule();
  std::string text = to_canonical_json(s);
  Schedule back = schedule_from_json(text, "s.json");
  EXPECT_EQ(to_canonical_json(back), text);
  EXPECT_EQ(schedule_hash(back), schedule_hash(s));
  s.programs[0].streams[0].ops[0].compute().flops = Flops(11);
  EXPECT_NE(schedule_hash(s), schedule_hash(back));
}

// The streamed encoding is nlohmann/json's canonical dump of the same document
// (sorted keys, no whitespace), whatever the names hold, and the hash is the
// SHA-256 of that text without its "sha256" key.
TEST(Schedule, CanonicalTextIsTheSortedDumpAndTheHashItsDigest) {
  Schedule s = two_rank_schedule();
  s.name = "quote \" back\\slash tab\t newline\n bell\x07 utf-8 \xc3\xa9";
  s.programs[0].streams[0].ops[0].name = "x\x01y";
  s.programs[0].streams[0].ops[0].compute().flops = Flops(1.5e20);
  const std::string text = to_canonical_json(s);
  nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc.dump(), text);
  EXPECT_EQ(doc.at("sha256"), schedule_hash(s));
  doc.erase("sha256");
  EXPECT_EQ(sha256_hex(doc.dump()), schedule_hash(s));
  EXPECT_EQ(schedule_from_json(text, "s.json").name, s.name);
}

TEST(Schedule, EditedFileFailsHashCheck) {
  std::string text = to_canonical_json(two_rank_schedule());
  auto pos = text.find("\"pre\"");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 5, "\"prf\"");
  EXPECT_THROW((void)schedule_from_json(text, "s.json"), InputError);
}

// Schema 2's fields survive the canonical JSON: role and parameter class on
// every op, the buffer class on alloc and free.
TEST(Schedule, RolesAndClassesRoundTrip) {
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) {
    Op& ag = p.streams[1].ops[0];
    ag.role = OpRole::ParamGather;
    ag.param_class = ParamClass::Expert;
    s.groups[0].kind = GroupKind::Edp;
    p.streams[0].ops[0].role = OpRole::Forward;
    p.streams[0].ops[0].param_class = ParamClass::Dense;
    Op alloc = Op::of(OpKind::Alloc);
    alloc.id = 10;
    alloc.payload = Op::Buffer{"pool", BufferClass::GatheredPool, Bytes(64)};
    Op free = alloc;
    free.id = 11;
    free.kind = OpKind::Free;
    p.streams[0].ops.push_back(alloc);
    p.streams[0].ops.push_back(free);
  }
  EXPECT_EQ(schedule_error(s), "(accepted)");
  const std::string text = to_canonical_json(s);
  EXPECT_NE(text.find(R"("role":"param_gather")"), std::string::npos);
  EXPECT_NE(text.find(R"("buffer_class":"pool.gathered")"), std::string::npos);
  const Schedule back = schedule_from_json(text, "s.json");
  const Program& p = back.programs[1];
  EXPECT_EQ(p.streams[1].ops[0].role, OpRole::ParamGather);
  EXPECT_EQ(p.streams[1].ops[0].param_class, ParamClass::Expert);
  EXPECT_EQ(p.streams[0].ops[0].role, OpRole::Forward);
  EXPECT_EQ(p.streams[0].ops[0].param_class, ParamClass::Dense);
  EXPECT_EQ(p.streams[0].ops[3].role, OpRole::Other);
  EXPECT_EQ(p.streams[0].ops[3].param_class, ParamClass::None);
  EXPECT_EQ(p.streams[0].ops[3].buffer().buffer_class, BufferClass::GatheredPool);
  EXPECT_EQ(p.streams[0].ops[4].buffer().buffer_class, BufferClass::GatheredPool);
  EXPECT_EQ(to_canonical_json(back), text);
}

// The attention kernel is the enum in memory and its name in the file, read
// and written through one name table; an unknown family is refused.
TEST(Schedule, AttentionKernelRoundTripsThroughItsNameTable) {
  for (const auto& [kernel, name] : kAttentionKernels) {
    EXPECT_EQ(parse_attention_kernel(to_string(kernel)), kernel);
    EXPECT_EQ(to_string(kernel), name);
  }
  EXPECT_FALSE(parse_attention_kernel("flash9"));
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) {
    p.streams[0].ops[0].compute().kind = ComputeKind::Attention;
    p.streams[0].ops[0].compute().attention_kernel = AttentionKernel::Flash3;
  }
  const std::string text = to_canonical_json(s);
  EXPECT_NE(text.find(R"("attention_kernel":"flash3")"), std::string::npos);
  const Schedule back = schedule_from_json(text, "s.json", false);
  EXPECT_EQ(back.programs[0].streams[0].ops[0].compute().attention_kernel, AttentionKernel::Flash3);
  EXPECT_FALSE(back.programs[0].streams[0].ops[2].compute().attention_kernel);
  EXPECT_EQ(to_canonical_json(back), text);
  std::string bad = text;
  bad.replace(bad.find("flash3"), 6, "flash9");
  try {
    (void)schedule_from_json(bad, "s.json", false);
    ADD_FAILURE() << "flash9 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of flash2|flash3|cudnn"), std::string::npos) << e.what();
  }
}

TEST(Schedule, OlderSchemaIsRejectedWithWhatToDo) {
  std::string text = to_canonical_json(two_rank_schedule());
  const auto pos = text.find(R"("schema_version":6)");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 18, R"("schema_version":5)");
  try {
    (void)schedule_from_json(text, "old.json", false);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "old.json: schema_version: expected 6 (a Schedule written by an older hzp; lower it again with "
                 "`hzp schedule`), got 5");
  }
}

TEST(ScheduleCheck, RejectsRolesThatDoNotFit) {
  Schedule s = two_rank_schedule();
  s.programs[0].streams[1].ops[0].role = OpRole::Optimizer;  // a collective
  EXPECT_NE(schedule_error(s).find("role optimizer does not fit a collective op"), std::string::npos);
  s = two_rank_schedule();
  s.programs[0].streams[1].ops[0].role = OpRole::GradReduce;
  EXPECT_NE(schedule_error(s).find("role grad_reduce needs a parameter class"), std::string::npos);
  s.programs[0].streams[1].ops[0].param_class = ParamClass::Expert;  // on a dp_shard group
  EXPECT_NE(schedule_error(s).find("expert parameters' grad_reduce collective on a dp_shard group"), std::string::npos);
}

TEST(ScheduleCheck, RejectsFreeOfAnotherBufferClass) {
  Schedule s = two_rank_schedule();
  Op alloc = Op::of(OpKind::Alloc);
  alloc.id = 10;
  alloc.payload = Op::Buffer{"x", BufferClass::Activations, Bytes(4)};
  Op free = alloc;
  free.id = 11;
  free.kind = OpKind::Free;
  free.buffer().buffer_class = BufferClass::GradBucket;
  s.programs[0].streams[0].ops.push_back(alloc);
  s.programs[0].streams[0].ops.push_back(free);
  EXPECT_NE(schedule_error(s).find("frees buffer 'x' as class grad_buckets, allocated as act"), std::string::npos);
}

TEST(ScheduleCheck, AcceptsWellFormed) { EXPECT_EQ(schedule_error(two_rank_schedule()), "(accepted)"); }

// Each kind carries its own payload; asking an op for another kind's payload
// is a bug the accessor reports instead of reading a meaningless field.
TEST(Op, EachKindCarriesItsOwnPayload) {
  for (const auto& [kind, name] : kOpKind) {
    const Op op = Op::of(kind);
    EXPECT_EQ(op.kind, kind) << name;
    EXPECT_EQ(op.payload.index(), Op::payload_index(kind)) << name;
  }
  const Op send = Op::of(OpKind::Send);
  EXPECT_EQ(send.transfer().peer, -1);
  EXPECT_THROW((void)send.collective(), std::bad_variant_access);
  EXPECT_THROW((void)Op::of(OpKind::Wait).compute(), std::bad_variant_access);
  EXPECT_THROW((void)Op::of(OpKind::Free).event(), std::bad_variant_access);
}

// op_bytes: what each kind moves or holds, none for an event.
TEST(Op, BytesOfEveryKind) {
  EXPECT_EQ(op_bytes(compute(0, "g", 1)), Bytes(100));
  EXPECT_EQ(op_bytes(collective(0, 0, 0, 1000)), Bytes(1000));
  Op recv = Op::of(OpKind::Recv);
  recv.transfer().bytes = Bytes(7);
  EXPECT_EQ(op_bytes(recv), Bytes(7));
  Op alloc = Op::of(OpKind::Alloc);
  alloc.buffer().bytes = Bytes(64);
  EXPECT_EQ(op_bytes(alloc), Bytes(64));
  EXPECT_EQ(op_bytes(event_op(0, OpKind::Record, 3)), Bytes(0));
}

// A Schedule built by hand whose op's payload is another kind's.
TEST(ScheduleCheck, RejectsAPayloadOfAnotherKind) {
  Schedule s = two_rank_schedule();
  s.programs[0].streams[1].ops[0].payload = Op::Compute{};
  EXPECT_EQ(schedule_error(s),
            "program 0 ('r0') stream 'ag' op 0 'ag': a collective op carries another kind's payload");
}

TEST(ScheduleCheck, RejectsCollectiveSizeMismatch) {
  Schedule s = two_rank_schedule();
  s.programs[1].streams[1].ops[0].collective().bytes = Bytes(999);
  EXPECT_EQ(schedule_error(s),
            "program 1 ('r1') stream 'ag' op 0 'ag': collective on group 0 seq 0 is all_gather of 999 bytes bf16, "
            "but program 0 issues all_gather of 1000 bytes bf16");
}

TEST(ScheduleCheck, RejectsCollectiveOneMemberNeverIssues) {
  Schedule s = two_rank_schedule();
  auto& ag = s.programs[1].streams[1].ops;
  ag.erase(ag.begin());
  EXPECT_EQ(schedule_error(s),
            "deadlock: program 0 ('r0') stream 'ag' op 0 'ag' (collective) collective on group 0 seq 0 is never "
            "reached by every member");
}

TEST(ScheduleCheck, RejectsCrossStreamDeadlock) {
  // Rank 0's all-gather now waits on an event its compute stream records only
  // after waiting on the all-gather: a cycle.
  Schedule s = two_rank_schedule();
  auto& ag = s.programs[0].streams[1].ops;
  auto& comp = s.programs[0].streams[0].ops;
  ag.insert(ag.begin(), event_op(0, OpKind::Wait, 8));
  ag[1].id = 1;  // the all-gather
  ag[2].id = 2;  // record 7
  for (int i = 0; i < 3; ++i) comp[static_cast<std::size_t>(i)].id = 3 + i;
  comp.push_back(event_op(6, OpKind::Record, 8));
  EXPECT_EQ(schedule_error(s),
            "deadlock: program 0 ('r0') stream 'compute' op 4 'wait' (wait) waits for event 7, which is never "
            "recorded before it");
}

TEST(ScheduleCheck, RejectsCrossRankCollectiveOrderDeadlock) {
  // Two communicators over the same ranks, issued in opposite orders on one
  // stream: rank 0 blocks in group 0 while rank 1 blocks in group 1.
  Schedule s = two_rank_schedule();
  s.groups.push_back(Group{1, GroupKind::Tp, {0, 1}});
  auto& r0 = s.programs[0].streams[1].ops;
  auto& r1 = s.programs[1].streams[1].ops;
  r0.insert(r0.begin() + 1, collective(8, 1, 0, 64));
  r0[2].id = 9;  // the record keeps ids ascending along the stream
  Op first = collective(0, 1, 0, 64);
  r1[0].id = 8;  // group 0 now issued after group 1 on rank 1
  r1.insert(r1.begin(), first);
  std::sort(r1.begin(), r1.end(), [](const Op& a, const Op& b) { return a.id < b.id; });
  EXPECT_EQ(schedule_error(s),
            "deadlock: program 0 ('r0') stream 'ag' op 0 'ag' (collective) collective on group 0 seq 0 is never "
            "reached by every member");
}

TEST(ScheduleCheck, RejectsSequenceGapAndUnrecordedEvent) {
  Schedule s = two_rank_schedule();
  s.programs[0].streams[1].ops[0].collective().seq = 1;
  EXPECT_NE(schedule_error(s).find("has seq 1, expected 0"), std::string::npos);
  s = two_rank_schedule();
  s.programs[0].streams[0].ops[1].event().id = 9;
  EXPECT_NE(schedule_error(s).find("waits for event 9, which is never recorded"), std::string::npos);
}

// A deadlock is the walk's finding: a caller whose engine walks the Schedule
// next leaves it to that walk, and the rest of the check still runs.
TEST(ScheduleCheck, LeavesProgressToTheEngineWhenAsked) {
  Schedule s = two_rank_schedule();
  auto& ag = s.programs[0].streams[1].ops;
  auto& comp = s.programs[0].streams[0].ops;
  ag.insert(ag.begin(), event_op(0, OpKind::Wait, 8));
  ag[1].id = 1;
  ag[2].id = 2;
  for (int i = 0; i < 3; ++i) comp[static_cast<std::size_t>(i)].id = 3 + i;
  comp.push_back(event_op(6, OpKind::Record, 8));
  EXPECT_THROW(check_schedule(s), ScheduleError);
  EXPECT_NO_THROW(check_schedule(s, Progress::ByTheEngine));
  EXPECT_THROW((void)replay(s, ReplayCosts{}), ScheduleError);
  s.programs[0].streams[0].ops[0].id = 1;  // now a duplicate id: found without the walk
  EXPECT_THROW(check_schedule(s, Progress::ByTheEngine), ScheduleError);
}

// Duplicate ids are found where ids are dense (a table over their range) and
// where they are spread far apart (a set).
TEST(ScheduleCheck, RejectsDuplicateIdsDenseOrSparse) {
  Schedule s = two_rank_schedule();
  s.programs[0].streams[1].ops[0].id = 2;  // the all-gather takes the compute stream's first id
  EXPECT_NE(schedule_error(s).find("op 2 'ag': duplicate op id"), std::string::npos) << schedule_error(s);
  Schedule sparse = two_rank_schedule();
  for (auto& st : sparse.programs[0].streams) {
    for (auto& op : st.ops) op.id *= 1000000;
  }
  EXPECT_EQ(schedule_error(sparse), "(accepted)");
  sparse.programs[0].streams[1].ops[0].id = 2000000;
  EXPECT_NE(schedule_error(sparse).find("duplicate op id"), std::string::npos) << schedule_error(sparse);
}

TEST(ScheduleCheck, RejectsIdsOutOfIssueOrder) {
  Schedule s = two_rank_schedule();
  std::swap(s.programs[0].streams[0].ops[0].id, s.programs[0].streams[0].ops[2].id);
  EXPECT_NE(schedule_error(s).find("op ids must ascend along a stream"), std::string::npos);
}

TEST(ScheduleCheck, RejectsUnbalancedFree) {
  Schedule s = two_rank_schedule();
  Op f = Op::of(OpKind::Free);
  f.id = 20;
  f.name = "free";
  f.payload = Op::Buffer{"x", BufferClass::Activations, Bytes(4)};
  s.programs[0].streams[0].ops.push_back(f);
  EXPECT_NE(schedule_error(s).find("frees buffer 'x', which is not allocated"), std::string::npos);
}

TEST(Replay, OverlapsCommunicationWithCompute) {
  // compute: pre 10 ns | wait(ag) | post 10 ns ; ag: 25 ns from t=0 (1 ns launch each).
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) p.threads[0].launch_latency = p.threads[0].collective_launch_latency = Duration::ns(1);
  ReplayCosts costs;
  costs.compute = [](const Program&, const Op& op) {
    return Duration::ns(static_cast<std::int64_t>(op.compute().flops.count()));
  };
  costs.collective = [](const Group&, const Op&) { return Duration::ns(25); };
  ReplayResult r = replay(s, costs);
  // Issue order by id: ag(0)@0, rec(1)@1, pre(2)@1, wait(3)@2, post(4)@2.
  EXPECT_EQ(r.times[0][1][0].start.count_ns(), 0);
  EXPECT_EQ(r.times[0][1][0].end.count_ns(), 25);
  EXPECT_EQ(r.times[0][0][0].start.count_ns(), 1);
  EXPECT_EQ(r.times[0][0][0].end.count_ns(), 11);
  EXPECT_EQ(r.times[0][0][2].start.count_ns(), 25);
  EXPECT_EQ(r.times[0][0][2].end.count_ns(), 35);
}

TEST(Replay, CountsItsOpsAndListsItsCommunication) {
  // Each program: a compute stream (pre, wait, post) and a gather stream
  // (ag, record), plus an allocation and its free around the GEMMs.
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) {
    auto& comp = p.streams[0].ops;
    Op alloc = Op::of(OpKind::Alloc);
    alloc.id = 5;
    alloc.payload = Op::Buffer{"x", BufferClass::Activations, Bytes(4)};
    Op free = Op::of(OpKind::Free);
    free.id = 6;
    free.payload = Op::Buffer{"x", BufferClass::Activations, Bytes(4)};
    comp.push_back(alloc);
    comp.push_back(free);
  }
  const ReplayPlan plan(s);
  const ReplayResult r = plan.replay(ReplayCosts{});
  // Timed: 2 GEMMs and 1 all-gather a program; memory: 1 alloc and 1 free a program.
  EXPECT_EQ(r.timed_ops, 6U);
  EXPECT_EQ(r.memory_ops, 4U);
  // The all-gather is op 0 of stream 1 in each program, the only communication.
  ASSERT_EQ(plan.comm_sites().size(), 2U);
  for (std::size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(plan.comm_sites()[p].program, p);
    EXPECT_EQ(plan.comm_sites()[p].stream, 1U);
    EXPECT_EQ(plan.comm_sites()[p].index, 0U);
    EXPECT_EQ(plan.comm_sites()[p].kind, OpKind::Collective);
  }
}

}  // namespace
}  // namespace hzp::core

namespace hzp::core {
namespace {

// One thread issuing a collective, its record, a host sync on it, then a GEMM.
Schedule sync_schedule(bool with_sync) {
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) {
    p.threads[0].launch_latency = p.threads[0].collective_launch_latency = Duration::ns(1);
    auto& comp = p.streams[0].ops;
    auto& ag = p.streams[1].ops;
    ag = {collective(0, 0, 0, 1000), event_op(1, OpKind::Record, 7)};
    comp = {compute(3, "after", 10)};
    if (with_sync) comp.insert(comp.begin(), event_op(2, OpKind::Sync, 7));
  }
  return s;
}

ReplayResult timed(const Schedule& s) {
  ReplayCosts costs;
  costs.compute = [](const Program&, const Op& op) {
    return Duration::ns(static_cast<std::int64_t>(op.compute().flops.count()));
  };
  costs.collective = [](const Group&, const Op&) { return Duration::ns(200); };
  return replay(s, costs);
}

TEST(Replay, HostSyncStallsIssue) {
  // Without the sync the GEMM is issued at 1 ns (after one launch) and runs at once.
  ReplayResult free_run = timed(sync_schedule(false));
  EXPECT_EQ(free_run.times[0][0][0].start.count_ns(), 1);
  // With it the thread waits for the collective (ends at 200 ns), then issues.
  ReplayResult synced = timed(sync_schedule(true));
  EXPECT_EQ(synced.issued[0][0][1].count_ns(), 200);
  EXPECT_EQ(synced.times[0][0][1].start.count_ns(), 200);
  EXPECT_EQ(synced.times[0][0][1].end.count_ns(), 210);
}

TEST(Replay, EventsAndTheReturnFromASyncCostTheirThreadTime) {
  // ag (0) costs 1 ns to issue, its record (1) 3 ns; the sync (2), reached
  // at 4 ns, returns when its event happens (the gather ends at 200 ns), and
  // the thread issues again 50 ns later: the GEMM runs 250-260 ns.
  Schedule s = sync_schedule(true);
  for (auto& p : s.programs) {
    p.threads[0].event_latency = Duration::ns(3);
    p.threads[0].sync_latency = Duration::ns(50);
  }
  ReplayResult r = timed(s);
  EXPECT_EQ(r.issued[0][1][1].count_ns(), 1);
  EXPECT_EQ(r.issued[0][0][0].count_ns(), 200);
  EXPECT_EQ(r.issued[0][0][1].count_ns(), 250);
  EXPECT_EQ(r.times[0][0][1].start.count_ns(), 250);
  EXPECT_EQ(r.times[0][0][1].end.count_ns(), 260);
  // The same rule, op by op.
  const Thread& t = s.programs[0].threads[0];
  EXPECT_EQ(issue_latency(t, event_op(9, OpKind::Wait, 7)).count_ns(), 3);
  EXPECT_EQ(issue_latency(t, event_op(9, OpKind::Sync, 7)).count_ns(), 50);
}

TEST(Replay, AStreamBackAtTheSameWaitIsWokenOnce) {
  // A waits on e7 (op 0) and is walked first, so it is listed as e7's waiter.
  // The thread then blocks in a sync on e9 (op 5), which C records once E
  // has recorded e11 (1 ns). Let go at 1 ns, the thread issues A's GEMM,
  // which sends A back to its wait before anything records e7, then R's
  // GEMM (20 ns) and R's record of e7 at 21 ns: A is let go once and its
  // GEMM runs 21-31 ns.
  Schedule s;
  s.name = "t";
  s.step = StepInfo{"m", "c", "x", 1, 4, 1, 1, Flops(1e9)};
  Program prog;
  prog.name = "r0";
  prog.ranks = {0};
  prog.threads.push_back(Thread{0, "main"});
  Stream a{0, "a", StreamKind::Compute, 0, {}};
  Stream r{1, "r", StreamKind::Compute, 0, {}};
  Stream c{2, "c", StreamKind::Compute, 0, {}};
  Stream e{3, "e", StreamKind::Compute, 0, {}};
  a.ops = {event_op(0, OpKind::Wait, 7), event_op(5, OpKind::Sync, 9), compute(6, "a", 10)};
  c.ops = {event_op(1, OpKind::Wait, 11), event_op(2, OpKind::Record, 9)};
  e.ops = {compute(3, "e", 1), event_op(4, OpKind::Record, 11)};
  r.ops = {compute(7, "r", 20), event_op(8, OpKind::Record, 7)};
  prog.streams = {a, r, c, e};
  s.programs.push_back(prog);
  const ReplayResult t = timed(s);
  EXPECT_EQ(t.times[0][1][0].start.count_ns(), 1);
  EXPECT_EQ(t.times[0][1][0].end.count_ns(), 21);
  EXPECT_EQ(t.times[0][0][0].end.count_ns(), 21);
  EXPECT_EQ(t.times[0][0][2].start.count_ns(), 21);
  EXPECT_EQ(t.times[0][0][2].end.count_ns(), 31);
}

TEST(Replay, AStreamBackAtTheSameCollectiveArrivesOnce) {
  // Rank 0's gather stream records e9, which lets its thread out of a sync
  // (op 2) to issue a GEMM on that stream (op 3): the stream is pushed again
  // while it is still to reach its all-gather (op 1). It reaches it, waits
  // for rank 1, and comes back to it before rank 1 arrives, which waits on
  // e7 until a 50 ns GEMM records it. The gather runs 50-250 ns on both
  // ranks and rank 0's GEMM after it, 250-260 ns.
  Schedule s = two_rank_schedule();
  for (auto& p : s.programs) {
    auto& comp = p.streams[0].ops;
    auto& ag = p.streams[1].ops;
    if (p.id == 0) {
      ag = {event_op(0, OpKind::Record, 9), collective(1, 0, 0, 1000), compute(3, "after", 10)};
      comp = {event_op(2, OpKind::Sync, 9)};
    } else {
      ag = {event_op(0, OpKind::Wait, 7), collective(2, 0, 0, 1000)};
      comp = {compute(1, "late", 50), event_op(3, OpKind::Record, 7)};
    }
  }
  const ReplayResult r = timed(s);
  EXPECT_EQ(r.times[0][1][1].start.count_ns(), 50);
  EXPECT_EQ(r.times[0][1][1].end.count_ns(), 250);
  EXPECT_EQ(r.times[1][1][1].start.count_ns(), 50);
  EXPECT_EQ(r.times[0][1][2].start.count_ns(), 250);
  EXPECT_EQ(r.times[0][1][2].end.count_ns(), 260);
}

TEST(ScheduleCheck, RejectsSyncOnLaterEvent) {
  // The thread syncs on an event only it would record later: it can never issue it.
  Schedule s = sync_schedule(true);
  auto& ag = s.programs[0].streams[1].ops;
  ag[1].id = 4;  // the record now comes after the sync in issue order
  std::string what;
  try {
    check_schedule(s);
  } catch (const ScheduleError& e) {
    what = e.what();
  }
  EXPECT_EQ(
      what,
      "deadlock: program 0 ('r0') stream 'compute' op 2 'wait' (sync) blocks host thread 'main' on event 7, which "
      "is never recorded before it");
}

}  // namespace
}  // namespace hzp::core
