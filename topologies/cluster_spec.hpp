// ClusterSpec: a device profile, the node's scale-up domains, the scale-out
// network (NICs, rails, fat-tree tiers), read strictly from versioned JSON.
// Every figure in the catalog names its public source.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/names.hpp"
#include "schedule/schedule.hpp"

namespace hzp::topologies {

inline constexpr int kClusterSchemaVersion = 2;

/// Efficiency as a function of a size, interpolated linearly in log(size) and
/// clamped at the ends. Points are (size, efficiency), sizes ascending.
struct EfficiencyCurve {
  std::vector<std::pair<double, double>> points;
  [[nodiscard]] double at(double size) const;
  [[nodiscard]] double max() const;
};

struct DeviceProfile {
  std::string name;
  /// CUDA compute capability (8.0 A100, 9.0 H100/H200, 10.0 B200/GB200):
  /// which generation's caps NCCL's tuning applies.
  double compute_capability = 9.0;
  std::map<core::Dtype, double> peak_tflops;  // dense, per dtype
  double hbm_GiB = 0;
  double hbm_GBps = 0;
  double launch_latency_us = 0;             // host cost to enqueue one kernel
  double collective_launch_latency_us = 0;  // host cost to enqueue one NCCL collective or send/recv
  EfficiencyCurve gemm;                     // fraction of peak vs cube root of m·n·k
  /// FP8 GEMMs' fraction of the fp8 peak vs the same size (public measured
  /// maxima); an FP8 GEMM never runs slower than the bf16 one of its shape,
  /// and below the curve's first size at the bf16 rate. Empty: FP8 GEMMs run
  /// at `gemm`'s fractions of the fp8 peak.
  EfficiencyCurve gemm_fp8;
  /// How GEMMs fill the device: its SMs and the output tiles its GEMM library
  /// picks from (each with its per-SM rate relative to the largest). A GEMM
  /// costs the curves' rate at its size times its fill over the fill of the
  /// square GEMM of that size (the curves were measured on squares), never
  /// above the curve's maximum; see PerfModel::gemm_fill. Absent: the curves
  /// alone.
  struct GemmTile {
    int m = 0, n = 0;
    double relative = 1;
  };
  struct GemmTiling {
    int sms = 0;
    std::vector<GemmTile> tiles;
  };
  std::optional<GemmTiling> gemm_tiling;
  double attention_efficiency = 0;  // fused attention kernels, fraction of peak
  /// Per fused-attention kernel family ("flash2", "flash3", "cudnn"): the
  /// fraction of peak its forward and its backward reach on this device; a
  /// family not listed runs at attention_efficiency both ways.
  struct AttentionKernel {
    double forward = 0, backward = 0;
  };
  std::map<core::AttentionKernel, AttentionKernel> attention_kernels;
  double hbm_efficiency = 0;  // achievable fraction of HBM bandwidth
  /// The device's own time per bandwidth-bound kernel beyond its bytes
  /// (launch, ramp and tail: a fit of time = bytes / (HBM · hbm_efficiency)
  /// + kernel_tail over tensor sizes), charged per kernel of an element-wise,
  /// norm, embedding, loss or optimizer op. 0 where not measured. Host issue
  /// cost is apart (launch_latency_us, the stack's host.kernel_us).
  double kernel_tail_us = 0;
  /// How much longer a kernel runs while a collective's kernels share the
  /// device (SMs and HBM); 1 = no interference. Used by both engines.
  double comm_compute_slowdown = 1;
  /// Board power. `rated_W` is the limit the efficiency curves were measured
  /// under and `compute_clock_MHz` the SM clock `peak_tflops` is quoted at;
  /// each cap is a lower limit with the SM clock a power-saturating
  /// tensor-core GEMM was measured to hold there. `limit_W` is the limit this
  /// run's devices are held to (the what-if --power-limit): the rated one or
  /// a listed cap, nothing in between (no clock is extrapolated).
  /// `sustained_fraction`: the efficiency curves are short-burst maxima; a
  /// training run keeps tensor-core work going for hours, and at the rated
  /// limit it holds this fraction of the burst rate (the board at its power
  /// limit lowers the clock); 1 where nothing was measured.
  struct PowerCap {
    double limit_W = 0, tensor_clock_MHz = 0;
  };
  struct Power {
    double rated_W = 0, limit_W = 0, compute_clock_MHz = 0;
    double sustained_fraction = 1;
    std::vector<PowerCap> caps;
  };
  std::optional<Power> power;
  /// Tensor-core work (GEMMs, fused attention) runs at this fraction of the
  /// efficiency curves' rate: the sustained fraction at the rated limit, and
  /// under a cap that times the cap's tensor clock over the compute clock
  /// (throughput follows the SM clock; the cap's clock ratio is taken to hold
  /// for the sustained state too).
  double tensor_clock_scale = 1;
  /// The device's share of its node's host memory, GiB (node.host.memory_GiB
  /// / node.devices, set by the reader; 0: the node's host is not described).
  /// Step metrics check offloaded state against it, as HBM against hbm_GiB.
  double host_memory_GiB_per_device = 0;
};

enum class ScaleUpKind { NvSwitch, FullMesh };
inline constexpr core::Names<ScaleUpKind, 2> kScaleUpKinds{
    {{ScaleUpKind::NvSwitch, "nvswitch"}, {ScaleUpKind::FullMesh, "full_mesh"}}};
/// The link classes NCCL's latency table distinguishes.
enum class LinkClass { NvLink, Pci, Net };
/// The ones a scale-up domain's links may be, by their name in cluster files.
inline constexpr core::Names<LinkClass, 2> kScaleUpLinks{{{LinkClass::NvLink, "nvlink"}, {LinkClass::Pci, "pcie"}}};

/// Devices joined by NVLink-class links. NVSwitch: any-to-any at `bw_GBps` per
/// device and direction. Full mesh: one link per device pair, the device's
/// `bw_GBps` split over its peers, so collectives that use every link at once
/// (direct all-gather, all-to-all) see the whole `bw_GBps`.
struct ScaleUp {
  ScaleUpKind kind = ScaleUpKind::NvSwitch;
  LinkClass link = LinkClass::NvLink;  // which of NCCL's latency classes its steps pay
  int domain_devices = 0;
  double bw_GBps = 0;  // per device, per direction
  /// The fraction of bw_GBps a Simple-protocol ring all-gather or
  /// reduce-scatter reaches at large sizes (its measured plateau).
  double ring_efficiency = 1;
  /// NVLink SHARP all-reduce bus bandwidth as a fraction of bw_GBps (it
  /// reduces in the switch, so it may exceed 1); 0 where the switch lacks it.
  double nvls_efficiency = 0;
  /// A measured Simple ring step latency replacing NCCL's table entry for
  /// this link class (the other protocols scale with it); unset: NCCL's.
  std::optional<double> step_latency_us;
};

struct FabricTier {
  std::string name;
  int radix = 0;                // ports per switch
  double oversubscription = 1;  // down:up port ratio at this tier's switches
  double hop_latency_us = 0;
};

struct ScaleOut {
  int nics_per_node = 0;
  double nic_Gbps = 0;
  bool rail_optimized = true;  // NIC i of every node on rail i's leaf switches
  /// The fraction of the NIC bandwidth a Simple-protocol ring reaches at
  /// large sizes (its measured plateau).
  double ring_efficiency = 1;
  /// A measured Simple ring step latency across the leaf replacing NCCL's NET
  /// entry (the other protocols scale with it); unset: NCCL's.
  std::optional<double> step_latency_us;
  /// A step across the leaf at each protocol (LL, LL128, Simple), for every
  /// algorithm alike: a fabric whose step is dominated by the network's own
  /// latency rather than NCCL's protocol (AWS EFA, as aws-ofi-nccl's tuner
  /// models it). Unset: NCCL's NET row (scaled by step_latency_us).
  std::optional<std::array<double, 3>> step_latency_by_protocol_us;
  /// The latency the network plugin reports to NCCL (ncclNetProperties_t
  /// .latency). NCCL's tuner adds it to every step across the fabric, twice
  /// for Simple (tuning.cc, since 2.12.7): it moves NCCL's choice of
  /// algorithm and protocol, not the time a step takes. NCCL's InfiniBand
  /// and socket transports report 0.
  double plugin_latency_us = 0;
  std::vector<FabricTier> tiers;  // leaf first
};

/// The host side of a node, for offload (ZeRO-Offload, Ren et al. 2021,
/// arXiv:2101.06840): each device's link to host memory (PCIe or NVLink-C2C),
/// the node's host memory and the bandwidth its CPUs stream it at (CPU Adam).
struct HostSide {
  double link_GBps = 0;    // per device, per direction
  double memory_GiB = 0;   // per node
  double memory_GBps = 0;  // per node, shared by its devices' CPU optimizer steps
};

struct ClusterSpec {
  std::string name;
  std::string source;
  DeviceProfile device;
  int devices_per_node = 0;
  ScaleUp scale_up;
  ScaleOut scale_out;
  /// node.host; unset (absent or null): offload is not available.
  std::optional<HostSide> host;
  std::optional<double> price_per_device_hour;  // USD

  /// NIC bandwidth available to one device, GB/s.
  [[nodiscard]] double nic_GBps_per_device() const {
    return core::Gbps_to_GBps(scale_out.nics_per_node * scale_out.nic_Gbps) / devices_per_node;
  }
  [[nodiscard]] core::Bandwidth nic_bandwidth_per_device() const {
    return core::Bandwidth::from_GBps(nic_GBps_per_device());
  }
  /// One device's scale-up bandwidth per direction.
  [[nodiscard]] core::Bandwidth scale_up_bandwidth() const { return core::Bandwidth::from_GBps(scale_up.bw_GBps); }
};

[[nodiscard]] ClusterSpec cluster_from_json(const std::string& text, const std::string& file);
/// A catalog name or a .json file.
[[nodiscard]] ClusterSpec load_cluster(const std::string& name_or_path);
/// The JSON text `load_cluster` would parse ({text, file name for errors}).
[[nodiscard]] std::pair<std::string, std::string> cluster_text(const std::string& name_or_path);
[[nodiscard]] std::vector<std::string> cluster_catalog_names();

}  // namespace hzp::topologies
