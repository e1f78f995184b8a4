// ProgramBuilder (see program_builder.hpp).
#include "plan/program_builder.hpp"

namespace hzp::plan {

using core::Op;
using core::OpKind;

ProgramBuilder::ProgramBuilder(int id, std::string name, std::vector<int> ranks, bool op_names) : op_names_(op_names) {
  prog_.id = id;
  prog_.name = std::move(name);
  prog_.ranks = std::move(ranks);
}

int ProgramBuilder::add_thread(const std::string& name, const core::Thread& costs) {
  core::Thread t = costs;
  t.id = static_cast<int>(prog_.threads.size());
  t.name = name;
  prog_.threads.push_back(std::move(t));
  return prog_.threads.back().id;
}

int ProgramBuilder::add_stream(const std::string& name, core::StreamKind kind, int thread) {
  int id = static_cast<int>(prog_.streams.size());
  prog_.streams.push_back(core::Stream{id, name, kind, thread, {}});
  expected_.push_back(0);
  return id;
}

void ProgramBuilder::reserve(int stream, std::size_t ops) {
  const auto s = static_cast<std::size_t>(stream);
  // A sixteenth to spare: estimates run up to a few percent short (full
  // recomputation, interleaving), and growing past one moves every op once.
  ops += ops / 16;
  prog_.streams.at(s).ops.reserve(ops);
  expected_.at(s) = ops;
}

std::vector<Op>& ProgramBuilder::room_for_one(int stream) {
  const auto s = static_cast<std::size_t>(stream);
  std::vector<Op>& ops = prog_.streams.at(s).ops;
  if (ops.size() == ops.capacity() && expected_[s] > 0) ops.reserve(ops.size() + expected_[s] / 8 + 1);
  return ops;
}

void ProgramBuilder::compute(int stream, const models::GraphOp& g, core::Dtype dtype) {
  const core::OpRole role = g.phase == models::Phase::Forward     ? core::OpRole::Forward
                            : g.phase == models::Phase::Recompute ? core::OpRole::Recompute
                                                                  : core::OpRole::Backward;
  push(stream, OpKind::Compute, g.name, role, g.param_class,
       Op::Compute{g.kind, g.flops, g.bytes, dtype, g.gemm, g.kernels, g.attention_kernel});
}

void ProgramBuilder::compute(int stream, const std::string& name, core::ComputeKind kind, core::Flops flops,
                             core::Bytes bytes, core::Dtype dtype, core::OpRole role, core::ParamClass param_class) {
  push(stream, OpKind::Compute, name, role, param_class,
       Op::Compute{kind, flops, bytes, dtype, std::nullopt, 1, std::nullopt});
}

void ProgramBuilder::collective(int stream, const std::string& name, core::CollectiveKind kind, int group,
                                core::Bytes bytes, core::Dtype dtype, core::OpRole role, core::ParamClass param_class) {
  push(stream, OpKind::Collective, name, role, param_class,
       Op::Collective{kind, group, next_seq_[group]++, bytes, dtype});
}

void ProgramBuilder::alloc(int stream, const std::string& buffer, core::Bytes bytes, core::BufferClass buffer_class) {
  allocated_[buffer] = buffer_class;
  push(stream, OpKind::Alloc, op_names_ ? "alloc " + buffer : std::string(), core::OpRole::Other,
       core::ParamClass::None, Op::Buffer{buffer, buffer_class, bytes});
}

void ProgramBuilder::free(int stream, const std::string& buffer, core::Bytes bytes) {
  push(stream, OpKind::Free, op_names_ ? "free " + buffer : std::string(), core::OpRole::Other, core::ParamClass::None,
       Op::Buffer{buffer, allocated_.at(buffer), bytes});
}

int ProgramBuilder::record(int stream, const std::string& name) {
  const int event = next_event_++;
  event_op(stream, OpKind::Record, event, name);
  return event;
}

void ProgramBuilder::wait(int stream, int event, const std::string& name) {
  event_op(stream, OpKind::Wait, event, name);
}

void ProgramBuilder::sync(int stream, int event, const std::string& name) {
  event_op(stream, OpKind::Sync, event, name);
}

void ProgramBuilder::event_op(int stream, core::OpKind kind, int event, const std::string& name) {
  push(stream, kind, name, core::OpRole::Other, core::ParamClass::None, Op::Event{event});
}

void ProgramBuilder::send(int stream, const std::string& name, int peer, int seq, core::Bytes bytes,
                          core::OpRole role) {
  transfer(stream, OpKind::Send, name, peer, seq, bytes, role);
}

void ProgramBuilder::recv(int stream, const std::string& name, int peer, int seq, core::Bytes bytes,
                          core::OpRole role) {
  transfer(stream, OpKind::Recv, name, peer, seq, bytes, role);
}

void ProgramBuilder::transfer(int stream, core::OpKind kind, const std::string& name, int peer, int seq,
                              core::Bytes bytes, core::OpRole role) {
  push(stream, kind, name, role, core::ParamClass::None, Op::Transfer{peer, seq, bytes});
}

}  // namespace hzp::plan
