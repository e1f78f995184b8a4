// The GPU backend's logic (runtime/device) against a recording fake of the
// CUDA, NCCL and cuBLASLt calls: every rank of generated Schedules (pp4 +
// vpp, tp + cp, hzp async, EP) makes the same splits in the same order, a
// send and its recv share a communicator, each communicator sees the same
// operations in the same order on every member, no two NCCL calls overlap on
// a device, a wait is enqueued only after its record in the step, buffers
// alive across steps are allocated once, and the watchdog, the barrier and
// the communicators' set-up and tear-down follow NCCL's rules. No GPU, no
// wall-clock dependence (the fake completes every event at once; timeouts
// run on a fake clock).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "models/model_spec.hpp"
#include "plan/plan.hpp"
#include "runtime/device/backend.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::runtime::device {
namespace {

struct Call {
  Call(std::string n, Handle h = nullptr, Handle s = nullptr, std::size_t c = 0, CommType t = CommType::U8, int p = -1)
      : name(std::move(n)), a(h), stream(s), count(c), type(t), peer(p) {}
  std::string name;
  Handle a = nullptr;  // the event, buffer or communicator
  Handle stream = nullptr;
  std::size_t count = 0;
  CommType type = CommType::U8;
  int peer = -1;
  std::thread::id thread;
};

// Records every call; events complete at once; handles are distinct fake
// addresses. NCCL calls spin a little inside so that overlapping calls from
// two host threads are seen: a fixed count of atomic increments, never a
// yield — on a loaded machine each yield can give the core away for a whole
// time slice, and a few hundred per call made these tests take hours.
class FakeApi final : public DeviceApi {
 public:
  std::vector<Call> calls;
  std::map<Handle, std::pair<std::size_t, int>> comm_id;  // communicator -> (split number, colour); world: (0, 0)
  std::set<std::size_t> p2p_splits;                       // split numbers of the send/recv pair communicators
  std::atomic<int> in_nccl{0}, overlaps{0};
  std::atomic<std::uint64_t> spin{0};
  CommStatus status = CommStatus::Ready;
  mutable std::mutex m;

  void log(Call c) {
    c.thread = std::this_thread::get_id();
    const std::lock_guard lock(m);
    calls.push_back(std::move(c));
  }
  void nccl(Call c) {
    if (in_nccl.fetch_add(1) > 0) ++overlaps;
    for (int i = 0; i < 20000; ++i) spin.fetch_add(1, std::memory_order_relaxed);
    log(std::move(c));
    in_nccl.fetch_sub(1);
  }
  Handle fresh() {
    const std::lock_guard lock(m);
    next_ += 1 << 30;  // room for pointer arithmetic inside a "buffer"
    return reinterpret_cast<Handle>(next_);
  }
  std::vector<Call> named(const std::string& name) const {
    const std::lock_guard lock(m);
    std::vector<Call> out;
    for (const Call& c : calls) {
      if (c.name == name) out.push_back(c);
    }
    return out;
  }

