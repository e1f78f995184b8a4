// The GPU backend's logic over DeviceApi (see backend.hpp).
#include "runtime/device/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <utility>

namespace hzp::runtime::device {
namespace {

std::string describe(const core::Op& op) {
  return fmt::format("op {} '{}' ({})", op.id, op.name, core::to_string(op.kind));
}

// A batched square GEMM doing `flops` (attention, stated by FLOPs only).
core::GemmShape flops_gemm(double flops) {
  const double reps = std::max(1.0, std::ceil(flops / (2.0 * 8192.0 * 8192.0 * 8192.0)));
  const double n = std::clamp(std::cbrt(flops / 2.0 / reps), 64.0, 8192.0);
  const std::int64_t side = static_cast<std::int64_t>(std::llround(n / 64.0)) * 64;
  return core::GemmShape{side, side, side, static_cast<std::int64_t>(reps)};
}

}  // namespace

struct DeviceBackend::State {
  DeviceApi& api;
  const core::Schedule& s;
  RankPlan plan;
  const cost::PerfModel& pm;
  DeviceComms* comms;
  BackendOptions o;
  const core::Program& prog;
  StepSync sync;
  std::set<std::string> persistent;
  std::vector<Handle> streams, scratch, gemm;  // per stream (a cuBLASLt handle per stream)
  std::vector<std::size_t> scratch_bytes;      // per stream
  std::map<int, Handle> events;
  std::vector<std::vector<std::pair<Handle, Handle>>> timing;  // [stream][op]: start, end
  std::vector<std::vector<char>> enqueued, finished;           // [stream][op], under `progress`
  mutable std::mutex progress;
  Handle origin = nullptr;
  Clock::time_point host_origin;
  std::vector<std::vector<double>> issued_s;  // [stream][op]: host issue time, s since host_origin
  std::map<std::string, Handle> buffers;      // from the pool, by name
  std::mutex buffers_mutex;
  WatchState watch;

  State(DeviceApi& a, const core::Schedule& sched, RankPlan p, const cost::PerfModel& model, DeviceComms* c,
        BackendOptions opt)
      : api(a),
        s(sched),
        plan(std::move(p)),
        pm(model),
        comms(c),
        o(std::move(opt)),
        prog(sched.programs.at(plan.program)),
        sync(prog),
        persistent(persistent_buffers(prog)),
        watch(o.watchdog, o.now()) {}

  [[nodiscard]] std::string who(const core::Op& op) const {
    return fmt::format("rank {} (class {} '{}') {}", plan.rank, prog.id, prog.name, describe(op));
  }

  // Scratch big enough for the stream's largest op; GEMM plans (the cuBLASLt
  // heuristic is host work) made now, not between an op's timing events.
  std::size_t plan_stream(std::size_t k) {
    std::size_t need = 1 << 20;
    for (const core::Op& op : prog.streams[k].ops) {
      const auto bytes = static_cast<std::size_t>(core::op_bytes(op).count());
      if (op.kind == core::OpKind::Compute) {
        const auto& c = op.compute();
        if (c.kind == core::ComputeKind::Gemm && c.gemm) {
          api.gemm_plan(gemm[k], *c.gemm, c.dtype, who(op));
          need = std::max(need, api.gemm_bytes(*c.gemm, c.dtype));
        } else if (c.kind == core::ComputeKind::Attention) {
          const core::GemmShape g = flops_gemm(c.flops.count());
          api.gemm_plan(gemm[k], g, core::Dtype::Bf16, who(op));
          need = std::max(need, api.gemm_bytes(g, core::Dtype::Bf16));
        }
        need = std::max(need, bytes);
      }
      if (is_comm(op.kind)) need = std::max(need, 2 * bytes);
      if (op.kind == core::OpKind::Record || op.kind == core::OpKind::Wait || op.kind == core::OpKind::Sync) {
        const int event = op.event().id;
        if (!events.contains(event)) events[event] = api.event_create(false, fmt::format("event {}", event));
      }
    }
    return need;
  }

