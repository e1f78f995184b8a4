// The Schedule's enums by name: the one table each that its reader, its
// writer and every printed output use (core::Names).
#pragma once

#include "core/names.hpp"
#include "schedule/schedule.hpp"

namespace hzp::core {

inline constexpr Names<Dtype, 6> kDtype{{{Dtype::Bf16, "bf16"},
                                         {Dtype::Fp16, "fp16"},
                                         {Dtype::Fp32, "fp32"},
                                         {Dtype::Fp8, "fp8"},
                                         {Dtype::Int8, "int8"},
                                         {Dtype::Int4, "int4"}}};
inline constexpr Names<GroupKind, kGroupKinds> kGroupKind{{{GroupKind::World, "world"},
                                                           {GroupKind::DpShard, "dp_shard"},
                                                           {GroupKind::DpReplica, "dp_replica"},
                                                           {GroupKind::Tp, "tp"},
                                                           {GroupKind::Pp, "pp"},
                                                           {GroupKind::Cp, "cp"},
                                                           {GroupKind::Ep, "ep"},
                                                           {GroupKind::Edp, "edp"},
                                                           {GroupKind::DpGrad, "dp_grad"},
                                                           {GroupKind::DpOptim, "dp_optim"},
                                                           {GroupKind::DpRegather, "dp_regather"},
                                                           {GroupKind::EdpGrad, "edp_grad"},
                                                           {GroupKind::EdpOptim, "edp_optim"},
                                                           {GroupKind::EdpReplica, "edp_replica"},
                                                           {GroupKind::EdpRegather, "edp_regather"},
                                                           {GroupKind::DpAll, "dp_all"},
                                                           {GroupKind::EdpAll, "edp_all"},
                                                           {GroupKind::Etp, "etp"},
                                                           {GroupKind::Ulysses, "ulysses"},
                                                           {GroupKind::PpMirror, "pp_mirror"}}};
inline constexpr Names<OpKind, 9> kOpKind{{{OpKind::Compute, "compute"},
                                           {OpKind::Collective, "collective"},
                                           {OpKind::Send, "send"},
                                           {OpKind::Recv, "recv"},
                                           {OpKind::Alloc, "alloc"},
                                           {OpKind::Free, "free"},
                                           {OpKind::Record, "record"},
                                           {OpKind::Wait, "wait"},
                                           {OpKind::Sync, "sync"}}};
inline constexpr Names<ComputeKind, 9> kComputeKind{{{ComputeKind::Gemm, "gemm"},
                                                     {ComputeKind::Attention, "attention"},
                                                     {ComputeKind::Elementwise, "elementwise"},
                                                     {ComputeKind::Norm, "norm"},
                                                     {ComputeKind::Embedding, "embedding"},
                                                     {ComputeKind::Loss, "loss"},
                                                     {ComputeKind::Optimizer, "optimizer"},
                                                     {ComputeKind::HostCopy, "host_copy"},
                                                     {ComputeKind::HostOptimizer, "host_optimizer"}}};
inline constexpr Names<CollectiveKind, 5> kCollectiveKind{{{CollectiveKind::AllGather, "all_gather"},
                                                           {CollectiveKind::ReduceScatter, "reduce_scatter"},
                                                           {CollectiveKind::AllReduce, "all_reduce"},
                                                           {CollectiveKind::AllToAll, "all_to_all"},
                                                           {CollectiveKind::Broadcast, "broadcast"}}};
inline constexpr Names<StreamKind, 6> kStreamKind{{{StreamKind::Compute, "compute"},
                                                   {StreamKind::ParamGather, "param_gather"},
                                                   {StreamKind::GradReduce, "grad_reduce"},
                                                   {StreamKind::Optimizer, "optimizer"},
                                                   {StreamKind::Comm, "comm"},
                                                   {StreamKind::Offload, "offload"}}};

inline constexpr Names<OpRole, 11> kOpRole{{{OpRole::Forward, "forward"},
                                            {OpRole::Backward, "backward"},
                                            {OpRole::Recompute, "recompute"},
                                            {OpRole::ModelParallel, "model_parallel"},
                                            {OpRole::Pipeline, "pipeline"},
                                            {OpRole::ParamGather, "param_gather"},
                                            {OpRole::GradReduce, "grad_reduce"},
                                            {OpRole::GradAccumulate, "grad_accumulate"},
                                            {OpRole::Optimizer, "optimizer"},
                                            {OpRole::ZeroGrads, "zero_grads"},
                                            {OpRole::Other, "other"}}};
inline constexpr Names<ParamClass, 3> kParamClass{
    {{ParamClass::None, "none"}, {ParamClass::Dense, "dense"}, {ParamClass::Expert, "expert"}}};
inline constexpr Names<BufferClass, 10> kBufferClass{{{BufferClass::Params, "params"},
                                                      {BufferClass::Grads, "grads"},
                                                      {BufferClass::OptimizerStates, "optimizer_states"},
                                                      {BufferClass::NcclBuffers, "nccl_buffers"},
                                                      {BufferClass::GatheredPool, "pool.gathered"},
                                                      {BufferClass::GradBucketPool, "pool.grad_buckets"},
                                                      {BufferClass::Gathered, "gathered"},
                                                      {BufferClass::GradBucket, "grad_buckets"},
                                                      {BufferClass::Activations, "act"},
                                                      {BufferClass::Recomputed, "recomputed"}}};

}  // namespace hzp::core