  void set_device(int, const std::string&) override { log({"set_device"}); }
  Handle stream_create(const std::string&) override { return fresh(); }
  void stream_destroy(Handle) override {}
  Handle event_create(bool, const std::string&) override { return fresh(); }
  void event_destroy(Handle) override {}
  void event_record(Handle e, Handle s, const std::string&) override { log({"record", e, s}); }
  void stream_wait_event(Handle s, Handle e, const std::string&) override { log({"wait", e, s}); }
  bool event_done(Handle, const std::string&) override { return done; }
  bool stream_done(Handle, const std::string&) override { return true; }
  float elapsed_ms(Handle, Handle, const std::string&) override { return 0; }
  void device_synchronize(const std::string&) override { log({"device_synchronize"}); }
  Handle malloc_device(std::size_t bytes, const std::string&) override {
    const Handle p = fresh();
    log({"malloc_device", p, nullptr, bytes});
    return p;
  }
  void free_device(Handle p) override { log({"free_device", p}); }
  Handle malloc_host(std::size_t, const std::string&) override { return &host_; }
  void free_host(Handle) override {}
  void copy_async(Handle, const void*, std::size_t, Handle, const std::string&) override { log({"copy_async"}); }
  Handle pool_alloc(std::size_t bytes, Handle s, const std::string& what) override {
    const Handle p = fresh();
    log({"pool_alloc " + what, p, s, bytes});
    return p;
  }
  void pool_free(Handle p, Handle s, const std::string&) override { log({"pool_free", p, s}); }
  void pool_keep_reserved(const std::string&) override {}
  void pool_reset_peaks(const std::string&) override { log({"pool_reset_peaks"}); }
  std::uint64_t pool_reserved_high(const std::string&) override { return 0; }
  std::uint64_t pool_used_high(const std::string&) override { return 0; }
  void fill_random(Handle b, std::size_t bytes, std::uint64_t, Handle s, const std::string&) override {
    log({"fill_random", b, s, bytes});
  }
  void launch_bandwidth(Handle, std::size_t, Handle s, const std::string&) override { log({"kernel", nullptr, s}); }
  void launch_emulated(Handle, std::size_t, int, std::uint64_t, Handle s, const std::string&) override {
    log({"emulated", nullptr, s});
  }
  Handle gemm_create(const std::string&) override { return fresh(); }
  void gemm_destroy(Handle) override {}
  void gemm_plan(Handle, const core::GemmShape&, core::Dtype, const std::string&) override { log({"gemm_plan"}); }
  void gemm_run(Handle, const core::GemmShape&, core::Dtype, Handle, Handle s, const std::string&) override {
    log({"gemm_run", nullptr, s});
  }
  std::size_t gemm_bytes(const core::GemmShape& g, core::Dtype) override {
    return static_cast<std::size_t>((g.m * g.k + g.k * g.n + g.m * g.n) * g.batch * 2);
  }
  Handle comm_init(int, const std::string&, int, const std::string&) override {
    const Handle c = fresh();
    comm_id[c] = {0, 0};
    nccl({"comm_init", c});
    return c;
  }
  Handle comm_split(Handle parent, int colour, int, const std::string& what) override {
    ++splits_;
    if (what.find("send/recv") != std::string::npos) p2p_splits.insert(splits_);
    nccl({"comm_split " + what, parent, nullptr, 0, CommType::U8, colour});
    if (colour < 0) return nullptr;
    const Handle c = fresh();
    comm_id[c] = {splits_, colour};
    return c;
  }
  CommStatus comm_status(Handle, std::string& error) override {
    if (status == CommStatus::Failed) error = "remote peer failed";
    return status;
  }
  void comm_abort(Handle c) override { log({"comm_abort", c}); }
  void comm_destroy(Handle c) override { log({"comm_destroy", c}); }
  void group_start(const std::string&) override { nccl({"group_start"}); }
  void group_end(const std::string&) override { nccl({"group_end"}); }
  void collective(core::CollectiveKind kind, Handle, Handle, std::size_t count, CommType type, Handle comm, Handle s,
                  const std::string&) override {
    nccl({"collective " + std::string(core::to_string(kind)), comm, s, count, type});
  }
  void all_reduce_max(Handle, std::size_t count, CommType type, Handle comm, Handle s, const std::string&) override {
    nccl({"all_reduce_max", comm, s, count, type});
  }
  void send(Handle, std::size_t count, CommType type, int peer, Handle comm, Handle s, const std::string&) override {
    nccl({"send", comm, s, count, type, peer});
  }
  void recv(Handle, std::size_t count, CommType type, int peer, Handle comm, Handle s, const std::string&) override {
    nccl({"recv", comm, s, count, type, peer});
  }

  bool done = true;

