// The CUDA backend (see cuda_backend.hpp).
#include "runtime/cuda/cuda_backend.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#ifdef HZP_HAVE_MPI
#include <mpi.h>
#endif

#include "core/io.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/comm_state.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/cuda/kernels.hpp"

namespace hzp::runtime::cuda {
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

ncclDataType_t nccl_type(core::Dtype d) {
  switch (d) {
    case core::Dtype::Fp32: return ncclFloat32;
    case core::Dtype::Fp16: return ncclFloat16;
    default: return ncclBfloat16;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Communicators

void use_device(int device) { check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device)); }

std::string new_nccl_id() {
  ncclUniqueId id{};
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return {reinterpret_cast<const char*>(&id), sizeof id};
}

double world_max(Communicators& comms, double v) {
  double* d = nullptr;
  check(cudaMalloc(&d, sizeof v), "world max buffer");
  check(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice), "world max copy");
  check(ncclAllReduce(d, d, 1, ncclFloat64, ncclMax, comms.state().world_comm, nullptr), "world max all-reduce");
  check(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost), "world max copy back");
  cudaFree(d);
  return v;
}

Communicators::Communicators(const core::Schedule& s, const LaunchInfo& launch, const std::string& rendezvous_dir,
                             const std::string& shared_id)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.rank = launch.rank;
  st.world = launch.world;
  ncclUniqueId id{};
  bool shared = false;
  if (!shared_id.empty()) {
    if (shared_id.size() != sizeof id) throw RunError("NCCL set-up: a shared id of the wrong size");
    std::memcpy(&id, shared_id.data(), sizeof id);
    shared = true;
  }
