// Builds one Program of a Schedule: hands out op ids in host issue order,
// event ids, and per-group collective sequence numbers; every op gets the
// role and classes its caller states.
#pragma once

#include <fmt/format.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/step_graph.hpp"
#include "schedule/schedule.hpp"

namespace hzp::plan {

class ProgramBuilder {
 public:
  /// Without `op_names`, every op gets an empty name (LowerOptions::names).
  ProgramBuilder(int id, std::string name, std::vector<int> ranks, bool op_names = true);

  /// A host thread named `name` that costs what `costs` states (its id and
  /// name are ignored).
  int add_thread(const std::string& name, const core::Thread& costs);
  int add_stream(const std::string& name, core::StreamKind kind, int thread);
  /// Room for `ops` ops on `stream`, how many the caller expects it to hold;
  /// past them the stream grows an eighth of that at a time, not by doubling.
  void reserve(int stream, std::size_t ops);

  /// A kernel of the step graph: role Forward, Recompute or Backward by its
  /// phase, parameter class as the graph says.
  void compute(int stream, const models::GraphOp& g, core::Dtype dtype);
  void compute(int stream, const std::string& name, core::ComputeKind kind, core::Flops flops, core::Bytes bytes,
               core::Dtype dtype, core::OpRole role, core::ParamClass param_class);
  void collective(int stream, const std::string& name, core::CollectiveKind kind, int group, core::Bytes bytes,
                  core::Dtype dtype, core::OpRole role, core::ParamClass param_class);
  /// Point-to-point transfer to or from `peer` (a global rank); `seq` counts
  /// transfers per ordered (sender, receiver) pair.
  void send(int stream, const std::string& name, int peer, int seq, core::Bytes bytes, core::OpRole role);
  void recv(int stream, const std::string& name, int peer, int seq, core::Bytes bytes, core::OpRole role);
  void alloc(int stream, const std::string& buffer, core::Bytes bytes, core::BufferClass buffer_class);
  /// Frees a buffer this builder allocated (with the class it was allocated as).
  void free(int stream, const std::string& buffer, core::Bytes bytes);
  /// Records a new event on `stream` and returns its id.
  int record(int stream, const std::string& name);
  void wait(int stream, int event, const std::string& name);
  /// The stream's host thread blocks until `event` has happened (cudaEventSynchronize).
  void sync(int stream, int event, const std::string& name);

  /// An op's name, formatted only where ops carry names (LowerOptions::names;
  /// buffer names are always needed).
  template <class... Args>
  [[nodiscard]] std::string op_name(fmt::format_string<Args...> f, Args&&... args) const {
    return op_names_ ? fmt::format(f, std::forward<Args>(args)...) : std::string();
  }

  /// Pinned host memory each rank of the program holds for offloaded state.
  void set_host_bytes(core::Bytes bytes) { prog_.host_bytes = bytes; }
  [[nodiscard]] core::Program take() { return std::move(prog_); }

 private:
  /// Appends an op of `kind` carrying `payload` to the stream, its id the
  /// next in issue order, built in place.
  template <class Payload>
  void push(int stream, core::OpKind kind, const std::string& name, core::OpRole role, core::ParamClass param_class,
            Payload&& payload) {
    std::vector<core::Op>& ops = room_for_one(stream);
    ops.emplace_back(next_id_++, kind, op_names_ ? name : std::string(), role, param_class,
                     std::forward<Payload>(payload));
  }
  /// The stream's ops, with room for one more (past reserve()'s estimate, an
  /// eighth of it more at a time).
  std::vector<core::Op>& room_for_one(int stream);
  void event_op(int stream, core::OpKind kind, int event, const std::string& name);
  void transfer(int stream, core::OpKind kind, const std::string& name, int peer, int seq, core::Bytes bytes,
                core::OpRole role);
  core::Program prog_;
  bool op_names_ = true;
  int next_id_ = 0;
  int next_event_ = 0;
  std::vector<std::size_t> expected_;                             // per stream, reserve()'s ops (0: none)
  std::map<int, int> next_seq_;                                   // group -> next sequence number
  std::unordered_map<std::string, core::BufferClass> allocated_;  // buffer -> class, of every alloc
};

}  // namespace hzp::plan
