// Microbenchmarks for calibration (see cuda_backend.hpp): GEMM shapes,
// collectives by size and group shape, GEMM slowdown beside a collective.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include "core/units.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/cuda_backend.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/cuda/handles.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/platform_info.hpp"

namespace hzp::runtime::cuda {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `fn` on `stream` with CUDA events: warm-up, then the median of `reps`.
template <class Fn>
double time_median(cudaStream_t stream, int reps, Fn fn) {
  const Event a = make_event(cudaEventDefault, "event");
  const Event b = make_event(cudaEventDefault, "event");
  for (int i = 0; i < 3; ++i) fn();
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a.get(), stream), "event");
    fn();
    check(cudaEventRecord(b.get(), stream), "event");
    check(cudaEventSynchronize(b.get()), "event");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a.get(), b.get()), "elapsed");
    t.push_back(core::ms_to_seconds(ms));
  }
  return median(t);
}

// One bf16 GEMM, its operands (random, as the backend's) and its plan: the
// backend's GEMM path.
struct Matmul {
  core::GemmShape s;
  Gemms gemms;
  DeviceBuffer buffer;
  explicit Matmul(const core::GemmShape& shape)
      : s(shape),
        buffer(device_alloc(gemm_bytes(s, core::Dtype::Bf16), fmt::format("GEMM {}x{}x{} operands", s.m, s.n, s.k))) {
    check(launch_fill_random(buffer.get(), gemm_bytes(s, core::Dtype::Bf16), 1, nullptr), "random GEMM operands");
    check(cudaDeviceSynchronize(), "random GEMM operands");
  }
  void run(cudaStream_t stream) {
    gemms.run(s, core::Dtype::Bf16, buffer.get(), stream,
              fmt::format("GEMM {}x{}x{} batch {}", s.m, s.n, s.k, s.batch));
  }
};

traces::BenchResults results(const std::string& kind, int device) {
  traces::BenchResults r;
  r.kind = kind;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "device properties");
  r.device = prop.name;
  r.provenance = device_provenance(device);
  return r;
}

}  // namespace

std::map<std::string, std::string> device_provenance(int device) {
  std::map<std::string, std::string> p;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    p["gpu"] = prop.name;
    p["sm"] = fmt::format("{}.{}", prop.major, prop.minor);
    p["multiprocessors"] = std::to_string(prop.multiProcessorCount);
    int clock_khz = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) == cudaSuccess) {
      p["sm_clock_MHz"] = std::to_string(clock_khz / 1000);
    }
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) p["driver"] = cuda_version_string(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) p["cuda"] = cuda_version_string(v);
  p["cublas"] = std::to_string(cublasLtGetVersion());
  if (ncclGetVersion(&v) == ncclSuccess) p["nccl"] = nccl_version_string(v);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) p["host"] = host;
  const std::time_t now = std::time(nullptr);
  char date[32] = {};
  std::tm utc{};
  (void)gmtime_r(&now, &utc);  // gmtime's static result is shared by the local-rank threads
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  p["date"] = date;
  return p;
}

traces::BenchResults bench_gemm(const std::vector<core::GemmShape>& shapes, int device, int reps) {
  check(cudaSetDevice(device), "cudaSetDevice");
  traces::BenchResults r = results("gemm", device);
  const Stream stream = make_stream(cudaStreamDefault, "stream");
  for (const auto& s : shapes) {
    Matmul mm(s);
    const double t = time_median(stream.get(), reps, [&] { mm.run(stream.get()); });
    r.gemm.push_back(traces::GemmResult{s.m, s.n, s.k, s.batch, core::Dtype::Bf16, t});
  }
  return r;
}