 private:
  std::uintptr_t next_ = 0;
  std::size_t splits_ = 0;
  double host_ = 0;
};

struct Generated {
  const char* name;
  core::Schedule s;
};

core::Schedule lower(const char* model, int layers, plan::PlanOptions o) {
  models::ModelSpec m = models::load_model(model);
  m.layers = layers;
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  return plan::lower({m, topo}, o);
}

std::vector<Generated> schedules() {
  plan::PlanOptions base;
  base.seq_len = 4096;
  base.global_batch_sequences = 32;
  base.recompute = models::Recompute::Full;
  plan::PlanOptions pp = base;
  pp.strategy = plan::Strategy::Zero1;
  pp.pp = 4;
  pp.vpp = 2;
  plan::PlanOptions tpcp = base;
  tpcp.strategy = plan::Strategy::Fsdp;
  tpcp.tp = 2;
  tpcp.cp = 2;
  plan::PlanOptions hzp = base;
  hzp.strategy = plan::Strategy::Hzp;
  hzp.param_shard = 2;
  hzp.grad_shard = 8;
  hzp.optim_shard = 16;
  hzp.async = true;
  plan::PlanOptions ep = base;
  ep.strategy = plan::Strategy::Fsdp;
  ep.ep = 4;
  return {{"pp4_vpp2", lower("llama3-8b", 8, pp)},
          {"tp2_cp2", lower("llama3-8b", 2, tpcp)},
          {"hzp_async", lower("llama3-8b", 2, hzp)},
          {"ep4", lower("mixtral-8x7b", 2, ep)}};
}

const std::vector<Generated>& cached() {
  static const std::vector<Generated> all = schedules();
  return all;
}

const cost::PerfModel& model() {
  static const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 16));
  return pm;
}

// One rank through `steps` steps on the fake: its calls, in order.
std::unique_ptr<FakeApi> run_rank(const core::Schedule& s, int rank, int steps) {
  auto api = std::make_unique<FakeApi>();
  DeviceComms comms(*api, s, rank, s.step.world_size, "id", {});
  const RankPlan plan = rank_plan(s, rank);
  BackendOptions o;
  o.watchdog_thread = false;
  DeviceBackend backend(*api, s, plan, model(), &comms, o);
  for (int i = 0; i < steps; ++i) {
    backend.begin_step();
    execute(s, {plan.program}, backend);
  }
  return api;
}

class EveryRank : public ::testing::TestWithParam<std::size_t> {};