#ifdef HZP_HAVE_MPI
  if (!shared && launch.launcher == "mpirun") {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    if (st.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    shared = true;
  }
#endif
  if (!shared && st.world > 1) {
    // File rendezvous: rank 0 writes the id (whole, by rename), the others poll.
    if (rendezvous_dir.empty()) {
      throw RunError("NCCL set-up: expected --rendezvous DIR (a path every rank sees) to share the NCCL id");
    }
    // (A fresh directory per run, as torchrun's file store wants: an old id
    // there would be read before rank 0 replaces it.)
    const std::string path = (std::filesystem::path(rendezvous_dir) / "nccl-id").string();
    if (st.rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      core::write_file_atomic(path, std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      for (int tries = 0;; ++tries) {
        std::ifstream in(path, std::ios::binary);
        if (in && in.read(reinterpret_cast<char*>(&id), sizeof id)) break;
        if (tries > 6000) throw RunError(fmt::format("NCCL set-up: no id in {} after 60 s", path));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  } else if (!shared) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  }
  check(ncclCommInitRank(&st.world_comm, st.world, id, st.rank), "ncclCommInitRank (world)");
  // One split per round, every rank in every round, in the same order.
  for (const SplitRound& round : comm_split_rounds(s)) {
    const std::optional<int> colour = split_colour(s, round, st.rank);
    ncclComm_t comm = nullptr;
    check(ncclCommSplit(st.world_comm, colour ? *colour : NCCL_SPLIT_NOCOLOR, st.rank, &comm, nullptr),
          fmt::format("ncclCommSplit ({} groups)", core::to_string(round.kind)));
    if (colour) st.groups[*colour] = comm;
  }
  // A world clone per stream that sends or receives (NCCL forbids using one
  // communicator from two host threads at once).
  const RankPlan plan = rank_plan(s, st.rank);
  const auto& prog = s.programs[plan.program];
  for (std::size_t k = 0; k < prog.streams.size(); ++k) {
    const bool p2p = std::any_of(prog.streams[k].ops.begin(), prog.streams[k].ops.end(), [](const core::Op& op) {
      return op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv;
    });
    if (!p2p) continue;
    ncclComm_t comm = nullptr;
    check(ncclCommSplit(st.world_comm, 0, st.rank, &comm, nullptr), "ncclCommSplit (send/recv clone)");
    st.p2p[k] = comm;
  }
}

Communicators::~Communicators() {
  for (ncclComm_t c : state_->all()) {
    if (c) ncclCommDestroy(c);
  }
}

void Communicators::abort() {
  for (ncclComm_t c : state_->all()) {
    if (c) ncclCommAbort(c);
  }
  state_->groups.clear();
  state_->p2p.clear();
  state_->world_comm = nullptr;
}

// ---------------------------------------------------------------------------
// The backend

struct CudaBackend::State {
  const core::Schedule& s;
  RankPlan plan;
  const topologies::PerfModel& pm;
  Communicators* comms;
  CudaOptions o;
  const core::Program& prog;
  std::vector<cudaStream_t> streams;
  std::vector<void*> scratch;                // per stream, sized for its largest op
  std::vector<std::unique_ptr<Gemms>> gemm;  // per stream (a cuBLASLt handle per issuing thread)
  std::map<int, cudaEvent_t> events;
  std::vector<std::vector<std::pair<cudaEvent_t, cudaEvent_t>>> timing;  // [stream][op]
  std::vector<std::vector<char>> enqueued;                               // [stream][op], under `progress`
  mutable std::mutex progress;  // enqueued flags: set by issuing threads, read by the watchdog
  cudaEvent_t origin = nullptr;
  std::chrono::steady_clock::time_point host_origin;  // the host clock at begin_step
  std::vector<std::vector<double>> issued_s;          // [stream][op]: host issue time, s since host_origin
  cudaMemPool_t pool = nullptr;
  std::map<std::string, void*> buffers;
  std::mutex buffers_mutex;
  std::atomic<bool> aborted{false};
  std::string abort_report;
  std::atomic<bool> stop{false};
  std::thread watchdog;

  State(const core::Schedule& sched, RankPlan p, const topologies::PerfModel& model, Communicators* c, CudaOptions opt)
      : s(sched), plan(std::move(p)), pm(model), comms(c), o(opt), prog(sched.programs.at(plan.program)) {}

  std::size_t completed() const {
    const std::lock_guard lock(progress);
    std::size_t n = 0;
    for (std::size_t k = 0; k < timing.size(); ++k) {
      for (std::size_t i = 0; i < timing[k].size(); ++i) {
        if (enqueued[k][i] && timing[k][i].second && cudaEventQuery(timing[k][i].second) == cudaSuccess) ++n;
      }
    }
    return n;
  }

  std::string waiting_report() const {
    const std::lock_guard lock(progress);
    std::string out = fmt::format("hzp-run: watchdog: rank {}: no op finished for {} ms; aborting. Waiting ops:\n",
                                  plan.rank, o.watchdog.count());
    for (std::size_t k = 0; k < timing.size(); ++k) {
      for (std::size_t i = 0; i < timing[k].size(); ++i) {
        if (!enqueued[k][i] || !timing[k][i].second) continue;
        if (cudaEventQuery(timing[k][i].second) == cudaSuccess) continue;
        out += fmt::format("  rank {} (class {} '{}') stream '{}': {} has not finished\n", plan.rank, prog.id,
                           prog.name, prog.streams[k].name, describe(prog.streams[k].ops[i]));
        break;
      }
    }
    return out;
  }

  void watch() {
    std::size_t seen = 0;
    auto last = std::chrono::steady_clock::now();
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const std::size_t now_done = completed();
      if (now_done != seen) {
        seen = now_done;
        last = std::chrono::steady_clock::now();
        continue;
      }
      bool pending = false;
      std::unique_lock lock(progress);
      for (std::size_t k = 0; k < timing.size() && !pending; ++k) {
        for (std::size_t i = 0; i < timing[k].size() && !pending; ++i) {
          pending = enqueued[k][i] && timing[k][i].second && cudaEventQuery(timing[k][i].second) != cudaSuccess;
        }
      }
      lock.unlock();
      if (!pending) last = std::chrono::steady_clock::now();
      if (pending && std::chrono::steady_clock::now() - last > o.watchdog) {
        abort_report = waiting_report();
        std::cerr << abort_report;
        aborted = true;
        if (comms) comms->abort();
        return;
      }
    }
  }

  void wait_event(cudaEvent_t e, const std::string& what) {
    while (true) {
      if (aborted) throw RunError(abort_report);
      const cudaError_t r = cudaEventQuery(e);
      if (r == cudaSuccess) return;
      if (r != cudaErrorNotReady) check(r, what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

CudaBackend::CudaBackend(const core::Schedule& s, const RankPlan& plan, const topologies::PerfModel& pm,
                         Communicators* comms, CudaOptions o)
    : st_(std::make_unique<State>(s, plan, pm, comms, o)) {
  State& st = *st_;
  if (!comms && !o.emulate_collectives) throw RunError("CUDA backend: expected NCCL communicators or emulation");
  check(cudaSetDevice(o.device), fmt::format("cudaSetDevice({})", o.device));
  check(cudaDeviceGetDefaultMemPool(&st.pool, o.device), "cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = UINT64_MAX;  // the pool keeps what it reserved: reserved = what was needed
  check(cudaMemPoolSetAttribute(st.pool, cudaMemPoolAttrReleaseThreshold, &keep), "memory pool release threshold");
  const std::size_t ns = st.prog.streams.size();
  st.streams.resize(ns);
  st.scratch.assign(ns, nullptr);
  st.timing.resize(ns);
  st.enqueued.resize(ns);
  for (std::size_t k = 0; k < ns; ++k) {
    const core::Stream& stream = st.prog.streams[k];
    check(cudaStreamCreateWithFlags(&st.streams[k], cudaStreamNonBlocking), "cudaStreamCreate " + stream.name);
    st.gemm.push_back(std::make_unique<Gemms>());
    std::size_t need = 1 << 20;
    for (const core::Op& op : stream.ops) {
      if (op.kind == core::OpKind::Compute) {
        if (op.compute == core::ComputeKind::Gemm && op.gemm) need = std::max(need, gemm_bytes(*op.gemm, op.dtype));
        if (op.compute == core::ComputeKind::Attention) {
          need = std::max(need, gemm_bytes(flops_gemm(op.flops.count()), core::Dtype::Bf16));
        }
        need = std::max(need, static_cast<std::size_t>(op.bytes.count()));
      }
      if (op.kind == core::OpKind::Collective || op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv) {
        need = std::max(need, 2 * static_cast<std::size_t>(op.bytes.count()));
      }
      if (op.kind == core::OpKind::Record || op.kind == core::OpKind::Wait || op.kind == core::OpKind::Sync) {
        if (!st.events.contains(op.event)) {
          cudaEvent_t e = nullptr;
          check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), fmt::format("event {}", op.event));
          st.events[op.event] = e;
        }
      }
    }
    check(cudaMalloc(&st.scratch[k], need), fmt::format("scratch of {} bytes for stream {}", need, stream.name));
    st.timing[k].assign(stream.ops.size(), {nullptr, nullptr});
    st.issued_s.emplace_back(stream.ops.size(), 0.0);
    st.enqueued[k].assign(stream.ops.size(), 0);
    for (std::size_t i = 0; i < stream.ops.size(); ++i) {
      const core::OpKind kind = stream.ops[i].kind;
      if (kind == core::OpKind::Compute || kind == core::OpKind::Collective || kind == core::OpKind::Send ||
          kind == core::OpKind::Recv) {
        check(cudaEventCreate(&st.timing[k][i].first), "timing event");
        check(cudaEventCreate(&st.timing[k][i].second), "timing event");
      }
    }
  }
  check(cudaEventCreate(&st.origin), "origin event");
  st.watchdog = std::thread([&st] { st.watch(); });
}

CudaBackend::~CudaBackend() {
  State& st = *st_;
  st.stop = true;
  if (st.watchdog.joinable()) st.watchdog.join();
  if (!st.aborted) cudaDeviceSynchronize();
  for (auto& [name, p] : st.buffers) cudaFree(p);
  for (auto& per : st.timing) {
    for (auto& [a, b] : per) {
      if (a) cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
  }
  for (auto& [id, e] : st.events) cudaEventDestroy(e);
  for (void* p : st.scratch) cudaFree(p);
  for (cudaStream_t s : st.streams) cudaStreamDestroy(s);
  if (st.origin) cudaEventDestroy(st.origin);
}

void CudaBackend::begin_step() {
  State& st = *st_;
  check(cudaDeviceSynchronize(), "synchronize before the step");
  {
    const std::lock_guard lock(st.progress);
    for (auto& per : st.enqueued) std::fill(per.begin(), per.end(), 0);
  }
  check(cudaEventRecord(st.origin, st.streams.at(0)), "origin event");
  st.host_origin = std::chrono::steady_clock::now();
  // Every stream starts after the origin.
  for (std::size_t k = 1; k < st.streams.size(); ++k) {
    check(cudaStreamWaitEvent(st.streams[k], st.origin, 0), "origin wait");
  }
}

void CudaBackend::issue_cost(std::size_t, const core::Thread&, const core::Op&) {}  // a GPU pays it itself

namespace {
// The executor's host threads are new threads: each makes the backend's GPU its own once.
void on_device(int device) {
  thread_local int current = -1;
  if (current != device) {
    check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
    current = device;
  }
}
}  // namespace

void CudaBackend::enqueue(std::size_t, std::size_t k, std::size_t i) {
  State& st = *st_;
  if (st.aborted) throw RunError(st.abort_report);
  on_device(st.o.device);
  const core::Op& op = st.prog.streams[k].ops[i];
  const std::string what = fmt::format("rank {} {}", st.plan.rank, describe(op));
  cudaStream_t stream = st.streams[k];
  const bool timed = st.timing[k][i].first != nullptr;
  st.issued_s[k][i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.host_origin).count();
  if (timed) check(cudaEventRecord(st.timing[k][i].first, stream), what + ": start event");
  const std::size_t bytes = static_cast<std::size_t>(op.bytes.count());
  switch (op.kind) {
    case core::OpKind::Compute:
      if (op.compute == core::ComputeKind::Gemm && op.gemm) {
        st.gemm[k]->run(*op.gemm, op.dtype, st.scratch[k], stream, what);
      } else if (op.compute == core::ComputeKind::Attention) {
        st.gemm[k]->run(flops_gemm(op.flops.count()), core::Dtype::Bf16, st.scratch[k], stream, what);
        check(launch_bandwidth(st.scratch[k], bytes, stream), what + ": softmax bytes");
      } else {
        check(launch_bandwidth(st.scratch[k], bytes, stream), what + ": bandwidth kernel");
      }
      break;
    case core::OpKind::Collective: {
      const core::Group& g = st.s.group(op.group);
      if (st.o.emulate_collectives) {
        const core::Duration d = st.pm.collective(op.collective, op.bytes, st.pm.span(g.ranks));
        check(launch_emulated_collective(st.scratch[k], bytes, st.o.nccl_channels,
                                         static_cast<std::uint64_t>(d.count_ns()), stream),
              what + ": emulated collective");
        break;
      }
      const int mine = st.plan.group_of.at(static_cast<std::size_t>(op.group));
      ncclComm_t comm = st.comms->state().groups.at(mine);
      const std::size_t P = g.ranks.size();
      const std::size_t elem =
          core::dtype_bytes(op.dtype) > 0 ? static_cast<std::size_t>(core::dtype_bytes(op.dtype)) : 2;
      auto* buf = static_cast<char*>(st.scratch[k]);
      const ncclDataType_t t = nccl_type(op.dtype);
      switch (op.collective) {
        case core::CollectiveKind::AllGather:  // bytes: the receive buffer
          check(ncclAllGather(buf, buf + bytes, bytes / P / elem, t, comm, stream), what);
          break;
        case core::CollectiveKind::ReduceScatter:  // bytes: the send buffer
          check(ncclReduceScatter(buf, buf + bytes, bytes / P / elem, t, ncclSum, comm, stream), what);
          break;
        case core::CollectiveKind::AllReduce:
          check(ncclAllReduce(buf, buf + bytes, bytes / elem, t, ncclSum, comm, stream), what);
          break;
        case core::CollectiveKind::Broadcast:
          check(ncclBroadcast(buf, buf + bytes, bytes / elem, t, 0, comm, stream), what);
          break;
        case core::CollectiveKind::AllToAll: {
          const std::size_t share = bytes / P;
          check(ncclGroupStart(), what + ": group start");
          for (std::size_t peer = 0; peer < P; ++peer) {
            check(ncclSend(buf + peer * share, share / elem, t, static_cast<int>(peer), comm, stream), what + ": send");
            check(ncclRecv(buf + bytes + peer * share, share / elem, t, static_cast<int>(peer), comm, stream),
                  what + ": recv");
          }
          check(ncclGroupEnd(), what + ": group end");
          break;
        }
      }
      break;
    }
    case core::OpKind::Send:
    case core::OpKind::Recv: {
      if (st.o.emulate_collectives) {
        const int me = st.prog.ranks.at(0);
        const bool send = op.kind == core::OpKind::Send;
        const core::Duration d = st.pm.p2p(op.bytes, send ? me : op.peer, send ? op.peer : me);
        check(launch_emulated_collective(st.scratch[k], bytes, 1, static_cast<std::uint64_t>(d.count_ns()), stream),
              what + ": emulated transfer");
        break;
      }
      // The representative's peer, moved by this rank's offset from it.
      const int peer = op.peer - st.prog.ranks.at(0) + st.plan.rank;
      ncclComm_t comm = st.comms->state().p2p.at(k);
      if (op.kind == core::OpKind::Send) {
        check(ncclSend(st.scratch[k], bytes, ncclUint8, peer, comm, stream), what);
      } else {
        check(ncclRecv(st.scratch[k], bytes, ncclUint8, peer, comm, stream), what);
      }
      break;
    }
    case core::OpKind::Record: check(cudaEventRecord(st.events.at(op.event), stream), what); break;
    case core::OpKind::Wait: check(cudaStreamWaitEvent(stream, st.events.at(op.event), 0), what); break;
    case core::OpKind::Alloc: {
      void* p = nullptr;
      check(cudaMallocAsync(&p, bytes, st.pool, stream), what);
      const std::lock_guard lock(st.buffers_mutex);
      st.buffers[op.buffer] = p;
      break;
    }
    case core::OpKind::Free: {
      void* p = nullptr;
      {
        const std::lock_guard lock(st.buffers_mutex);
        auto it = st.buffers.find(op.buffer);
        if (it == st.buffers.end()) throw RunError(what + ": frees a buffer that is not allocated");
        p = it->second;
        st.buffers.erase(it);
      }
      check(cudaFreeAsync(p, stream), what);
      break;
    }
    case core::OpKind::Sync: break;  // the executor calls host_wait instead
  }
  if (timed) check(cudaEventRecord(st.timing[k][i].second, stream), what + ": end event");
  const std::lock_guard lock(st.progress);
  st.enqueued[k][i] = 1;
}

void CudaBackend::host_wait(std::size_t, const core::Thread&, int event) {
  State& st = *st_;
  on_device(st.o.device);
  st.wait_event(st.events.at(event), fmt::format("rank {} sync on event {}", st.plan.rank, event));
}

void CudaBackend::drain() {
  State& st = *st_;
  for (std::size_t k = 0; k < st.timing.size(); ++k) {
    for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
      if (st.enqueued[k][i] && st.timing[k][i].second) {
        st.wait_event(st.timing[k][i].second, fmt::format("rank {} stream {}", st.plan.rank, k));
      }
    }
  }
  check(cudaDeviceSynchronize(), fmt::format("rank {}: end of step", st.plan.rank));
}

std::vector<std::vector<core::OpTime>> CudaBackend::times() const {
  const State& st = *st_;
  std::vector<std::vector<core::OpTime>> out(st.timing.size());
  for (std::size_t k = 0; k < st.timing.size(); ++k) {
    out[k].assign(st.timing[k].size(), core::OpTime{});
    for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
      if (!st.enqueued[k][i] || !st.timing[k][i].first) continue;
      float a = 0, b = 0;
      check(cudaEventElapsedTime(&a, st.origin, st.timing[k][i].first), "elapsed time");
      check(cudaEventElapsedTime(&b, st.origin, st.timing[k][i].second), "elapsed time");
      out[k][i] = core::OpTime{core::TimePoint::at(core::Duration::ms(a)), core::TimePoint::at(core::Duration::ms(b))};
    }
  }
  return out;
}

void CudaBackend::emit(traces::TraceHeader header, traces::TraceSink& sink) const {
  const State& st = *st_;
  sink.on_header(header);
  traces::emit_streams(st.s, sink);
  const auto t = times();
  for (std::size_t k = 0; k < st.prog.streams.size(); ++k) {
    const core::Stream& stream = st.prog.streams[k];
    for (std::size_t i = 0; i < stream.ops.size(); ++i) {
      if (st.timing[k][i].first && st.enqueued[k][i]) {
        traces::OpRecord rec = traces::op_record(st.s, st.prog, stream, stream.ops[i], t[k][i].start, t[k][i].end);
        rec.issued = core::TimePoint::seconds(st.issued_s[k][i]);
        sink.on_op(rec);
      }
    }
  }
}

core::Bytes CudaBackend::peak_reserved() const {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(st_->pool, cudaMemPoolAttrReservedMemHigh, &v), "pool reserved high");
  return core::Bytes(static_cast<std::int64_t>(v));
}

core::Bytes CudaBackend::peak_used() const {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(st_->pool, cudaMemPoolAttrUsedMemHigh, &v), "pool used high");
  return core::Bytes(static_cast<std::int64_t>(v));
}

}  // namespace hzp::runtime::cuda
