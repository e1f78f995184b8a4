// ProgramBuilder (see program_builder.hpp).
#include "plan/program_builder.hpp"

namespace hzp::plan {

using core::Op;
using core::OpKind;

ProgramBuilder::ProgramBuilder(int id, std::string name, std::vector<int> ranks) {
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
  return id;
}

Op& ProgramBuilder::push(int stream, Op op) {
  op.id = next_id_++;
  auto& ops = prog_.streams.at(static_cast<std::size_t>(stream)).ops;
  ops.push_back(std::move(op));
  return ops.back();
}

void ProgramBuilder::compute(int stream, const models::GraphOp& g, core::Dtype dtype) {
  Op op = Op::of(OpKind::Compute);
  op.name = g.name;
  op.payload = Op::Compute{g.kind, g.flops, g.bytes, dtype, g.gemm, g.kernels, g.attention_kernel};
  op.role = g.phase == models::Phase::Forward     ? core::OpRole::Forward
            : g.phase == models::Phase::Recompute ? core::OpRole::Recompute
                                                  : core::OpRole::Backward;
  op.param_class = g.param_class;
  push(stream, std::move(op));
}

void ProgramBuilder::compute(int stream, const std::string& name, core::ComputeKind kind, core::Flops flops,
                             core::Bytes bytes, core::Dtype dtype, core::OpRole role, core::ParamClass param_class) {
  Op op = Op::of(OpKind::Compute);
  op.name = name;
  op.role = role;
  op.param_class = param_class;
  op.payload = Op::Compute{kind, flops, bytes, dtype, std::nullopt, 1, std::nullopt};
  push(stream, std::move(op));
}

void ProgramBuilder::collective(int stream, const std::string& name, core::CollectiveKind kind, int group,
                                core::Bytes bytes, core::Dtype dtype, core::OpRole role, core::ParamClass param_class) {
  Op op = Op::of(OpKind::Collective);
  op.name = name;
  op.role = role;
  op.param_class = param_class;
  op.payload = Op::Collective{kind, group, next_seq_[group]++, bytes, dtype};
  push(stream, std::move(op));
}

void ProgramBuilder::alloc(int stream, const std::string& buffer, core::Bytes bytes, core::BufferClass buffer_class) {
  Op op = Op::of(OpKind::Alloc);
  op.name = "alloc " + buffer;
  op.payload = Op::Buffer{buffer, buffer_class, bytes};
  allocated_[buffer] = buffer_class;
  push(stream, std::move(op));
}

void ProgramBuilder::free(int stream, const std::string& buffer, core::Bytes bytes) {
  Op op = Op::of(OpKind::Free);
  op.name = "free " + buffer;
  op.payload = Op::Buffer{buffer, allocated_.at(buffer), bytes};
  push(stream, std::move(op));
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
  Op op = Op::of(kind);
  op.name = name;
  op.event().id = event;
  push(stream, std::move(op));
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
  Op op = Op::of(kind);
  op.name = name;
  op.role = role;
  op.payload = Op::Transfer{peer, seq, bytes};
  push(stream, std::move(op));
}

}  // namespace hzp::plan
