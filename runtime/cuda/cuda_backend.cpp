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
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/cuda/check.hpp"
#include "runtime/cuda/comm_state.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/cuda/handles.hpp"
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

struct CudaBackend::State {
  const core::Schedule& s;
  RankPlan plan;
  const topologies::PerfModel& pm;
  Communicators* comms;
  CudaOptions o;
  const core::Program& prog;
  std::vector<Stream> streams;
  std::vector<DeviceBuffer> scratch;         // per stream, sized for its largest op
  std::vector<std::unique_ptr<Gemms>> gemm;  // per stream (a cuBLASLt handle per issuing thread)
  std::map<int, Event> events;
  std::vector<std::vector<std::pair<Event, Event>>> timing;  // [stream][op]
  std::vector<std::vector<char>> enqueued;                   // [stream][op], under `progress`
  mutable std::mutex progress;  // enqueued flags: set by issuing threads, read by the watchdog
  Event origin;
  std::chrono::steady_clock::time_point host_origin;  // the host clock at begin_step
  std::vector<std::vector<double>> issued_s;          // [stream][op]: host issue time, s since host_origin
  cudaMemPool_t pool = nullptr;
  std::map<std::string, DeviceBuffer> buffers;  // from the pool; freed by the Schedule's free ops
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
        if (enqueued[k][i] && timing[k][i].second && cudaEventQuery(timing[k][i].second.get()) == cudaSuccess) ++n;
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
        if (cudaEventQuery(timing[k][i].second.get()) == cudaSuccess) continue;
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
          pending = enqueued[k][i] && timing[k][i].second && cudaEventQuery(timing[k][i].second.get()) != cudaSuccess;
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

  // Stream k's CUDA stream, cuBLASLt handle, scratch (sized for its largest
  // op), the events its ops record, wait for or sync on, and timing events
  // around the ops that take time.
  void prepare_stream(std::size_t k) {
    const core::Stream& stream = prog.streams[k];
    streams[k] = make_stream(cudaStreamNonBlocking, "cudaStreamCreate " + stream.name);
    gemm.push_back(std::make_unique<Gemms>());
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
        if (!events.contains(op.event)) {
          events[op.event] = make_event(cudaEventDisableTiming, fmt::format("event {}", op.event));
        }
      }
    }
    scratch[k] = device_alloc(need, fmt::format("scratch of {} bytes for stream {}", need, stream.name));
    timing[k].resize(stream.ops.size());
    issued_s.emplace_back(stream.ops.size(), 0.0);
    enqueued[k].assign(stream.ops.size(), 0);
    for (std::size_t i = 0; i < stream.ops.size(); ++i) {
      const core::OpKind kind = stream.ops[i].kind;
      if (kind == core::OpKind::Compute || kind == core::OpKind::Collective || kind == core::OpKind::Send ||
          kind == core::OpKind::Recv) {
        timing[k][i].first = make_event(cudaEventDefault, "timing event");
        timing[k][i].second = make_event(cudaEventDefault, "timing event");
      }
    }
  }

  // GEMMs through cuBLASLt; attention as a GEMM of its FLOPs plus a
  // bandwidth kernel of its bytes; the rest as bandwidth kernels.
  void enqueue_compute(std::size_t k, const core::Op& op, cudaStream_t stream, const std::string& what) {
    const std::size_t bytes = static_cast<std::size_t>(op.bytes.count());
    if (op.compute == core::ComputeKind::Gemm && op.gemm) {
      gemm[k]->run(*op.gemm, op.dtype, scratch[k].get(), stream, what);
    } else if (op.compute == core::ComputeKind::Attention) {
      gemm[k]->run(flops_gemm(op.flops.count()), core::Dtype::Bf16, scratch[k].get(), stream, what);
      check(launch_bandwidth(scratch[k].get(), bytes, stream), what + ": softmax bytes");
    } else {
      check(launch_bandwidth(scratch[k].get(), bytes, stream), what + ": bandwidth kernel");
    }
  }

  // Through NCCL on this rank's communicator of the op's group kind, or
  // emulated on one GPU for the model's duration.
  void enqueue_collective(std::size_t k, const core::Op& op, cudaStream_t stream, const std::string& what) {
    const std::size_t bytes = static_cast<std::size_t>(op.bytes.count());
    const core::Group& g = s.group(op.group);
    if (o.emulate_collectives) {
      const core::Duration d = pm.collective(op.collective, op.bytes, pm.span(g.ranks));
      check(launch_emulated_collective(scratch[k].get(), bytes, o.nccl_channels,
                                       static_cast<std::uint64_t>(d.count_ns()), stream),
            what + ": emulated collective");
      return;
    }
    const int mine = plan.group_of.at(static_cast<std::size_t>(op.group));
    ncclComm_t comm = comms->state().groups.at(mine).get();
    const std::size_t P = g.ranks.size();
    const std::size_t elem =
        core::dtype_bytes(op.dtype) > 0 ? static_cast<std::size_t>(core::dtype_bytes(op.dtype)) : 2;
    auto* buf = static_cast<char*>(scratch[k].get());
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
  }

  // A send or recv on the stream's world clone, or emulated on one GPU.
  void enqueue_transfer(std::size_t k, const core::Op& op, cudaStream_t stream, const std::string& what) {
    const std::size_t bytes = static_cast<std::size_t>(op.bytes.count());
    if (o.emulate_collectives) {
      const int me = prog.ranks.at(0);
      const bool send = op.kind == core::OpKind::Send;
      const core::Duration d = pm.p2p(op.bytes, send ? me : op.peer, send ? op.peer : me);
      check(launch_emulated_collective(scratch[k].get(), bytes, 1, static_cast<std::uint64_t>(d.count_ns()), stream),
            what + ": emulated transfer");
      return;
    }
    // The representative's peer, moved by this rank's offset from it.
    const int peer = op.peer - prog.ranks.at(0) + plan.rank;
    ncclComm_t comm = comms->state().p2p.at(k).get();
    if (op.kind == core::OpKind::Send) {
      check(ncclSend(scratch[k].get(), bytes, ncclUint8, peer, comm, stream), what);
    } else {
      check(ncclRecv(scratch[k].get(), bytes, ncclUint8, peer, comm, stream), what);
    }
  }

  void enqueue_alloc(const core::Op& op, cudaStream_t stream, const std::string& what) {
    DeviceBuffer p;
    check(cudaMallocAsync(p.out(), static_cast<std::size_t>(op.bytes.count()), pool, stream), what);
    const std::lock_guard lock(buffers_mutex);
    DeviceBuffer& slot = buffers[op.buffer];
    // A buffer the Schedule never frees (model state) is allocated again by
    // the next step; the earlier allocation stays held, as it always has.
    (void)slot.release();
    slot = std::move(p);
  }

  void enqueue_free(const core::Op& op, cudaStream_t stream, const std::string& what) {
    void* p = nullptr;
    {
      const std::lock_guard lock(buffers_mutex);
      auto it = buffers.find(op.buffer);
      if (it == buffers.end()) throw RunError(what + ": frees a buffer that is not allocated");
      p = it->second.release();
      buffers.erase(it);
    }
    check(cudaFreeAsync(p, stream), what);
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
  st.scratch.resize(ns);
  st.timing.resize(ns);
  st.enqueued.resize(ns);
  for (std::size_t k = 0; k < ns; ++k) st.prepare_stream(k);
  st.origin = make_event(cudaEventDefault, "origin event");
  st.watchdog = std::thread([&st] { st.watch(); });
}

