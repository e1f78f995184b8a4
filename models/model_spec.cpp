// ModelSpec parsing, the model catalog, parameter counts and model FLOPs.
#include "models/model_spec.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "models/catalog_data.hpp"

namespace hzp::models {
namespace {

using core::choose;
using core::StrictObject;

std::int64_t norm_params(const ModelSpec& m, std::int64_t width) {
  return m.norm == NormKind::LayerNorm ? 2 * width : width;
}

// Weights of the attention projections (what the GEMMs multiply by).
std::int64_t attention_matmul_params(const ModelSpec& m) {
  const std::int64_t h = m.hidden, H = m.heads;
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    std::int64_t q =
        a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank * H * m.qk_head_dim() : h * H * m.qk_head_dim();
    std::int64_t kv =
        h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * H * (a.qk_nope_head_dim + a.v_head_dim);
    return q + kv + H * a.v_head_dim * h;
  }
  const std::int64_t d = m.head_dim;
  return h * (H + 2 * m.kv_heads) * d + H * d * h;
}

std::int64_t ffn_matmul(const ModelSpec& m, std::int64_t f) {
  return (m.ffn_activation == FfnActivation::SwiGlu ? 3 : 2) * m.hidden * f;
}

std::int64_t ffn_bias(const ModelSpec& m, std::int64_t f) { return m.bias ? f + m.hidden : 0; }

std::int64_t router_params(const ModelSpec& m) { return m.moe ? m.hidden * m.moe->experts : 0; }

// Matmul weights one token uses in a layer's FFN (top-k routed + shared, or dense).
std::int64_t ffn_active_matmul(const ModelSpec& m, int layer) {
  if (!m.is_moe_layer(layer)) return ffn_matmul(m, m.ffn_hidden);
  const MoeSpec& e = *m.moe;
  return e.top_k * ffn_matmul(m, e.expert_ffn_hidden) + e.shared_experts * ffn_matmul(m, e.shared_expert_ffn_hidden) +
         router_params(m);
}

}  // namespace

ModelSpec model_from_json(const std::string& text, const std::string& file) {
  nlohmann::json j = core::parse_json(text, file);
  StrictObject o(j, file);
  core::require_schema_version(o, kModelSchemaVersion);
  ModelSpec m;
  m.name = o.name("name");
  m.source = o.str("source");
  m.layers = static_cast<int>(o.integer("layers", 1, 10000));
  m.hidden = o.integer("hidden", 1, 1 << 20);
  m.heads = static_cast<int>(o.integer("heads", 1, 1 << 12));
  m.kv_heads = static_cast<int>(o.integer("kv_heads", 1, 1 << 12));
  if (m.heads % m.kv_heads != 0) o.fail("kv_heads", fmt::format("expected a divisor of heads ({})", m.heads));
  m.head_dim = o.integer("head_dim", 1, 1 << 12);
  m.ffn_hidden = o.integer("ffn_hidden", 1, 1 << 22);
  m.ffn_activation = choose(o, "ffn_activation", kFfnActivations);
  m.vocab = o.integer("vocab", 1, 1 << 24);
  m.tied_embeddings = o.boolean("tied_embeddings");
  m.norm = choose(o, "norm", kNormKinds);
  m.qk_norm = o.boolean("qk_norm");
  m.bias = o.boolean("bias");
  m.dropout = o.boolean("dropout");
  m.position_embedding = choose(o, "position_embedding", kPositionEmbeddings);
  m.max_seq_len = o.integer("max_seq_len", 1, 1 << 21);
  if (auto e = o.object_or_null("moe")) {
    MoeSpec s;
    s.experts = static_cast<int>(e->integer("experts", 1, 1 << 12));
    s.top_k = static_cast<int>(e->integer("top_k", 1, s.experts));
    s.expert_ffn_hidden = e->integer("expert_ffn_hidden", 1, 1 << 22);
    s.shared_experts = static_cast<int>(e->integer("shared_experts", 0, 1 << 6));
    s.shared_expert_ffn_hidden = e->integer("shared_expert_ffn_hidden", 0, 1 << 22);
    if (s.shared_experts > 0 && s.shared_expert_ffn_hidden == 0)
      e->fail("shared_expert_ffn_hidden", "expected a positive size when shared_experts > 0");
    s.dense_layers = static_cast<int>(e->integer("dense_layers", 0, m.layers));
    s.capacity_factor = e->number("capacity_factor", 0, 1e3, true);
    e->finish();
    m.moe = s;
  }
  if (auto a = o.object_or_null("mla")) {
    MlaSpec s;
    s.q_lora_rank = a->integer("q_lora_rank", 0, 1 << 16);
    s.kv_lora_rank = a->integer("kv_lora_rank", 1, 1 << 16);
    s.qk_nope_head_dim = a->integer("qk_nope_head_dim", 1, 1 << 12);
    s.qk_rope_head_dim = a->integer("qk_rope_head_dim", 0, 1 << 12);
    s.v_head_dim = a->integer("v_head_dim", 1, 1 << 12);
    a->finish();
    m.mla = s;
  }
  o.finish();
  // Every count hzp derives (parameters, bytes, FLOPs per step) must stay far
  // inside 64-bit integers: bound the size of the model as a whole.
  const double h = static_cast<double>(m.hidden);
  double per_layer =
      4.0 * h * static_cast<double>(m.heads) * static_cast<double>(std::max(m.head_dim, m.qk_head_dim())) +
      3.0 * h * static_cast<double>(m.ffn_hidden);
  if (m.moe) {
    per_layer += 3.0 * h * static_cast<double>(m.moe->experts) * static_cast<double>(m.moe->expert_ffn_hidden) +
                 3.0 * h * m.moe->shared_experts * static_cast<double>(m.moe->shared_expert_ffn_hidden);
  }
  if (m.mla) per_layer += 2.0 * h * static_cast<double>(m.mla->q_lora_rank + m.mla->kv_lora_rank);
  const double total = per_layer * m.layers + 2.0 * h * static_cast<double>(m.vocab + m.max_seq_len);
  if (total > kMaxModelParams) {
    throw core::InputError(
        file, "layers",
        fmt::format("the model has about {:.3g} parameters; expected at most {:.0e}", total, kMaxModelParams));
  }
  return m;
}

