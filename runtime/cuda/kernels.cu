// Device kernels of the CUDA backend (see kernels.hpp).
#include "runtime/cuda/kernels.hpp"

namespace hzp::runtime::cuda {
namespace {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void copy_half(const float4* __restrict__ src, float4* __restrict__ dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Copies blockDim.x float4s at a time and looks at the clock between
// chunks, so it ends within one chunk of `nanoseconds` (not after a whole
// pass over the bytes). Thread 0 decides and shares the decision through
// shared memory: the loop condition is the same for every thread of the
// block, as __syncthreads() in a loop requires (CUDA: a barrier in divergent
// code is undefined behaviour).
__global__ void busy_copy(float4* buffer, std::size_t n, std::uint64_t nanoseconds) {
  __shared__ std::uint64_t start;
  __shared__ int done;
  if (threadIdx.x == 0) {
    start = global_ns();
    done = nanoseconds == 0;
  }
  __syncthreads();
  const std::size_t half = n / 2;
  const std::size_t per_block = (half + gridDim.x - 1) / gridDim.x;
  const std::size_t lo = blockIdx.x * per_block;
  const std::size_t hi = lo + per_block < half ? lo + per_block : half;
  std::size_t at = lo;
  while (!done) {
    const std::size_t i = at + threadIdx.x;
    if (i < hi) buffer[half + i] = buffer[i];
    at = at + blockDim.x < hi ? at + blockDim.x : lo;  // wrap around the block's share
    __syncthreads();
    if (threadIdx.x == 0 && global_ns() - start >= nanoseconds) done = 1;
    __syncthreads();
  }
}

// SplitMix64's finaliser: a well-mixed 64-bit hash of the element's index.
__device__ __forceinline__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Element i: a float uniform in [-1, 1) from 24 hash bits, kept as its upper
// 16 bits (bf16 by truncation).
__global__ void fill_bf16(std::uint16_t* out, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix(seed ^ (i * 0xd6e8feb86659fd93ULL)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = static_cast<std::uint16_t>(__float_as_uint(u) >> 16);
  }
}

}  // namespace

cudaError_t launch_fill_random(void* buffer, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) {
  const std::size_t n = bytes / 2;
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535);
  fill_bf16<<<blocks, 256, 0, stream>>>(static_cast<std::uint16_t*>(buffer), n, seed);
  return cudaGetLastError();
}

cudaError_t launch_bandwidth(void* buffer, std::size_t bytes, cudaStream_t stream) {
  const std::size_t n = bytes / 2 / sizeof(float4);
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535);
  auto* base = static_cast<float4*>(buffer);
  copy_half<<<blocks, 256, 0, stream>>>(base, base + n, n);
  return cudaGetLastError();
}

cudaError_t launch_emulated_collective(void* buffer, std::size_t bytes, int blocks, std::uint64_t nanoseconds,
                                       cudaStream_t stream) {
  const std::size_t n = bytes / sizeof(float4);
  const unsigned grid = blocks > 0 ? static_cast<unsigned>(blocks) : 1u;
  busy_copy<<<grid, 512, 0, stream>>>(static_cast<float4*>(buffer), n, nanoseconds);
  return cudaGetLastError();
}

}  // namespace hzp::runtime::cuda