  void prepare_stream(std::size_t k) {
    const core::Stream& stream = prog.streams[k];
    streams[k] = api.stream_create("stream " + stream.name);
    gemm[k] = api.gemm_create("cuBLASLt for stream " + stream.name);
    const std::size_t need = plan_stream(k);
    scratch[k] = api.malloc_device(need, fmt::format("scratch of {} bytes for stream {}", need, stream.name));
    scratch_bytes[k] = need;
    timing[k].resize(stream.ops.size());
    issued_s[k].assign(stream.ops.size(), 0.0);
    enqueued[k].assign(stream.ops.size(), 0);
    finished[k].assign(stream.ops.size(), 0);
    for (std::size_t i = 0; i < stream.ops.size(); ++i) {
      if (!core::is_timed(stream.ops[i].kind)) continue;
      timing[k][i].first = api.event_create(true, "timing event");
      timing[k][i].second = api.event_create(true, "timing event");
    }
  }

  void release() {
    for (auto& [name, p] : buffers) api.free_device(p);
    for (auto& per : timing) {
      for (auto& [a, b] : per) {
        if (a != nullptr) api.event_destroy(a);
        if (b != nullptr) api.event_destroy(b);
      }
    }
    for (auto& [id, e] : events) api.event_destroy(e);
    if (origin != nullptr) api.event_destroy(origin);
    for (Handle g : gemm) {
      if (g != nullptr) api.gemm_destroy(g);
    }
    for (Handle p : scratch) {
      if (p != nullptr) api.free_device(p);
    }
    for (Handle st : streams) {
      if (st != nullptr) api.stream_destroy(st);
    }
    buffers.clear(), timing.clear(), events.clear(), gemm.clear(), scratch.clear(), streams.clear();
    origin = nullptr;
  }

  // GEMMs through cuBLASLt; attention as a GEMM of its FLOPs plus a
  // bandwidth kernel of its bytes; the rest as bandwidth kernels.
  void enqueue_compute(std::size_t k, const core::Op& op, const std::string& what) {
    const auto& c = op.compute();
    const auto bytes = static_cast<std::size_t>(c.bytes.count());
    if (c.kind == core::ComputeKind::Gemm && c.gemm) {
      api.gemm_run(gemm[k], *c.gemm, c.dtype, scratch[k], streams[k], what);
    } else if (c.kind == core::ComputeKind::Attention) {
      api.gemm_run(gemm[k], flops_gemm(c.flops.count()), core::Dtype::Bf16, scratch[k], streams[k], what);
      api.launch_bandwidth(scratch[k], bytes, streams[k], what + ": softmax bytes");
    } else {
      api.launch_bandwidth(scratch[k], bytes, streams[k], what + ": bandwidth kernel");
    }
  }

