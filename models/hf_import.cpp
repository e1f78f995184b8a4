// HuggingFace config.json -> ModelSpec. Keys as the transformers configuration
// class of each family names them; a key the class defaults is read with that
// default, a key that sets the model's shape is required. What the schema
// cannot hold (biases on some layers only, sliding windows, attention sinks,
// DeepSeek's MTP module) is a note with the parameters it leaves out.
#include "models/hf_import.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::models {
namespace {

using core::StrictObject;

enum class Family { Llama, Mistral, Mixtral, Qwen2, Qwen2Moe, Qwen3, Qwen3Moe, DeepSeek, GptOss };

const std::vector<std::pair<std::string, Family>>& families() {
  static const std::vector<std::pair<std::string, Family>> f = {
      {"llama", Family::Llama},        {"mistral", Family::Mistral},      {"mixtral", Family::Mixtral},
      {"qwen2", Family::Qwen2},        {"qwen2_moe", Family::Qwen2Moe},   {"qwen3", Family::Qwen3},
      {"qwen3_moe", Family::Qwen3Moe}, {"deepseek_v2", Family::DeepSeek}, {"deepseek_v3", Family::DeepSeek},
      {"gpt_oss", Family::GptOss}};
  return f;
}

Family family_of(StrictObject& o) {
  const std::string type = o.str("model_type");
  for (const auto& [name, f] : families()) {
    if (name == type) return f;
  }
  std::string names;
  for (const auto& n : hf_model_types()) names += (names.empty() ? "" : "|") + n;
  o.fail("model_type", fmt::format("unsupported model_type \"{}\"; expected one of {}", type, names));
}

class Importer {
 public:
  Importer(StrictObject& o, Family f) : o_(o), f_(f) {}

  std::pair<ModelSpec, std::vector<std::string>> run() {
    shape();
    if (f_ == Family::Mixtral || f_ == Family::GptOss) local_experts();
    if (f_ == Family::Qwen2Moe || f_ == Family::Qwen3Moe) qwen_experts();
    if (f_ == Family::DeepSeek) deepseek();
    biases();
    windows();
    if (given("quantization_config")) {
      const auto& q = o_.raw("quantization_config");
      const bool named = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string();
      notes_.push_back(
          fmt::format("quantization_config{}: the checkpoint's storage format; weights are costed in "
                      "the plan's dtypes",
                      named ? " " + q["quant_method"].get<std::string>() : ""));
    }
    return {m_, notes_};
  }

 private:
  // A key that is absent or null takes the configuration class's default.
  bool given(const std::string& key) { return o_.has(key) && !o_.raw(key).is_null(); }
  std::int64_t integer_or(const std::string& key, std::int64_t def, std::int64_t min, std::int64_t max) {
    return given(key) ? o_.integer(key, min, max) : def;
  }
  bool boolean_or(const std::string& key, bool def) { return given(key) ? o_.boolean(key) : def; }
  // A key every config.json of the family holds; null means none (0).
  std::int64_t integer_or_null(const std::string& key, std::int64_t min, std::int64_t max) {
    if (!o_.has(key)) o_.fail(key, "missing required key");
    return given(key) ? o_.integer(key, min, max) : 0;
  }
  [[nodiscard]] int moe_layers() const { return m_.moe ? m_.layers - m_.moe->dense_layers : 0; }

  void shape() {
    m_.layers = static_cast<int>(o_.integer("num_hidden_layers", 1, 10000));
    m_.hidden = o_.integer("hidden_size", 1, 1 << 20);
    m_.heads = static_cast<int>(o_.integer("num_attention_heads", 1, 1 << 12));
    m_.kv_heads = static_cast<int>(integer_or("num_key_value_heads", m_.heads, 1, 1 << 12));
    if (m_.heads % m_.kv_heads != 0) {
      o_.fail("num_key_value_heads", fmt::format("expected a divisor of num_attention_heads ({})", m_.heads));
    }
    if (f_ != Family::DeepSeek) {  // MLA's head widths are read with its ranks
      if (!given("head_dim") && m_.hidden % m_.heads != 0) {
        o_.fail("head_dim", fmt::format("missing required key (hidden_size {} is not a multiple of {} heads)",
                                        m_.hidden, m_.heads));
      }
      m_.head_dim = integer_or("head_dim", m_.hidden / m_.heads, 1, 1 << 12);
    }
    m_.ffn_hidden = o_.integer("intermediate_size", 1, 1 << 22);
    m_.vocab = o_.integer("vocab_size", 1, 1 << 24);
    m_.max_seq_len = o_.integer("max_position_embeddings", 1, 1 << 21);
    m_.tied_embeddings = boolean_or("tie_word_embeddings", false);
    // Every family here has a gated FFN (gate, up and down projections): three
    // matrices, which the schema calls swiglu whatever the activation.
    m_.ffn_activation = FfnActivation::SwiGlu;
    const std::string act = given("hidden_act") ? o_.str("hidden_act") : "silu";
    if (act != "silu" && act != "swish") {
      notes_.push_back(fmt::format("hidden_act {}: the gated FFN is counted as swiglu (three matrices)", act));
    }
    m_.norm = NormKind::RmsNorm;
    m_.qk_norm = f_ == Family::Qwen3 || f_ == Family::Qwen3Moe;
    m_.bias = false;
    m_.dropout = false;
    m_.position_embedding = PositionEmbedding::Rope;
  }