traces::BenchResults bench_collectives(Communicators& comms, const LaunchInfo& launch, int ranks_per_node,
                                       const std::vector<std::int64_t>& sizes, int device, int reps) {
  check(cudaSetDevice(device), "cudaSetDevice");
  traces::BenchResults r = results("collectives", device);
  const int P = launch.world;
  const int rpn = std::clamp(ranks_per_node, 1, P);
  // Group shapes: the world; inside one node (ranks of a node); across nodes
  // on one rail (the same local index on every node). Every rank times every
  // shape in the same order (the caller takes the max across ranks).
  struct Shape {
    ncclComm_t comm;
    int ranks, per_node;
  };
  ncclComm_t world = static_cast<ncclComm_t>(comms.world());
  std::vector<Shape> shapes{{world, P, rpn}};
  NcclComm node, rail;  // split here, destroyed on the way out
  if (P > rpn && P % rpn == 0) {
    if (rpn > 1) {
      const ncclResult_t split = ncclCommSplit(world, launch.rank / rpn, launch.rank, node.out(), nullptr);
      check_on(node.get(), split, "node communicator");
      shapes.push_back({node.get(), rpn, rpn});
    }
    const ncclResult_t split = ncclCommSplit(world, launch.rank % rpn, launch.rank, rail.out(), nullptr);
    check_on(rail.get(), split, "rail communicator");
    shapes.push_back({rail.get(), P / rpn, 1});
  }
  const Stream owned_stream = make_stream(cudaStreamDefault, "stream");
  cudaStream_t stream = owned_stream.get();
  const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const DeviceBuffer buf = device_alloc(2 * static_cast<std::size_t>(largest), "collective buffers");
  auto* b = static_cast<char*>(buf.get());
  for (const Shape& shape : shapes) {
    const auto n_ranks = static_cast<std::size_t>(shape.ranks);
    for (auto kind :
         {core::CollectiveKind::AllGather, core::CollectiveKind::ReduceScatter, core::CollectiveKind::AllReduce}) {
      for (std::int64_t bytes : sizes) {
        const std::size_t n = static_cast<std::size_t>(bytes);
        const double t = time_median(stream, reps, [&] {
          switch (kind) {
            case core::CollectiveKind::AllGather:
              check_on(shape.comm, ncclAllGather(b, b + n, n / n_ranks / 2, ncclBfloat16, shape.comm, stream),
                       "all-gather");
              break;
            case core::CollectiveKind::ReduceScatter:
              check_on(shape.comm,
                       ncclReduceScatter(b, b + n, n / n_ranks / 2, ncclBfloat16, ncclSum, shape.comm, stream),
                       "reduce-scatter");
              break;
            default:
              check_on(shape.comm, ncclAllReduce(b, b + n, n / 2, ncclBfloat16, ncclSum, shape.comm, stream),
                       "all-reduce");
              break;
          }
        });
        r.collectives.push_back(traces::CollectiveResult{kind, bytes, shape.ranks, shape.per_node, t});
      }
    }
  }
  return r;
}

traces::BenchResults bench_overlap(Communicators* comms, const core::GemmShape& gemm, std::int64_t bytes,
                                   const std::vector<int>& channels, int device, int reps) {
  check(cudaSetDevice(device), "cudaSetDevice");
  traces::BenchResults r = results("overlap", device);
  const Stream owned_compute = make_stream(cudaStreamNonBlocking, "stream");
  const Stream owned_comm = make_stream(cudaStreamNonBlocking, "stream");
  cudaStream_t compute = owned_compute.get(), comm = owned_comm.get();
  Matmul mm(gemm);
  const DeviceBuffer owned_buf = device_alloc(2 * static_cast<std::size_t>(bytes), "collective buffer");
  void* buf = owned_buf.get();
  const double alone = time_median(compute, reps, [&] { mm.run(compute); });
  for (int ch : channels) {
    // Keep the other stream busy for the GEMM's whole time: a collective (or
    // its emulation on `ch` SMs) lasting several GEMMs.
    const auto busy_ns = static_cast<std::uint64_t>(alone * 4e9);
    const double together = time_median(compute, reps, [&] {
      if (comms != nullptr) {
        auto* b = static_cast<char*>(buf);
        const std::size_t n = static_cast<std::size_t>(bytes);
        auto* w = static_cast<ncclComm_t>(comms->world());
        check_on(w, ncclAllReduce(b, b + n / 2, n / 4, ncclBfloat16, ncclSum, w, comm), "all-reduce beside the GEMM");
      } else {
        check(launch_emulated_collective(buf, static_cast<std::size_t>(bytes), ch, busy_ns, comm),
              "emulated collective beside the GEMM");
      }
      mm.run(compute);
    });
    check(cudaStreamSynchronize(comm), "overlap stream");
    r.overlap.push_back(
        traces::OverlapResult{gemm.m, gemm.n, gemm.k, core::CollectiveKind::AllReduce, bytes, ch, alone, together});
  }
  return r;
}

}  // namespace hzp::runtime::cuda