// Every rank makes the same splits in the same order (ncclCommSplit is
// collective over the world); the ranks of each communicator issue the same
// collectives in the same order; each send meets a recv of the same size on
// the same communicator, in order; no NCCL call overlaps another on a
// device; a wait (cudaStreamWaitEvent) always follows its event's record in
// the step.
TEST_P(EveryRank, AgreeOnCommunicatorsAndOrder) {
  const Generated& g = cached().at(GetParam());
  const int world = g.s.step.world_size;
  using Key = std::pair<std::size_t, int>;
  std::map<Key, std::map<int, std::vector<std::string>>> collectives;   // comm -> rank -> ops
  std::map<Key, std::map<int, std::vector<std::size_t>>> sends, recvs;  // comm -> rank -> sizes
  std::vector<std::string> splits0;
  std::map<std::size_t, std::vector<std::string>> device_order;  // rank class -> its first rank's NCCL calls
  for (int r = 0; r < world; ++r) {
    const auto api = run_rank(g.s, r, 1);
    std::vector<std::string> splits, order;
    for (const Call& c : api->calls) {
      if (c.name.rfind("comm_split", 0) == 0) splits.push_back(c.name);
      if (c.a != nullptr && api->comm_id.contains(c.a) && c.name.rfind("comm_", 0) != 0) {
        order.push_back(fmt::format("{} on split {} ({})", c.name, api->comm_id.at(c.a).first, c.count));
      }
      if (c.a == nullptr || !api->comm_id.contains(c.a)) continue;
      const Key k = api->comm_id.at(c.a);
      const bool pair = api->p2p_splits.contains(k.first);
      if (c.name.rfind("collective", 0) == 0 || (!pair && (c.name == "send" || c.name == "recv"))) {
        collectives[k][r].push_back(fmt::format("{} {}", c.name, c.count));  // all-to-all: sends and recvs
      }
      if (pair && c.name == "send") sends[k][r].push_back(c.count);
      if (pair && c.name == "recv") recvs[k][r].push_back(c.count);
    }
    if (r == 0) splits0 = splits;
    // One NCCL issue order per device, the same on every rank of a class.
    const auto [first, fresh] = device_order.emplace(rank_plan(g.s, r).program, order);
    EXPECT_TRUE(fresh || first->second == order) << g.name << ": rank " << r << " issues NCCL calls in another order";
    EXPECT_EQ(splits, splits0) << g.name << ": rank " << r << " splits differently from rank 0";
    EXPECT_EQ(api->overlaps.load(), 0) << g.name << ": rank " << r << ": NCCL calls overlapped on the device";
    std::map<Handle, bool> recorded;
    for (const Call& c : api->calls) {
      if (c.name == "record") recorded[c.a] = true;
      if (c.name == "wait") {
        EXPECT_TRUE(recorded[c.a]) << g.name << ": rank " << r << ": a wait before its record";
      }
    }
  }
  for (const auto& [k, by_rank] : collectives) {
    for (const auto& [r, ops] : by_rank) {
      EXPECT_EQ(ops, by_rank.begin()->second) << g.name << ": rank " << r << " orders communicator " << k.first;
    }
  }
  for (const auto& [k, by_rank] : sends) {
    ASSERT_EQ(by_rank.size(), 1U) << g.name << ": one sender per send/recv communicator";
    ASSERT_EQ(recvs[k].size(), 1U) << g.name << ": the sends of communicator " << k.first << " have one receiver";
    EXPECT_EQ(recvs[k].begin()->second, by_rank.begin()->second) << g.name << ": sends and recvs differ";
  }
  for (const auto& [k, by_rank] : recvs) EXPECT_TRUE(sends.contains(k)) << g.name << ": a recv with no send";
  if (std::string(g.name) == "pp4_vpp2") {
    EXPECT_FALSE(sends.empty());
  }
}

// Model state (allocated, never freed) is allocated in the first step only;
// the pool's high-water marks are reset every step.
TEST_P(EveryRank, AllocatesPersistentBuffersOnce) {
  const core::Schedule& s = cached().at(GetParam()).s;
  const int steps = 3;
  const auto api = run_rank(s, 0, steps);
  const core::Program& prog = s.programs.at(rank_plan(s, 0).program);
  const std::set<std::string> kept = persistent_buffers(prog);
  std::size_t allocs = 0;
  for (const auto& st : prog.streams) {
    for (const auto& op : st.ops) allocs += op.kind == core::OpKind::Alloc && !kept.contains(op.buffer().name);
  }
  std::size_t pool_allocs = 0;
  for (const Call& c : api->calls) pool_allocs += c.name.rfind("pool_alloc", 0) == 0;
  EXPECT_FALSE(kept.empty());
  EXPECT_EQ(pool_allocs, kept.size() + steps * allocs);
  EXPECT_EQ(api->named("pool_reset_peaks").size(), static_cast<std::size_t>(steps));
}

INSTANTIATE_TEST_SUITE_P(Schedules, EveryRank, ::testing::Values(0, 1, 2, 3),
                         [](const auto& param_info) { return std::string(cached().at(param_info.param).name); });

// One rank class of 8 ranks, one stream: an fp8 all-gather of 8 MiB, a GEMM.
core::Schedule small() {
  core::Schedule s;
  s.name = "small";
  s.step.world_size = 8;
  s.step.cluster = "dgx-h100";
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 1, 2, 3, 4, 5, 6, 7}});
  core::Program p;
  p.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  p.threads.push_back(core::Thread{0, "main", {}, {}});
  core::Op ag = core::Op::of(core::OpKind::Collective);
  ag.id = 0;
  ag.collective().kind = core::CollectiveKind::AllGather;
  ag.collective().group = 0;
  ag.collective().dtype = core::Dtype::Fp8;
  ag.collective().bytes = core::Bytes(8LL << 20);
  core::Op gemm = core::Op::of(core::OpKind::Compute);
  gemm.id = 1;
  gemm.compute().kind = core::ComputeKind::Gemm;
  gemm.compute().gemm = core::GemmShape{1024, 1024, 1024, 1};
  p.streams.push_back(core::Stream{0, "compute", core::StreamKind::Compute, 0, {ag, gemm}});
  s.programs.push_back(p);
  return s;
}