  // Mixtral and GPT-OSS: every layer's FFN is num_local_experts experts of intermediate_size.
  void local_experts() {
    MoeSpec e;
    e.experts = static_cast<int>(o_.integer("num_local_experts", 1, 1 << 12));
    if (f_ == Family::GptOss && !given("num_experts_per_tok") && given("experts_per_token")) {
      e.top_k = static_cast<int>(o_.integer("experts_per_token", 1, e.experts));  // OpenAI's spelling
    } else {
      e.top_k = static_cast<int>(o_.integer("num_experts_per_tok", 1, e.experts));
    }
    if (f_ == Family::GptOss && given("experts_per_token") && o_.integer("experts_per_token", 1, 1 << 12) != e.top_k) {
      o_.fail("experts_per_token", fmt::format("expected num_experts_per_tok ({})", e.top_k));
    }
    e.expert_ffn_hidden = m_.ffn_hidden;
    m_.moe = e;
  }

  // The leading layers of a list (mlp_only_layers): the schema's dense layers come first.
  int leading_layers(const std::string& key) {
    if (!given(key)) return 0;
    const auto& a = o_.raw(key);
    if (!a.is_array()) o_.fail(key, "expected an array of layer indices");
    std::vector<std::int64_t> v;
    for (const auto& x : a) {
      if (!x.is_number_integer()) o_.fail(key, "expected an array of layer indices");
      v.push_back(x.get<std::int64_t>());
    }
    std::sort(v.begin(), v.end());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] != static_cast<std::int64_t>(i) || v[i] >= m_.layers) {
        o_.fail(key, fmt::format("expected the leading layers 0..k-1 (hzp's dense FFN layers come first), got {}",
                                 a.dump()));
      }
    }
    return static_cast<int>(v.size());
  }

  void require_one(const std::string& key, const char* why) {
    if (given(key) && o_.integer(key, 0, INT32_MAX) != 1) {
      o_.fail(key, fmt::format("expected 1 ({}), got {}", why, o_.raw(key).dump()));
    }
  }

  // Qwen2-MoE and Qwen3-MoE: num_experts of moe_intermediate_size; Qwen2-MoE adds
  // one gated shared expert; mlp_only_layers are dense FFNs of intermediate_size.
  void qwen_experts() {
    MoeSpec e;
    e.experts = static_cast<int>(o_.integer("num_experts", 1, 1 << 12));
    e.top_k = static_cast<int>(o_.integer("num_experts_per_tok", 1, e.experts));
    e.expert_ffn_hidden = o_.integer("moe_intermediate_size", 1, 1 << 22);
    require_one("decoder_sparse_step", "every layer past the dense ones is an MoE layer");
    e.dense_layers = leading_layers("mlp_only_layers");
    m_.moe = e;
    if (f_ == Family::Qwen2Moe) {
      m_.moe->shared_expert_ffn_hidden = o_.integer("shared_expert_intermediate_size", 0, 1 << 22);
      m_.moe->shared_experts = m_.moe->shared_expert_ffn_hidden > 0 ? 1 : 0;
      if (m_.moe->shared_experts > 0) {
        notes_.push_back(fmt::format("shared_expert_gate (hidden_size per MoE layer, {} in all) not counted",
                                     moe_layers() * m_.hidden));
      }
    }
  }

  // DeepSeek-V2/V3: multi-head latent attention, n_shared_experts of
  // moe_intermediate_size, the first first_k_dense_replace layers dense.
  void deepseek() {
    MoeSpec e;
    e.experts = static_cast<int>(o_.integer("n_routed_experts", 1, 1 << 12));
    e.top_k = static_cast<int>(o_.integer("num_experts_per_tok", 1, e.experts));
    e.expert_ffn_hidden = o_.integer("moe_intermediate_size", 1, 1 << 22);
    e.shared_experts = static_cast<int>(integer_or_null("n_shared_experts", 0, 1 << 6));
    e.shared_expert_ffn_hidden = e.shared_experts > 0 ? e.expert_ffn_hidden : 0;
    e.dense_layers = static_cast<int>(o_.integer("first_k_dense_replace", 0, m_.layers));
    require_one("moe_layer_freq", "every layer past the dense ones is an MoE layer");
    m_.moe = e;
    MlaSpec a;
    a.q_lora_rank = integer_or_null("q_lora_rank", 1, 1 << 16);
    a.kv_lora_rank = o_.integer("kv_lora_rank", 1, 1 << 16);
    a.qk_nope_head_dim = o_.integer("qk_nope_head_dim", 1, 1 << 12);
    a.qk_rope_head_dim = o_.integer("qk_rope_head_dim", 0, 1 << 12);
    a.v_head_dim = o_.integer("v_head_dim", 1, 1 << 12);
    m_.mla = a;
    m_.head_dim = a.v_head_dim;  // unused under MLA; the catalog's deepseek-v3 holds v_head_dim
    if (const std::int64_t mtp = integer_or("num_nextn_predict_layers", 0, 0, 1 << 10); mtp > 0) {
      notes_.push_back(
          fmt::format("num_nextn_predict_layers {}: the multi-token-prediction module is not part of "
                      "the model (as in the catalog's deepseek-v3)",
                      mtp));
    }
    if (given("topk_method") && o_.str("topk_method") == "noaux_tc") {
      notes_.push_back(
          fmt::format("the router's e_score_correction_bias (n_routed_experts per MoE layer, {} in all) "
                      "not counted",
                      static_cast<std::int64_t>(moe_layers()) * e.experts));
    }
  }

  // Bias parameters of the checkpoint; hzp's `bias` puts a bias on every
  // attention projection and on the dense FFNs' two matrices (GPT-3's).
  void biases() {
    const std::int64_t L = m_.layers, h = m_.hidden, f = m_.ffn_hidden;
    const std::int64_t dense = m_.moe ? m_.moe->dense_layers : L;
    const std::int64_t qkv = (m_.heads + 2 * m_.kv_heads) * m_.head_dim;
    std::int64_t checkpoint = 0;
    std::string where;
    if (f_ == Family::Qwen2 || f_ == Family::Qwen2Moe) {
      checkpoint = L * qkv;
      where = "on the Q, K and V projections";
    } else if (f_ == Family::DeepSeek) {
      if (boolean_or("attention_bias", false)) notes_.push_back("attention_bias: MLA's projection biases not counted");
      return;
    } else if (f_ != Family::Mistral && f_ != Family::Mixtral && boolean_or("attention_bias", f_ == Family::GptOss)) {
      checkpoint = L * (qkv + h);
      where = "on the Q, K, V and O projections";
    }
    if (f_ == Family::Llama && boolean_or("mlp_bias", false)) {
      checkpoint += dense * (2 * f + h);
      where += std::string(where.empty() ? "" : " and ") + "on the gate, up and down projections";
    }
    if (f_ == Family::GptOss) {
      const std::int64_t E = m_.moe->experts;
      notes_.push_back(fmt::format(
          "not counted: the experts' biases ({}), the router's biases ({}) and the attention sinks ({}), {} "
          "parameters; hzp's MoE layers have no biases",
          L * E * (2 * f + h), L * E, L * m_.heads, L * E * (2 * f + h) + L * E + L * m_.heads));
    }
    if (checkpoint == 0) return;
    // The setting whose count is nearer the checkpoint's, and by how much it misses.
    const std::int64_t flag = L * (qkv + h) + dense * (f + h);
    m_.bias = std::llabs(flag - checkpoint) < checkpoint;
    const std::int64_t miss = (m_.bias ? flag : 0) - checkpoint;
    if (miss == 0) return;
    notes_.push_back(
        fmt::format("biases {} ({} parameters); hzp's bias flag covers every linear layer: bias {}, "
                    "{} parameters {} than the checkpoint",
                    where, checkpoint, m_.bias, std::llabs(miss), miss > 0 ? "more" : "fewer"));
  }

  // Sliding-window attention: the schema costs every layer as full causal attention.
  void windows() {
    const bool qwen = f_ == Family::Qwen2 || f_ == Family::Qwen2Moe || f_ == Family::Qwen3 || f_ == Family::Qwen3Moe;
    const bool used = qwen ? boolean_or("use_sliding_window", false)
                           : (f_ == Family::Mistral || f_ == Family::Mixtral || f_ == Family::GptOss);
    if (!used || !given("sliding_window")) return;
    std::string layers = "every layer";
    if (f_ == Family::GptOss && given("layer_types") && o_.raw("layer_types").is_array()) {
      const auto& t = o_.raw("layer_types");
      layers =
          fmt::format("{} of {} layers (layer_types)", std::count(t.begin(), t.end(), "sliding_attention"), t.size());
    }
    notes_.push_back(fmt::format("sliding_window {} on {}: costed as full causal attention",
                                 o_.raw("sliding_window").dump(), layers));
  }

  StrictObject& o_;
  Family f_;
  ModelSpec m_;
  std::vector<std::string> notes_;
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The last part of `_name_or_path`, else the file's stem (its folder for config.json).
std::string derived_name(StrictObject& o, const std::string& file, const std::string& type) {
  std::string n;
  if (o.has("_name_or_path") && o.raw("_name_or_path").is_string()) {
    n = o.str("_name_or_path");
    while (!n.empty() && n.back() == '/') n.pop_back();
    n = n.substr(n.find_last_of('/') == std::string::npos ? 0 : n.find_last_of('/') + 1);
  }
  if (n.empty() || n == "." || n == "..") {
    const std::filesystem::path p(file);
    n = p.stem().string();
    if (n == "config") n = p.parent_path().filename().string();
  }
  if (n.empty() || n == "." || n == ".." || n == "-") n = type;
  return lowercase(n);
}

}  // namespace