std::vector<std::string> model_catalog_names() { return core::catalog_names(model_catalog()); }

SpecText model_text(const std::string& name_or_path) {
  auto [text, file] = core::catalog_text(model_catalog(), name_or_path, "model", "models/catalog");
  return {std::move(text), std::move(file)};
}

ModelSpec load_model(const std::string& name_or_path) {
  SpecText t = model_text(name_or_path);
  return model_from_json(t.text, t.file);
}

std::int64_t attention_params(const ModelSpec& m) {
  std::int64_t p = attention_matmul_params(m) + norm_params(m, m.hidden);  // pre-attention norm
  if (m.bias) p += m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim + m.hidden;
  if (m.qk_norm) p += 2 * m.qk_head_dim();
  if (m.mla) p += (m.mla->q_lora_rank > 0 ? m.mla->q_lora_rank : 0) + m.mla->kv_lora_rank;  // latent norms
  return p;
}

std::int64_t ffn_params(const ModelSpec& m, int layer) {
  std::int64_t p = norm_params(m, m.hidden);  // pre-FFN norm
  if (!m.is_moe_layer(layer)) return p + ffn_matmul(m, m.ffn_hidden) + ffn_bias(m, m.ffn_hidden);
  const MoeSpec& e = *m.moe;
  return p + e.experts * ffn_matmul(m, e.expert_ffn_hidden) +
         e.shared_experts * ffn_matmul(m, e.shared_expert_ffn_hidden) + router_params(m);
}

std::int64_t ffn_active_params(const ModelSpec& m, int layer) {
  std::int64_t p = norm_params(m, m.hidden) + ffn_active_matmul(m, layer);
  if (!m.is_moe_layer(layer)) p += ffn_bias(m, m.ffn_hidden);
  return p;
}

std::int64_t layer_params(const ModelSpec& m, int layer) { return attention_params(m) + ffn_params(m, layer); }

std::int64_t embedding_params(const ModelSpec& m) {
  return m.vocab * m.hidden + (m.position_embedding == PositionEmbedding::Learned ? m.max_seq_len * m.hidden : 0);
}

std::int64_t head_params(const ModelSpec& m) {
  return norm_params(m, m.hidden) + (m.tied_embeddings ? 0 : m.vocab * m.hidden);
}

ParamCounts count_params(const ModelSpec& m) {
  ParamCounts c;
  c.total = embedding_params(m) + head_params(m);
  c.active = embedding_params(m) + norm_params(m, m.hidden) + m.vocab * m.hidden;
  if (m.tied_embeddings) c.active -= m.vocab * m.hidden;  // one table serves both ends
  for (int l = 0; l < m.layers; ++l) {
    c.total += layer_params(m, l);
    c.active += attention_params(m) + ffn_active_params(m, l);
  }
  return c;
}

core::Flops model_flops_per_sequence(const ModelSpec& m, std::int64_t seq_len) {
  double matmul = static_cast<double>(m.vocab * m.hidden);  // output projection
  for (int l = 0; l < m.layers; ++l) {
    matmul += static_cast<double>(attention_matmul_params(m) + ffn_active_matmul(m, l));
  }
  const double s = static_cast<double>(seq_len);
  const double attention = 6.0 * m.layers * s * m.heads * static_cast<double>(m.qk_head_dim() + m.v_head_dim());
  return core::Flops(s * (6.0 * matmul + attention));
}

}  // namespace hzp::models
