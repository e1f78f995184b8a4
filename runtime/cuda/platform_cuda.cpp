// query_platform against the CUDA runtime and NCCL (host code; g++ links it
// against cudart and libnccl, no nvcc needed). Without a GPU or driver the
// CUDA calls fail ("driver version is insufficient") and that becomes `error`.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "runtime/platform_info.hpp"

namespace hzp::runtime {

PlatformInfo query_platform() {
  PlatformInfo p;
  p.cuda_built = true;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) p.cuda_runtime = cuda_version_string(v);
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) p.cuda_driver = cuda_version_string(v);
  if (ncclGetVersion(&v) == ncclSuccess) p.nccl = nccl_version_string(v);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.error = cudaGetErrorString(err);
    return p;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      p.error = cudaGetErrorString(err);
      continue;
    }
    p.gpus.push_back(GpuInfo{i, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                             static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)});
  }
  if (count == 0) p.error = "no CUDA device";
  return p;
}

}  // namespace hzp::runtime