// The CUDA objects go with the State, once the device is idle.
CudaBackend::~CudaBackend() {
  State& st = *st_;
  st.stop = true;
  if (st.watchdog.joinable()) st.watchdog.join();
  if (!st.aborted) cudaDeviceSynchronize();
}

void CudaBackend::begin_step() {
  State& st = *st_;
  check(cudaDeviceSynchronize(), "synchronize before the step");
  {
    const std::lock_guard lock(st.progress);
    for (auto& per : st.enqueued) std::fill(per.begin(), per.end(), 0);
  }
  check(cudaEventRecord(st.origin.get(), st.streams.at(0).get()), "origin event");
  st.host_origin = std::chrono::steady_clock::now();
  // Every stream starts after the origin.
  for (std::size_t k = 1; k < st.streams.size(); ++k) {
    check(cudaStreamWaitEvent(st.streams[k].get(), st.origin.get(), 0), "origin wait");
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
  cudaStream_t stream = st.streams[k].get();
  const bool timed = static_cast<bool>(st.timing[k][i].first);
  st.issued_s[k][i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.host_origin).count();
  if (timed) check(cudaEventRecord(st.timing[k][i].first.get(), stream), what + ": start event");
  switch (op.kind) {
    case core::OpKind::Compute: st.enqueue_compute(k, op, stream, what); break;
    case core::OpKind::Collective: st.enqueue_collective(k, op, stream, what); break;
    case core::OpKind::Send:
    case core::OpKind::Recv: st.enqueue_transfer(k, op, stream, what); break;
    case core::OpKind::Record: check(cudaEventRecord(st.events.at(op.event).get(), stream), what); break;
    case core::OpKind::Wait: check(cudaStreamWaitEvent(stream, st.events.at(op.event).get(), 0), what); break;
    case core::OpKind::Alloc: st.enqueue_alloc(op, stream, what); break;
    case core::OpKind::Free: st.enqueue_free(op, stream, what); break;
    case core::OpKind::Sync: break;  // the executor calls host_wait instead
  }
  if (timed) check(cudaEventRecord(st.timing[k][i].second.get(), stream), what + ": end event");
  const std::lock_guard lock(st.progress);
  st.enqueued[k][i] = 1;
}

void CudaBackend::host_wait(std::size_t, const core::Thread&, int event) {
  State& st = *st_;
  on_device(st.o.device);
  st.wait_event(st.events.at(event).get(), fmt::format("rank {} sync on event {}", st.plan.rank, event));
}

void CudaBackend::drain() {
  State& st = *st_;
  for (std::size_t k = 0; k < st.timing.size(); ++k) {
    for (std::size_t i = 0; i < st.timing[k].size(); ++i) {
      if (st.enqueued[k][i] && st.timing[k][i].second) {
        st.wait_event(st.timing[k][i].second.get(), fmt::format("rank {} stream {}", st.plan.rank, k));
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
      check(cudaEventElapsedTime(&a, st.origin.get(), st.timing[k][i].first.get()), "elapsed time");
      check(cudaEventElapsedTime(&b, st.origin.get(), st.timing[k][i].second.get()), "elapsed time");
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
