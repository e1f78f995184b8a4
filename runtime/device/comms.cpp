// A rank's NCCL communicators over DeviceApi (see backend.hpp).
#include <fmt/format.h>

#include <exception>
#include <thread>

#include "runtime/device/backend.hpp"

namespace hzp::runtime::device {

DeviceComms::DeviceComms(DeviceApi& api, const core::Schedule& s, int rank, int world, const std::string& id,
                         CommOptions o)
    : api_(api), o_(std::move(o)), rank_(rank), plan_(plan_comms(s, rank)), uncaught_(std::uncaught_exceptions()) {
  try {
    // Non-blocking communicators (NCCL: ncclConfig_t.blocking = 0): init and
    // splits return at once and comm_status is polled with a timeout, so a
    // rank whose peer never arrives fails instead of hanging.
    comms_.push_back(api_.comm_init(world, id, rank, "ncclCommInitRankConfig (world)"));
    wait_ready(comms_.front(), "ncclCommInitRankConfig (world)");
    // ncclCommSplit is collective over its parent: every rank makes every
    // split of the plan, in the plan's order, NOCOLOR where not a member.
    for (const CommSplit& split : plan_.splits) {
      const std::string what = "ncclCommSplit (" + split.what + ")";
      comms_.push_back(api_.comm_split(comms_.front(), split.colour, rank, what));
      wait_ready(comms_.front(), what);
      if (comms_.back() != nullptr) wait_ready(comms_.back(), what);
    }
    stream_ = api_.stream_create("barrier stream");
    device_buf_ = api_.malloc_device(sizeof(double), "barrier buffer");
    host_buf_ = api_.malloc_host(sizeof(double), "barrier host buffer");
  } catch (...) {
    failed_ = true;
    release();
    throw;
  }
}

DeviceComms::~DeviceComms() {
  if (std::uncaught_exceptions() > uncaught_) failed_ = true;
  release();
}

void DeviceComms::release() {
  if (failed_) abort();
  if (!aborted_) {
    for (Handle c : comms_) {
      if (c != nullptr) api_.comm_destroy(c);
    }
  }
  comms_.clear();
  if (host_buf_ != nullptr) api_.free_host(std::exchange(host_buf_, nullptr));
  if (device_buf_ != nullptr) api_.free_device(std::exchange(device_buf_, nullptr));
  if (stream_ != nullptr) api_.stream_destroy(std::exchange(stream_, nullptr));
}

void DeviceComms::wait_ready(Handle comm, const std::string& what) {
  const Clock::time_point deadline = o_.now() + o_.timeout;
  std::string error;
  for (;;) {
    const CommStatus status = api_.comm_status(comm, error);
    if (status == CommStatus::Ready) return;
    if (status == CommStatus::Failed) {
      failed_ = true;
      throw RunError(fmt::format("rank {}: {}: NCCL error: {}", rank_, what, error));
    }
    if (aborted_) throw RunError(fmt::format("rank {}: {}: aborted", rank_, what));
    if (o_.now() > deadline) {
      failed_ = true;
      throw RunError(fmt::format("rank {}: {}: not done after {} ms (a peer did not take part?)", rank_, what,
                                 o_.timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void DeviceComms::call(Handle comm, const std::string& what, const std::function<void()>& fn) {
  const std::lock_guard lock(nccl_);
  if (aborted_) throw RunError(fmt::format("rank {}: {}: communicators aborted", rank_, what));
  try {
    fn();
    wait_ready(comm, what);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void DeviceComms::abort() {
  // ncclCommAbort frees a communicator without waiting for its pending work
  // (NCCL's fault-tolerance path); taken under the NCCL lock, so no call is
  // in flight on the device, and the handles stay where threads read them.
  const std::lock_guard lock(nccl_);
  if (aborted_.exchange(true)) return;
  for (Handle c : comms_) {
    if (c != nullptr) api_.comm_abort(c);
  }
}

std::string DeviceComms::async_error() {
  std::string error;
  for (Handle c : comms_) {
    if (c != nullptr && !aborted_ && api_.comm_status(c, error) == CommStatus::Failed) return error;
  }
  return "";
}

double DeviceComms::world_max(double v) {
  // cudaMalloc/cudaFree and blocking cudaMemcpy synchronize the device
  // (CUDA programming guide, implicit synchronization), which deadlocks with
  // another rank's thread of this process waiting in NCCL: only async calls
  // on this rank's own stream here, then a polled wait with a timeout.
  *static_cast<double*>(host_buf_) = v;
  api_.copy_async(device_buf_, host_buf_, sizeof v, stream_, "barrier copy");
  call(world(), "barrier all-reduce",
       [&] { api_.all_reduce_max(device_buf_, 1, CommType::F64, world(), stream_, "barrier all-reduce (max)"); });
  api_.copy_async(host_buf_, device_buf_, sizeof v, stream_, "barrier copy back");
  const Clock::time_point deadline = o_.now() + o_.timeout;
  while (!api_.stream_done(stream_, "barrier")) {
    if (aborted_ || o_.now() > deadline) {
      failed_ = true;
      throw RunError(fmt::format("rank {}: barrier: not done after {} ms", rank_, o_.timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return *static_cast<double*>(host_buf_);
}

}  // namespace hzp::runtime::device