TEST(DeviceBackend, Fp8CollectivesCountOneByteElements) {
  const core::Schedule s = small();
  const auto api = run_rank(s, 3, 1);
  const auto ag = api->named("collective all_gather");
  ASSERT_EQ(ag.size(), 1U);
  EXPECT_EQ(ag[0].type, CommType::F8);
  EXPECT_EQ(ag[0].count, (8U << 20) / 8);  // the receive buffer's 8 MiB over 8 ranks, one byte each
}

// ZeRO++'s quantized collectives move their bytes as unsigned bytes: int4
// values packed two a byte (NCCL has no 4-bit type).
TEST(DeviceBackend, QuantizedCollectivesCountBytes) {
  core::Schedule s = small();
  core::Op& rs = s.programs[0].streams[0].ops[0];
  rs.collective().kind = core::CollectiveKind::ReduceScatter;
  rs.collective().dtype = core::Dtype::Int4;
  const auto api = run_rank(s, 3, 1);
  const auto calls = api->named("collective reduce_scatter");
  ASSERT_EQ(calls.size(), 1U);
  EXPECT_EQ(calls[0].type, CommType::U8);
  EXPECT_EQ(calls[0].count, (8U << 20) / 8);  // 8 MiB sent over 8 ranks, a byte an element
}

// cuBLASLt's heuristic (host work) runs before the step, never between an
// op's start and end events.
TEST(DeviceBackend, PlansGemmsBeforeTheStep) {
  const auto api = run_rank(small(), 0, 2);
  bool stepping = false;
  for (const Call& c : api->calls) {
    stepping = stepping || c.name == "pool_reset_peaks";
    if (c.name == "gemm_plan") {
      EXPECT_FALSE(stepping);
    }
  }
  EXPECT_EQ(api->named("gemm_run").size(), 2U);
}

// Every step's GEMMs read random operands: each scratch buffer is filled
// whole, on the first stream, after the synchronisation that opens the step
// and before its origin event (outside every timed op), once per step.
TEST(DeviceBackend, FillsEveryScratchBufferBeforeEachStep) {
  const int steps = 2;
  const auto api = run_rank(small(), 0, steps);
  std::map<Handle, std::size_t> scratch;  // buffer -> bytes (a scratch buffer is at least 1 MiB)
  for (const Call& c : api->named("malloc_device")) {
    if (c.count >= (std::size_t{1} << 20)) scratch[c.a] = c.count;
  }
  ASSERT_FALSE(scratch.empty());
  std::map<Handle, int> fills;
  int steps_seen = 0;
  bool opened = false;  // a step's synchronisation seen, its origin not yet
  std::size_t fills_in_step = 0;
  for (const Call& c : api->calls) {
    if (c.name == "pool_reset_peaks") {
      opened = true, fills_in_step = 0;
    } else if (c.name == "fill_random") {
      EXPECT_TRUE(opened) << "a fill outside a step's opening";
      ASSERT_TRUE(scratch.contains(c.a)) << "a fill of something not a scratch buffer";
      EXPECT_EQ(c.count, scratch[c.a]) << "a partial fill";
      ++fills[c.a], ++fills_in_step;
    } else if (c.name == "record" && opened) {
      EXPECT_EQ(fills_in_step, scratch.size()) << "the origin before every buffer was filled";
      opened = false, ++steps_seen;
    } else if (c.name == "gemm_run" || c.name == "kernel") {
      EXPECT_FALSE(opened) << "an op between the fills and the origin";
    }
  }
  EXPECT_GE(steps_seen, steps);
  for (const auto& [buffer, n] : fills) EXPECT_EQ(n, steps_seen);
}

