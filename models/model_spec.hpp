// ModelSpec: the architecture of a decoder-only transformer (dense, MoE, MLA),
// read strictly from versioned JSON; parameter counts and the model-FLOPs
// formula that MFU is quoted against.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/names.hpp"
#include "core/units.hpp"

namespace hzp::models {

inline constexpr int kModelSchemaVersion = 1;
/// Larger models are rejected at parse time (about 10,000x today's largest),
/// which keeps every derived count exact in 64-bit integers.
inline constexpr double kMaxModelParams = 1e16;

enum class FfnActivation { SwiGlu, Gelu };
enum class NormKind { RmsNorm, LayerNorm };
enum class PositionEmbedding { Rope, Learned };
/// Their names in model files (read and written).
inline constexpr core::Names<FfnActivation, 2> kFfnActivations{
    {{FfnActivation::SwiGlu, "swiglu"}, {FfnActivation::Gelu, "gelu"}}};
inline constexpr core::Names<NormKind, 2> kNormKinds{
    {{NormKind::RmsNorm, "rmsnorm"}, {NormKind::LayerNorm, "layernorm"}}};
inline constexpr core::Names<PositionEmbedding, 2> kPositionEmbeddings{
    {{PositionEmbedding::Rope, "rope"}, {PositionEmbedding::Learned, "learned"}}};

/// Mixture-of-Experts FFN, used by every layer after the first `dense_layers`.
struct MoeSpec {
  int experts = 0;
  int top_k = 0;
  std::int64_t expert_ffn_hidden = 0;
  int shared_experts = 0;
  std::int64_t shared_expert_ffn_hidden = 0;
  int dense_layers = 0;          // leading layers with a dense FFN of `ffn_hidden`
  double capacity_factor = 1.0;  // tokens per expert = ceil(cf · tokens · top_k / experts)
};

/// Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and KV projections.
struct MlaSpec {
  std::int64_t q_lora_rank = 0;  // 0: Q projected directly from the hidden state
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

struct ModelSpec {
  std::string name;
  std::string source;  // where the figures come from
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // grouped-query attention: heads sharing one K/V head = heads / kv_heads
  std::int64_t head_dim = 0;
  std::int64_t ffn_hidden = 0;
  FfnActivation ffn_activation = FfnActivation::SwiGlu;
  std::int64_t vocab = 0;
  bool tied_embeddings = false;
  NormKind norm = NormKind::RmsNorm;
  bool qk_norm = false;
  bool bias = false;     // linear layers carry biases (GPT-2/3)
  bool dropout = false;  // dropout after attention probabilities and both residual branches (GPT-3)
  PositionEmbedding position_embedding = PositionEmbedding::Rope;
  std::int64_t max_seq_len = 0;
  std::optional<MoeSpec> moe;
  std::optional<MlaSpec> mla;

  [[nodiscard]] bool is_moe_layer(int layer) const { return moe && layer >= moe->dense_layers; }
  /// Width of a query/key head (MLA: no-PE + RoPE parts) and of a value head.
  [[nodiscard]] std::int64_t qk_head_dim() const {
    return mla ? mla->qk_nope_head_dim + mla->qk_rope_head_dim : head_dim;
  }
  [[nodiscard]] std::int64_t v_head_dim() const { return mla ? mla->v_head_dim : head_dim; }
};

/// Parses a ModelSpec; errors name `file` and the key.
[[nodiscard]] ModelSpec model_from_json(const std::string& text, const std::string& file);

/// Loads a catalog entry by name, or a JSON file when `name_or_path` ends in
/// ".json". An unknown name is an InputError listing the catalog.
[[nodiscard]] ModelSpec load_model(const std::string& name_or_path);
/// The JSON text `load_model` would parse, and the name it reports errors under.
struct SpecText {
  std::string text;
  std::string file;
};
[[nodiscard]] SpecText model_text(const std::string& name_or_path);
[[nodiscard]] std::vector<std::string> model_catalog_names();

/// Parameter counts. `total` counts every weight once (a tied embedding once);
/// `active` counts what one token's forward pass uses: attention, top-k routed
/// plus shared experts, router, norms, and both the input embedding and the
/// output projection (the convention under which Mixtral's 12.9B and
/// Qwen3-30B-A3B's 3.3B are quoted).
struct ParamCounts {
  std::int64_t total = 0;
  std::int64_t active = 0;
};
[[nodiscard]] ParamCounts count_params(const ModelSpec& m);

/// Parameters of one unit (what FSDP wraps and gathers as one piece).
[[nodiscard]] std::int64_t attention_params(const ModelSpec& m);
[[nodiscard]] std::int64_t ffn_params(const ModelSpec& m, int layer);         // all experts
[[nodiscard]] std::int64_t ffn_active_params(const ModelSpec& m, int layer);  // routed top-k + shared
[[nodiscard]] std::int64_t layer_params(const ModelSpec& m, int layer);
[[nodiscard]] std::int64_t embedding_params(const ModelSpec& m);  // token (+ learned position) table
[[nodiscard]] std::int64_t head_params(const ModelSpec& m);       // final norm + output projection if untied

/// Model FLOPs of one sequence of `seq_len` tokens, forward and backward, in the
/// convention of Megatron-LM and NVIDIA's recipes (../shared/reference/hardware.md):
///   6 · (active matmul parameters, output projection included, input embedding excluded)
///   + 6 · L · s · H · (d_qk + d_v)    (attention scores and context, causal mask NOT exploited)
/// per token, times s. For Llama-style GQA this is seq · (12·L·h²·(1 + G/H + s/h) + 18·L·F·h + 6·V·h).
/// No recomputation is counted: this is the numerator of MFU, not HFU.
[[nodiscard]] core::Flops model_flops_per_sequence(const ModelSpec& m, std::int64_t seq_len);

}  // namespace hzp::models
