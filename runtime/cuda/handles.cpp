// Checked creation of owned CUDA handles (see handles.hpp).
#include "runtime/cuda/handles.hpp"

#include "runtime/cuda/check.hpp"

namespace hzp::runtime::cuda {

Event make_event(unsigned flags, const std::string& what) {
  Event e;
  check(cudaEventCreateWithFlags(e.out(), flags), what);
  return e;
}

Stream make_stream(unsigned flags, const std::string& what) {
  Stream s;
  check(cudaStreamCreateWithFlags(s.out(), flags), what);
  return s;
}

DeviceBuffer device_alloc(std::size_t bytes, const std::string& what) {
  DeviceBuffer b;
  check(cudaMalloc(b.out(), bytes), what);
  return b;
}

}  // namespace hzp::runtime::cuda