// Two host threads, each issuing collectives on its own group with nothing
// between them: the device still calls NCCL one call at a time, in op id
// order (the turn), whatever the threads' timing.
TEST(DeviceBackend, IssuesNcclCallsInOpIdOrderFromTwoThreads) {
  core::Schedule s;
  s.name = "two-threads";
  s.step.world_size = 2;
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 1}});
  s.groups.push_back(core::Group{1, core::GroupKind::DpReplica, {0, 1}});
  core::Program p;
  p.ranks = {0, 1};
  p.threads = {core::Thread{0, "a", {}, {}}, core::Thread{1, "b", {}, {}}};
  p.streams = {core::Stream{0, "a", core::StreamKind::ParamGather, 0, {}},
               core::Stream{1, "b", core::StreamKind::GradReduce, 1, {}}};
  const int n = 400;
  for (int id = 0; id < n; ++id) {
    core::Op op = core::Op::of(core::OpKind::Collective);
    op.id = id;
    op.collective().kind = core::CollectiveKind::AllReduce;
    op.collective().group = id < n / 2 ? 0 : 1;         // thread a's ops first in op id order, then thread b's
    op.collective().bytes = core::Bytes(2 * (id + 1));  // one element per op id + 1: names the op in the fake's log
    p.streams[id < n / 2 ? 0U : 1U].ops.push_back(op);
  }
  s.programs.push_back(p);
  const auto api = run_rank(s, 0, 1);
  std::vector<std::size_t> order;
  for (const Call& c : api->named("collective all_reduce")) order.push_back(c.count);
  std::vector<std::size_t> ids(n);
  std::iota(ids.begin(), ids.end(), 1);
  EXPECT_EQ(order, ids);
  EXPECT_EQ(api->overlaps.load(), 0);
}

// The watchdog: an op that never finishes fires it after the limit (on a
// fake clock), the report names the op, the communicators are aborted and
// a host thread blocked on a record is released with the report.
TEST(DeviceBackend, WatchdogAbortsAStuckRun) {
  const core::Schedule s = small();
  FakeApi api;
  auto t = Clock::time_point{};
  auto now = [&t] { return t; };
  CommOptions co;
  co.now = now;
  DeviceComms comms(api, s, 0, 8, "id", co);
  BackendOptions o;
  o.watchdog_thread = false;
  o.watchdog = std::chrono::milliseconds(1000);
  o.now = now;
  DeviceBackend backend(api, s, rank_plan(s, 0), model(), &comms, o);
  backend.begin_step();
  api.done = false;  // nothing ever finishes
  backend.enqueue(0, 0, 0);
  EXPECT_FALSE(backend.watch_once());
  t += std::chrono::milliseconds(500);
  EXPECT_FALSE(backend.watch_once());
  t += std::chrono::milliseconds(600);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(backend.watch_once());
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_NE(report.find("op 0"), std::string::npos) << report;
  EXPECT_FALSE(api.named("comm_abort").empty());
  EXPECT_THROW(backend.enqueue(0, 0, 1), RunError);
  EXPECT_THROW(backend.drain(), RunError);
}

// A peer's failure is an asynchronous error on a communicator: the watchdog
// aborts at once instead of waiting out its limit.
TEST(DeviceBackend, WatchdogAbortsOnAnAsyncError) {
  const core::Schedule s = small();
  FakeApi api;
  DeviceComms comms(api, s, 0, 8, "id", {});
  BackendOptions o;
  o.watchdog_thread = false;
  DeviceBackend backend(api, s, rank_plan(s, 0), model(), &comms, o);
  api.status = CommStatus::Failed;
  testing::internal::CaptureStderr();
  EXPECT_TRUE(backend.watch_once());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("remote peer failed"), std::string::npos);
  EXPECT_FALSE(api.named("comm_abort").empty());
}