  void enqueue_collective(std::size_t k, const core::Op& op, const std::string& what);
  void enqueue_transfer(std::size_t k, const core::Op& op, const std::string& what);
  void enqueue_comm(std::size_t k, std::size_t i, const std::string& what);
  void enqueue_alloc(std::size_t k, const core::Op& op, const std::string& what);
  void enqueue_free(std::size_t k, const core::Op& op, const std::string& what);
  void wait_done(Handle event, const std::string& what);
  void fire(const std::string& report);
  [[nodiscard]] std::string waiting_report(const std::vector<std::pair<std::size_t, std::size_t>>& unfinished) const;
};

// Through NCCL on this rank's communicator of the op's group, or emulated on
// one GPU for the model's duration. Counts are elements of the op's dtype
// (fp8: one byte each, as an 8-bit NCCL type).
void DeviceBackend::State::enqueue_collective(std::size_t k, const core::Op& op, const std::string& what) {
  const auto& c = op.collective();
  const auto bytes = static_cast<std::size_t>(c.bytes.count());
  const core::Group& g = s.group(c.group);
  if (o.emulate_collectives) {
    const core::Duration d = pm.collective(c.kind, c.bytes, pm.span(g.ranks));
    api.launch_emulated(scratch[k], bytes, o.nccl_channels, static_cast<std::uint64_t>(d.count_ns()), streams[k],
                        what + ": emulated collective");
    return;
  }
  Handle comm = comms->comm(comm_of(comms->plan(), plan, prog, op));
  const std::size_t P = g.ranks.size();
  const auto [type, elem] = comm_element(c.dtype);
  auto* buf = static_cast<char*>(scratch[k]);
  Handle stream = streams[k];
  comms->call(comm, what, [&] {
    switch (c.kind) {
      case core::CollectiveKind::AllGather:      // bytes: the receive buffer
      case core::CollectiveKind::ReduceScatter:  // bytes: the send buffer
        api.collective(c.kind, buf, buf + bytes, bytes / P / elem, type, comm, stream, what);
        break;
      case core::CollectiveKind::AllReduce:
      case core::CollectiveKind::Broadcast:
        api.collective(c.kind, buf, buf + bytes, bytes / elem, type, comm, stream, what);
        break;
      case core::CollectiveKind::AllToAll: {
        // The group's communicator ranks its members by global rank (the split key).
        const std::size_t share = bytes / P;
        api.group_start(what + ": group start");
        for (std::size_t peer = 0; peer < P; ++peer) {
          api.send(buf + peer * share, share / elem, type, static_cast<int>(peer), comm, stream, what + ": send");
          api.recv(buf + bytes + peer * share, share / elem, type, static_cast<int>(peer), comm, stream,
                   what + ": recv");
        }
        api.group_end(what + ": group end");
        break;
      }
    }
  });
}

// A send or recv on the communicator of its ordered pair (ranks 0 and 1 there
// by global rank), or emulated on one GPU.
void DeviceBackend::State::enqueue_transfer(std::size_t k, const core::Op& op, const std::string& what) {
  const auto& t = op.transfer();
  const auto bytes = static_cast<std::size_t>(t.bytes.count());
  const bool send = op.kind == core::OpKind::Send;
  if (o.emulate_collectives) {
    const int me = prog.ranks.at(0);
    const core::Duration d = pm.p2p(t.bytes, send ? me : t.peer, send ? t.peer : me);
    api.launch_emulated(scratch[k], bytes, 1, static_cast<std::uint64_t>(d.count_ns()), streams[k],
                        what + ": emulated transfer");
    return;
  }
  Handle comm = comms->comm(comm_of(comms->plan(), plan, prog, op));
  const int peer = op_peer(prog, op, plan.rank) < plan.rank ? 0 : 1;
  comms->call(comm, what, [&] {
    if (send) {
      api.send(scratch[k], bytes, CommType::U8, peer, comm, streams[k], what);
    } else {
      api.recv(scratch[k], bytes, CommType::U8, peer, comm, streams[k], what);
    }
  });
}

// A collective, send or recv in its turn: one host thread at a time calls
// NCCL on this device, in op id order, the same on every rank of the class
// (NCCL: concurrent calls from several threads on one device are unsafe, and
// the ranks of a communicator must issue its operations in one order).
void DeviceBackend::State::enqueue_comm(std::size_t k, std::size_t i, const std::string& what) {
  const core::Op& op = prog.streams[k].ops[i];
  sync.take_turn(sync.ticket(k, i), who(op) + ": waits for its turn to call NCCL");
  api.event_record(timing[k][i].first, streams[k], what + ": start event");
  if (op.kind == core::OpKind::Collective) {
    enqueue_collective(k, op, what);
  } else {
    enqueue_transfer(k, op, what);
  }
  api.event_record(timing[k][i].second, streams[k], what + ": end event");
  sync.end_turn();
}

// A buffer the program never frees (model state) is allocated in the first
// step and kept: later steps' allocs of it find it held.
void DeviceBackend::State::enqueue_alloc(std::size_t k, const core::Op& op, const std::string& what) {
  {
    const std::lock_guard lock(buffers_mutex);
    if (persistent.contains(op.buffer().name) && buffers.contains(op.buffer().name)) return;
  }
  Handle p = api.pool_alloc(static_cast<std::size_t>(op.buffer().bytes.count()), streams[k], what);
  const std::lock_guard lock(buffers_mutex);
  if (!buffers.emplace(op.buffer().name, p).second) {
    api.pool_free(p, streams[k], what);
    throw RunError(what + ": allocates a buffer that is already allocated");
  }
}

void DeviceBackend::State::enqueue_free(std::size_t k, const core::Op& op, const std::string& what) {
  Handle p = nullptr;
  {
    const std::lock_guard lock(buffers_mutex);
    auto it = buffers.find(op.buffer().name);
    if (it == buffers.end()) throw RunError(what + ": frees a buffer that is not allocated");
    p = it->second;
    buffers.erase(it);
  }
  api.pool_free(p, streams[k], what);
}

void DeviceBackend::State::wait_done(Handle event, const std::string& what) {
  while (!api.event_done(event, what)) {
    if (sync.aborted()) throw RunError(sync.why());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string DeviceBackend::State::waiting_report(
    const std::vector<std::pair<std::size_t, std::size_t>>& unfinished) const {
  std::string out = fmt::format("hzp-run: watchdog: rank {}: no op finished for {} ms; aborting. Waiting ops:\n",
                                plan.rank, o.watchdog.count());
  std::set<std::size_t> streams_seen;
  for (const auto& [k, i] : unfinished) {
    if (!streams_seen.insert(k).second) continue;  // the first unfinished op of each stream
    out += fmt::format("  {} on stream '{}' has not finished\n", who(prog.streams[k].ops[i]), prog.streams[k].name);
  }
  for (const std::string& w : sync.waiting()) out += fmt::format("  host thread: {}\n", w);
  return out;
}

void DeviceBackend::State::fire(const std::string& report) {
  std::cerr << report;
  sync.abort(report);
  if (comms != nullptr) comms->abort();
}

DeviceBackend::DeviceBackend(DeviceApi& api, const core::Schedule& s, const RankPlan& plan, const cost::PerfModel& pm,
                             DeviceComms* comms, BackendOptions o)
    : st_(std::make_unique<State>(api, s, plan, pm, comms, std::move(o))) {
  State& st = *st_;
  if (comms == nullptr && !st.o.emulate_collectives) {
    throw RunError("device backend: expected NCCL communicators or emulation");
  }
  check_issue_order(st.prog);
  try {
    api.set_device(st.o.device, fmt::format("cudaSetDevice({})", st.o.device));
    api.pool_keep_reserved("memory pool release threshold");
    const std::size_t ns = st.prog.streams.size();
    st.streams.assign(ns, nullptr), st.scratch.assign(ns, nullptr), st.gemm.assign(ns, nullptr);
    st.scratch_bytes.assign(ns, 0);
    st.timing.resize(ns), st.enqueued.resize(ns), st.finished.resize(ns), st.issued_s.resize(ns);
    for (std::size_t k = 0; k < ns; ++k) st.prepare_stream(k);
    st.origin = api.event_create(true, "origin event");
  } catch (...) {
    st.release();
    throw;
  }
  if (st.o.watchdog_thread) {
    watchdog_ = std::thread([this] {
      // A new thread's device is 0 until set (CUDA: the current device is per
      // host thread): without this the watchdog makes a context on GPU 0.
      try {
        st_->api.set_device(st_->o.device, "watchdog: cudaSetDevice");
        while (!stop_) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          if (watch_once()) return;
        }
      } catch (const std::exception& e) {
        st_->fire(fmt::format("hzp-run: watchdog: rank {}: {}\n", st_->plan.rank, e.what()));
      }
    });
  }
}

// The device objects go with the State, once the device is idle.
DeviceBackend::~DeviceBackend() {
  State& st = *st_;
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  try {
    if (!st.sync.aborted()) st.api.device_synchronize("end of run");
    st.release();
  } catch (const std::exception& e) {
    std::cerr << "hzp-run: rank " << st.plan.rank << ": " << e.what() << "\n";
  }
}

void DeviceBackend::begin_step() {
  State& st = *st_;
  st.api.device_synchronize("synchronize before the step");
  {
    const std::lock_guard lock(st.progress);
    for (auto& per : st.enqueued) std::fill(per.begin(), per.end(), 0);
    for (auto& per : st.finished) std::fill(per.begin(), per.end(), 0);
  }
  st.sync.begin_step();
  // The pool's high-water marks are since the last reset: per step.
  st.api.pool_reset_peaks("reset the pool's high-water marks");
  // Fresh random operands in every scratch buffer, on the first stream before
  // the origin: a step's GEMMs never read zeros or the last step's products,
  // and the fills are outside every timed op.
  for (std::size_t k = 0; k < st.scratch.size(); ++k) {
    st.api.fill_random(st.scratch[k], st.scratch_bytes[k], k + 1, st.streams.at(0), "random operands");
  }
  st.api.event_record(st.origin, st.streams.at(0), "origin event");
  st.host_origin = st.o.now();
  // Every stream starts after the origin.
  for (std::size_t k = 1; k < st.streams.size(); ++k) st.api.stream_wait_event(st.streams[k], st.origin, "origin wait");
}

namespace {
// The executor's host threads are new threads: each makes the backend's GPU its own once.
void on_device(DeviceApi& api, int device) {
  thread_local const DeviceApi* api_set = nullptr;
  thread_local int current = -1;
  if (api_set != &api || current != device) {
    api.set_device(device, fmt::format("cudaSetDevice({})", device));
    api_set = &api;
    current = device;
  }
}
}  // namespace

void DeviceBackend::enqueue(std::size_t, std::size_t k, std::size_t i) {
  State& st = *st_;
  if (st.sync.aborted()) throw RunError(st.sync.why());
  const core::Op& op = st.prog.streams[k].ops[i];
  const std::string what = fmt::format("rank {} {}", st.plan.rank, describe(op));
  try {
    on_device(st.api, st.o.device);
    st.issued_s[k][i] = std::chrono::duration<double>(st.o.now() - st.host_origin).count();
    Handle stream = st.streams[k];
    switch (op.kind) {
      case core::OpKind::Compute:
        st.api.event_record(st.timing[k][i].first, stream, what + ": start event");
        st.enqueue_compute(k, op, what);
        st.api.event_record(st.timing[k][i].second, stream, what + ": end event");
        break;
      case core::OpKind::Collective:
      case core::OpKind::Send:
      case core::OpKind::Recv: st.enqueue_comm(k, i, what); break;
      case core::OpKind::Record:
        st.api.event_record(st.events.at(op.event().id), stream, what);
        st.sync.recorded(op.event().id);
        break;
      case core::OpKind::Wait:
        // cudaStreamWaitEvent waits for the event's most recent record made
        // before the call (and an event never recorded counts as complete):
        // a record issued by another host thread must come first, in this step.
        st.sync.wait_recorded(op.event().id, st.who(op) + ": waits for its event's record");
        st.api.stream_wait_event(stream, st.events.at(op.event().id), what);
        break;
      case core::OpKind::Alloc: st.enqueue_alloc(k, op, what); break;
      case core::OpKind::Free: st.enqueue_free(k, op, what); break;
      case core::OpKind::Sync: break;  // the executor calls host_wait instead
    }
  } catch (const std::exception& e) {
    st.sync.abort(e.what());  // no other host thread waits on this one's records or turns
    throw;
  }
  const std::lock_guard lock(st.progress);
  st.enqueued[k][i] = 1;
}

void DeviceBackend::host_wait(std::size_t, const core::Thread& thread, int event) {
  State& st = *st_;
  on_device(st.api, st.o.device);
  const std::string who = fmt::format("rank {} thread '{}': sync on event {}", st.plan.rank, thread.name, event);
  // As for a wait: cudaEventQuery/Synchronize see the record made before the
  // call, so the record (on any host thread) must have been issued this step.
  st.sync.wait_recorded(event, who + " waits for its record");
  st.wait_done(st.events.at(event), who);
}

void DeviceBackend::drain() {
  State& st = *st_;
  for (std::size_t k = 0; k < st.timing.size(); ++k) {
    for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
      bool enqueued = false;
      {
        const std::lock_guard lock(st.progress);
        enqueued = st.enqueued[k][i] != 0;
      }
      if (enqueued && st.timing[k][i].second != nullptr) {
        st.wait_done(st.timing[k][i].second, fmt::format("rank {} stream {}", st.plan.rank, k));
      }
    }
  }
  st.api.device_synchronize(fmt::format("rank {}: end of step", st.plan.rank));
}

void DeviceBackend::abort(const std::string& why) { st_->fire(why); }

bool DeviceBackend::watch_once() {
  State& st = *st_;
  if (st.sync.aborted()) return true;
  if (st.comms != nullptr) {
    // A peer's failure shows as an asynchronous error on our communicators
    // (ncclCommGetAsyncError), not as a finished op: abort at once.
    if (const std::string error = st.comms->async_error(); !error.empty()) {
      st.fire(fmt::format("hzp-run: watchdog: rank {}: NCCL asynchronous error: {}; aborting\n", st.plan.rank, error));
      return true;
    }
  }
  std::vector<std::tuple<std::size_t, std::size_t, Handle>> open;  // copied under the lock, queried outside it
  std::size_t finished = 0;
  {
    const std::lock_guard lock(st.progress);
    for (std::size_t k = 0; k < st.timing.size(); ++k) {
      for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
        if (st.finished[k][i]) ++finished;
        if (st.enqueued[k][i] && !st.finished[k][i] && st.timing[k][i].second != nullptr) {
          open.emplace_back(k, i, st.timing[k][i].second);
        }
      }
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> unfinished;
  for (const auto& [k, i, end] : open) {
    if (st.api.event_done(end, "watchdog event query")) {
      const std::lock_guard lock(st.progress);
      st.finished[k][i] = 1;
      ++finished;
    } else {
      unfinished.emplace_back(k, i);
    }
  }
  const bool pending = !unfinished.empty() || !st.sync.waiting().empty();
  if (!st.watch.observe(finished, pending, st.o.now())) return false;
  st.fire(st.waiting_report(unfinished));
  return true;
}

std::vector<std::vector<core::OpTime>> DeviceBackend::times() const {
  const State& st = *st_;
  std::vector<std::vector<core::OpTime>> out(st.timing.size());
  for (std::size_t k = 0; k < st.timing.size(); ++k) {
    out[k].assign(st.timing[k].size(), core::OpTime{});
    for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
      if (!st.enqueued[k][i] || st.timing[k][i].first == nullptr) continue;
      const float a = st.api.elapsed_ms(st.origin, st.timing[k][i].first, "elapsed time");
      const float b = st.api.elapsed_ms(st.origin, st.timing[k][i].second, "elapsed time");
      out[k][i] = core::OpTime{core::TimePoint::at(core::Duration::ms(a)), core::TimePoint::at(core::Duration::ms(b))};
    }
  }
  return out;
}

void DeviceBackend::emit(traces::TraceHeader header, traces::TraceSink& sink) const {
  const State& st = *st_;
  sink.on_header(header);
  traces::emit_streams(st.s, sink);
  const auto t = times();
  for (std::size_t k = 0; k < st.prog.streams.size(); ++k) {
    const core::Stream& stream = st.prog.streams[k];
    for (std::size_t i = 0; i < stream.ops.size(); ++i) {
      if (st.timing[k][i].first != nullptr && st.enqueued[k][i]) {
        traces::OpRecord rec = traces::op_record(st.s, st.prog, stream, stream.ops[i], t[k][i].start, t[k][i].end);
        rec.issued = core::TimePoint::seconds(st.issued_s[k][i]);
        sink.on_op(std::move(rec));
      }
    }
  }
}

core::Bytes DeviceBackend::peak_reserved() const {
  return core::Bytes(static_cast<std::int64_t>(st_->api.pool_reserved_high("pool reserved high")));
}

core::Bytes DeviceBackend::peak_used() const {
  return core::Bytes(static_cast<std::int64_t>(st_->api.pool_used_high("pool used high")));
}

}  // namespace hzp::runtime::device