const std::vector<std::string>& hf_model_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, f] : families()) v.push_back(name);
    return v;
  }();
  return names;
}

HfImport import_hf_config(const std::string& text, const std::string& file, const std::string& name) {
  const nlohmann::json j = core::parse_json(text, file);
  StrictObject o(j, file);
  const Family family = family_of(o);
  HfImport out;
  out.model_type = o.str("model_type");
  auto [m, notes] = Importer(o, family).run();
  m.name = name.empty() ? derived_name(o, file, out.model_type) : name;
  m.source = fmt::format("imported by hzp models import from {} (HuggingFace config.json, model_type {})", file,
                         out.model_type);
  for (const auto& n : notes) m.source += "; " + n;
  // Read back as the written file will be: every range and bound model_from_json checks.
  out.model = model_from_json(model_to_json(m), file);
  out.notes = std::move(notes);
  return out;
}

std::string model_to_json(const ModelSpec& m) {
  nlohmann::ordered_json j;
  j["schema_version"] = kModelSchemaVersion;
  j["name"] = m.name;
  j["source"] = m.source;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["head_dim"] = m.head_dim;
  j["ffn_hidden"] = m.ffn_hidden;
  j["ffn_activation"] = core::name_of(kFfnActivations, m.ffn_activation);
  j["vocab"] = m.vocab;
  j["tied_embeddings"] = m.tied_embeddings;
  j["norm"] = core::name_of(kNormKinds, m.norm);
  j["qk_norm"] = m.qk_norm;
  j["bias"] = m.bias;
  j["dropout"] = m.dropout;
  j["position_embedding"] = core::name_of(kPositionEmbeddings, m.position_embedding);
  j["max_seq_len"] = m.max_seq_len;
  j["moe"] = nullptr;
  if (m.moe) {
    const MoeSpec& e = *m.moe;
    j["moe"] = {{"experts", e.experts},
                {"top_k", e.top_k},
                {"expert_ffn_hidden", e.expert_ffn_hidden},
                {"shared_experts", e.shared_experts},
                {"shared_expert_ffn_hidden", e.shared_expert_ffn_hidden},
                {"dense_layers", e.dense_layers},
                {"capacity_factor", e.capacity_factor}};
  }
  j["mla"] = nullptr;
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    j["mla"] = {{"q_lora_rank", a.q_lora_rank},
                {"kv_lora_rank", a.kv_lora_rank},
                {"qk_nope_head_dim", a.qk_nope_head_dim},
                {"qk_rope_head_dim", a.qk_rope_head_dim},
                {"v_head_dim", a.v_head_dim}};
  }
  // A file name from the command line may not be UTF-8: replaced, never thrown on.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace hzp::models
