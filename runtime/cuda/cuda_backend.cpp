// The CUDA backend (see cuda_backend.hpp): device::DeviceBackend on CudaApi.
#include "runtime/cuda/cuda_backend.hpp"

#include "runtime/cuda/cuda_api.hpp"

namespace hzp::runtime::cuda {

CudaBackend::CudaBackend(const core::Schedule& s, const RankPlan& plan, const cost::PerfModel& pm, Communicators* comms,
                         CudaOptions o)
    : api_(std::make_unique<CudaApi>()) {
  device::BackendOptions b;
  b.device = o.device;
  b.emulate_collectives = o.emulate_collectives;
  b.nccl_channels = o.nccl_channels;
  b.watchdog = o.watchdog;
  b_ = std::make_unique<device::DeviceBackend>(*api_, s, plan, pm, comms ? &comms->comms() : nullptr, b);
}

CudaBackend::~CudaBackend() = default;

}  // namespace hzp::runtime::cuda
