// Device kernels of the CUDA backend (kernels.cu), callable from host code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hzp::runtime::cuda {

/// Fills `bytes` of `buffer` with bf16 values uniform in [-1, 1), each from a
/// hash of (`seed`, its index): operands with a model's bit patterns, not
/// cudaMalloc's zeros (device::DeviceApi::fill_random).
cudaError_t launch_fill_random(void* buffer, std::size_t bytes, std::uint64_t seed, cudaStream_t stream);

/// Reads half of `bytes` from `buffer` and writes the other half: a
/// bandwidth-bound op (element-wise, norm, optimizer, softmax) moving the
/// bytes the Schedule states. `buffer` holds at least `bytes`.
cudaError_t launch_bandwidth(void* buffer, std::size_t bytes, cudaStream_t stream);

/// A stand-in for a collective on one GPU: `blocks` thread blocks (the NCCL
/// channels, one SM each) copy `bytes` around `buffer` until `nanoseconds`
/// have passed since the kernel started, so that the SMs and HBM traffic a
/// collective takes are real while it lasts as long as the model says.
cudaError_t launch_emulated_collective(void* buffer, std::size_t bytes, int blocks, std::uint64_t nanoseconds,
                                       cudaStream_t stream);

}  // namespace hzp::runtime::cuda