// The watchdog's own thread makes the backend's device current first (else
// CUDA gives it device 0, and a context there).
TEST(DeviceBackend, WatchdogThreadSetsItsDevice) {
  const core::Schedule s = small();
  FakeApi api;
  BackendOptions o;
  o.emulate_collectives = true;
  o.device = 3;
  const std::thread::id me = std::this_thread::get_id();
  {
    DeviceBackend backend(api, s, rank_plan(s, 0), model(), nullptr, o);
    for (;;) {
      const auto calls = api.named("set_device");
      if (std::any_of(calls.begin(), calls.end(), [&](const Call& c) { return c.thread != me; })) break;
      std::this_thread::yield();
    }
  }
  SUCCEED();
}

// Non-blocking communicators: a split that never completes fails after the
// timeout (fake clock) and what was made is aborted, not destroyed
// (ncclCommDestroy would wait for the peer); a clean run destroys them.
TEST(DeviceComms, SetUpTimesOutAndAborts) {
  const core::Schedule s = small();
  FakeApi api;
  api.status = CommStatus::InProgress;
  auto t = Clock::time_point{};
  CommOptions co;
  co.timeout = std::chrono::milliseconds(10);
  co.now = [&t] { return t += std::chrono::seconds(1); };
  EXPECT_THROW(DeviceComms(api, s, 0, 8, "id", co), RunError);
  EXPECT_FALSE(api.named("comm_abort").empty());
  EXPECT_TRUE(api.named("comm_destroy").empty());
  FakeApi clean;
  { DeviceComms comms(clean, s, 0, 8, "id", {}); }
  EXPECT_TRUE(clean.named("comm_abort").empty());
  EXPECT_EQ(clean.named("comm_destroy").size(), 2U);  // the world and the one group
}

// The barrier allocates nothing and never synchronizes the device (cudaMalloc,
// cudaFree and blocking copies do, and deadlock beside another local rank's NCCL call).
TEST(DeviceComms, BarrierNeitherAllocatesNorSynchronizes) {
  const core::Schedule s = small();
  FakeApi api;
  DeviceComms comms(api, s, 0, 8, "id", {});
  const std::size_t before = api.calls.size();
  EXPECT_EQ(comms.world_max(2.5), 2.5);
  for (std::size_t i = before; i < api.calls.size(); ++i) {
    const std::string& n = api.calls[i].name;
    EXPECT_TRUE(n == "copy_async" || n == "all_reduce_max") << n;
  }
  EXPECT_EQ(api.named("all_reduce_max").size(), 1U);
}

TEST(WatchState, FiresOnlyWhenSomethingWaitsAndNothingFinishes) {
  Clock::time_point t{};
  WatchState w(std::chrono::milliseconds(100), t);
  EXPECT_FALSE(w.observe(0, false, t + std::chrono::seconds(5)));  // nothing pending
  EXPECT_FALSE(w.observe(0, true, t + std::chrono::milliseconds(5050)));
  EXPECT_FALSE(w.observe(1, true, t + std::chrono::milliseconds(5200)));  // progress
  EXPECT_TRUE(w.observe(1, true, t + std::chrono::milliseconds(5301)));
}

// A wait whose record comes later in op id order is refused, not hung on.
TEST(DeviceBackend, RefusesAWaitBeforeItsRecordInIssueOrder) {
  core::Program p;
  core::Op wait = core::Op::of(core::OpKind::Wait);
  wait.id = 0;
  wait.event().id = 7;
  core::Op rec = wait;
  rec.id = 1;
  rec.kind = core::OpKind::Record;
  p.streams.push_back(core::Stream{0, "a", core::StreamKind::Compute, 0, {wait}});
  p.streams.push_back(core::Stream{1, "b", core::StreamKind::Compute, 1, {rec}});
  EXPECT_THROW(check_issue_order(p), RunError);
  std::swap(p.streams[0].ops[0].id, p.streams[1].ops[0].id);
  EXPECT_NO_THROW(check_issue_order(p));
}

}  // namespace
}  // namespace hzp::runtime::device
