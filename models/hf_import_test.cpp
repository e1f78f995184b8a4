// HuggingFace config.json import: the public configs of four catalog models
// (models/testdata/hf, sources in its README) import to the catalog's
// architecture and parameter counts exactly, GPT-OSS-20B to a hand-derived
// count, and bad input is one error naming the file and the key.
#include "models/hf_import.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"

namespace hzp::models {
namespace {

std::string fixture(const std::string& repo) {
  const char* d = std::getenv("HZP_SOURCE_DIR");
  return std::string(d ? d : ".") + "/models/testdata/hf/" + repo + "/config.json";
}

HfImport import_fixture(const std::string& repo) {
  const std::string path = fixture(repo);
  return import_hf_config(core::read_file(path), path);
}

nlohmann::json fixture_json(const std::string& repo) { return nlohmann::json::parse(core::read_file(fixture(repo))); }

std::string error_of(const nlohmann::json& config, const std::string& file = "cfg.json") {
  try {
    (void)import_hf_config(config.dump(), file);
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

bool has_note(const HfImport& imp, const std::string& text) {
  for (const auto& n : imp.notes) {
    if (n.find(text) != std::string::npos) return imp.model.source.find(n) != std::string::npos;
  }
  return false;
}

// Every architecture field but the context length (Llama 3.1 against Llama 3's entry).
void expect_same_architecture(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.ffn_activation, b.ffn_activation);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.dropout, b.dropout);
  EXPECT_EQ(a.position_embedding, b.position_embedding);
  ASSERT_EQ(a.moe.has_value(), b.moe.has_value());
  if (a.moe) {
    EXPECT_EQ(a.moe->experts, b.moe->experts);
    EXPECT_EQ(a.moe->top_k, b.moe->top_k);
    EXPECT_EQ(a.moe->expert_ffn_hidden, b.moe->expert_ffn_hidden);
    EXPECT_EQ(a.moe->shared_experts, b.moe->shared_experts);
    EXPECT_EQ(a.moe->shared_expert_ffn_hidden, b.moe->shared_expert_ffn_hidden);
    EXPECT_EQ(a.moe->dense_layers, b.moe->dense_layers);
    EXPECT_EQ(a.moe->capacity_factor, b.moe->capacity_factor);
  }
  ASSERT_EQ(a.mla.has_value(), b.mla.has_value());
  if (a.mla) {
    EXPECT_EQ(a.mla->q_lora_rank, b.mla->q_lora_rank);
    EXPECT_EQ(a.mla->kv_lora_rank, b.mla->kv_lora_rank);
    EXPECT_EQ(a.mla->qk_nope_head_dim, b.mla->qk_nope_head_dim);
    EXPECT_EQ(a.mla->qk_rope_head_dim, b.mla->qk_rope_head_dim);
    EXPECT_EQ(a.mla->v_head_dim, b.mla->v_head_dim);
  }
}

struct Case {
  const char* repo;
  const char* catalog;
  const char* name;  // derived from the fixture's folder
  const char* model_type;
  std::int64_t max_seq_len;  // max_position_embeddings
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.catalog; }

class CatalogImport : public ::testing::TestWithParam<Case> {};

TEST_P(CatalogImport, ReproducesTheCatalogEntry) {
  const Case& c = GetParam();
  const HfImport imp = import_fixture(c.repo);
  const ModelSpec want = load_model(c.catalog);
  EXPECT_EQ(imp.model_type, c.model_type);
  EXPECT_EQ(imp.model.name, c.name);
  EXPECT_EQ(imp.model.max_seq_len, c.max_seq_len);
  EXPECT_NE(imp.model.source.find(fixture(c.repo) + " (HuggingFace config.json, model_type " + c.model_type + ")"),
            std::string::npos)
      << imp.model.source;
  const ParamCounts got = count_params(imp.model), catalog = count_params(want);
  EXPECT_EQ(got.total, catalog.total);
  EXPECT_EQ(got.active, catalog.active);
  expect_same_architecture(imp.model, want);
  // The file `hzp models import --out` writes reads back to the same model.
  const ModelSpec back = model_from_json(model_to_json(imp.model), "imported.json");
  EXPECT_EQ(back.name, imp.model.name);
  EXPECT_EQ(back.source, imp.model.source);
  EXPECT_EQ(back.max_seq_len, imp.model.max_seq_len);
  EXPECT_EQ(count_params(back).total, catalog.total);
  EXPECT_EQ(count_params(back).active, catalog.active);
  expect_same_architecture(back, want);
}

INSTANTIATE_TEST_SUITE_P(HfConfigs, CatalogImport,
                         ::testing::Values(Case{"Llama-3.1-8B", "llama3-8b", "llama-3.1-8b", "llama", 131072},
                                           Case{"Mixtral-8x7B-v0.1", "mixtral-8x7b", "mixtral-8x7b-v0.1", "mixtral",
                                                32768},
                                           Case{"Qwen3-30B-A3B", "qwen3-30b-a3b", "qwen3-30b-a3b", "qwen3_moe", 40960},
                                           Case{"DeepSeek-V3", "deepseek-v3", "deepseek-v3", "deepseek_v3", 163840}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.catalog;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(HfImport, Llama31_8bExactCount) {
  // As llama3-8b: 32 · (4096·(32+16)·128 + 4096·4096 + 3·4096·14336 + 2·4096) + 2·128256·4096 + 4096.
  EXPECT_EQ(count_params(import_fixture("Llama-3.1-8B").model).total, 8030261248);
}

TEST(HfImport, DeepSeekV3LeavesOutTheMtpModule) {
  const HfImport imp = import_fixture("DeepSeek-V3");
  EXPECT_TRUE(has_note(imp, "num_nextn_predict_layers 1: the multi-token-prediction module is not part"));
  // 58 MoE layers · 256 routed experts.
  EXPECT_TRUE(has_note(imp, "e_score_correction_bias (n_routed_experts per MoE layer, 14848 in all)"));
  EXPECT_TRUE(has_note(imp, "quantization_config fp8"));
}

TEST(HfImport, GptOss20bHandDerived) {
  const HfImport imp = import_fixture("gpt-oss-20b");
  const ModelSpec& m = imp.model;
  EXPECT_EQ(m.name, "gpt-oss-20b");
  EXPECT_TRUE(m.bias);  // attention_bias: Q, K, V and O, exactly what the flag counts in MoE layers
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->experts, 32);
  EXPECT_EQ(m.moe->top_k, 4);
  EXPECT_EQ(m.moe->expert_ffn_hidden, 2880);
  EXPECT_EQ(m.head_dim, 64);
  const ParamCounts c = count_params(m);
  // Per layer, attention 2880·(64 + 2·8)·64 + 64·64·2880 + norm 2880 + biases (64·64 + 2·8·64 + 2880)
  // = 26,552,960 and FFN norm 2880 + 32·3·2880·2880 + router 2880·32 = 796,357,440; 24 layers,
  // embedding and output 2·201088·2880, final norm 2880.
  EXPECT_EQ(c.total, 24 * (26552960LL + 796357440LL) + 2LL * 201088 * 2880 + 2880);
  EXPECT_EQ(c.total, 20908119360);
  // Active: 4 of the 32 experts.
  EXPECT_EQ(c.active, 24 * (26552960LL + 2880 + 4LL * 3 * 2880 * 2880 + 2880 * 32) + 2LL * 201088 * 2880 + 2880);
  // OpenAI publishes 20.9B in all: within 2 %.
  EXPECT_NEAR(static_cast<double>(c.total) / 20.9e9, 1.0, 0.02);
  // What the schema leaves out is said: 24·32·(2·2880 + 2880) expert biases, 24·32 router biases,
  // 24·64 sinks; with them the count is the checkpoint's 20,914,757,184.
  EXPECT_TRUE(has_note(imp, "(6635520), the router's biases (768) and the attention sinks (1536), 6637824 parameters"));
  EXPECT_TRUE(has_note(imp, "sliding_window 128 on 12 of 24 layers (layer_types): costed as full causal attention"));
  EXPECT_TRUE(has_note(imp, "quantization_config mxfp4"));
}

TEST(HfImport, WrittenFileLoadsAsAModel) {
  const HfImport imp = import_fixture("Mixtral-8x7B-v0.1");
  const auto path = std::filesystem::temp_directory_path() / ("hzp-hf-import-" + std::to_string(getpid()) + ".json");
  core::write_file_atomic(path.string(), model_to_json(imp.model));
  const ModelSpec back = load_model(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(count_params(back).total, count_params(load_model("mixtral-8x7b")).total);
  EXPECT_EQ(back.name, "mixtral-8x7b-v0.1");
}

TEST(HfImport, UnknownModelTypeNamesItTheFileAndTheSupportedOnes) {
  EXPECT_EQ(error_of({{"model_type", "bert"}, {"hidden_size", 768}}, "bert/config.json"),
            "bert/config.json: model_type: unsupported model_type \"bert\"; expected one of "
            "llama|mistral|mixtral|qwen2|qwen2_moe|qwen3|qwen3_moe|deepseek_v2|deepseek_v3|gpt_oss");
}

TEST(HfImport, MissingKeyNamesTheFileAndTheKey) {
  const std::pair<const char*, const char*> cases[] = {{"Llama-3.1-8B", "hidden_size"},
                                                       {"Llama-3.1-8B", "vocab_size"},
                                                       {"Llama-3.1-8B", "model_type"},
                                                       {"Mixtral-8x7B-v0.1", "num_local_experts"},
                                                       {"Qwen3-30B-A3B", "moe_intermediate_size"},
                                                       {"DeepSeek-V3", "kv_lora_rank"},
                                                       {"DeepSeek-V3", "q_lora_rank"},
                                                       {"gpt-oss-20b", "num_local_experts"}};
  for (const auto& [repo, key] : cases) {
    nlohmann::json j = fixture_json(repo);
    j.erase(key);
    EXPECT_EQ(error_of(j, "my/config.json"), std::string("my/config.json: ") + key + ": missing required key");
  }
  // GPT-OSS's top-k under either spelling; the transformers one named when both are missing.
  nlohmann::json j = fixture_json("gpt-oss-20b");
  j.erase("num_experts_per_tok");
  EXPECT_EQ(import_hf_config(j.dump(), "g.json").model.moe->top_k, 4);
  j.erase("experts_per_token");
  EXPECT_EQ(error_of(j, "g.json"), "g.json: num_experts_per_tok: missing required key");
}

TEST(HfImport, DefaultsOfTheConfigurationClass) {
  nlohmann::json j = fixture_json("Llama-3.1-8B");
  for (const char* key : {"num_key_value_heads", "tie_word_embeddings", "hidden_act"}) j.erase(key);
  j["_name_or_path"] = "meta-llama/Meta-Llama-3-8B/";
  const HfImport imp = import_hf_config(j.dump(), "x.json");
  EXPECT_EQ(imp.model.kv_heads, 32);   // num_attention_heads
  EXPECT_EQ(imp.model.head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_FALSE(imp.model.tied_embeddings);
  EXPECT_EQ(imp.model.name, "meta-llama-3-8b");
  EXPECT_EQ(import_hf_config(j.dump(), "x.json", "mine").model.name, "mine");
}

// Qwen2 has biases on Q, K and V only: the flag's setting nearer the checkpoint's count.
TEST(HfImport, Qwen2BiasesNearerSetting) {
  nlohmann::json dense = {{"model_type", "qwen2"},    {"hidden_size", 3584},
                          {"num_hidden_layers", 28},  {"num_attention_heads", 28},
                          {"num_key_value_heads", 4}, {"intermediate_size", 18944},
                          {"vocab_size", 152064},     {"max_position_embeddings", 32768}};
  // Checkpoint: 28·(28 + 2·4)·128 = 129,024. Flag: 28·(4608 + 3584) + 28·(18944 + 3584) = 860,160: farther.
  HfImport imp = import_hf_config(dense.dump(), "qwen2.json");
  EXPECT_FALSE(imp.model.bias);
  EXPECT_TRUE(has_note(imp, "biases on the Q, K and V projections (129024 parameters)"));
  EXPECT_TRUE(has_note(imp, "bias false, 129024 parameters fewer than the checkpoint"));
  // MoE layers carry no FFN biases: checkpoint 24·(16 + 2·16)·128 = 147,456, flag 24·(6144 + 2048) = 196,608.
  nlohmann::json moe = {{"model_type", "qwen2_moe"},
                        {"hidden_size", 2048},
                        {"num_hidden_layers", 24},
                        {"num_attention_heads", 16},
                        {"num_key_value_heads", 16},
                        {"intermediate_size", 5632},
                        {"moe_intermediate_size", 1408},
                        {"shared_expert_intermediate_size", 5632},
                        {"num_experts", 60},
                        {"num_experts_per_tok", 4},
                        {"vocab_size", 151936},
                        {"max_position_embeddings", 8192}};
  imp = import_hf_config(moe.dump(), "qwen2moe.json");
  EXPECT_TRUE(imp.model.bias);
  EXPECT_TRUE(has_note(imp, "bias true, 49152 parameters more than the checkpoint"));
  ASSERT_TRUE(imp.model.moe.has_value());
  EXPECT_EQ(imp.model.moe->shared_experts, 1);
  EXPECT_EQ(imp.model.moe->shared_expert_ffn_hidden, 5632);
  EXPECT_TRUE(has_note(imp, "shared_expert_gate (hidden_size per MoE layer, 49152 in all) not counted"));
}

TEST(HfImport, DenseLayersMustLead) {
  nlohmann::json j = fixture_json("Qwen3-30B-A3B");
  j["mlp_only_layers"] = {1, 0};
  const HfImport imp = import_hf_config(j.dump(), "q.json");
  ASSERT_TRUE(imp.model.moe.has_value());
  EXPECT_EQ(imp.model.moe->dense_layers, 2);
  j["mlp_only_layers"] = {5};
  EXPECT_EQ(error_of(j, "q.json"),
            "q.json: mlp_only_layers: expected the leading layers 0..k-1 (hzp's dense FFN layers come first), got [5]");
  j["mlp_only_layers"] = nlohmann::json::array();
  j["decoder_sparse_step"] = 2;
  EXPECT_EQ(error_of(j, "q.json"),
            "q.json: decoder_sparse_step: expected 1 (every layer past the dense ones is an MoE layer), got 2");
}

TEST(HfImport, OutOfRangeNamesTheKey) {
  nlohmann::json j = fixture_json("Mixtral-8x7B-v0.1");
  j["num_experts_per_tok"] = 9;
  EXPECT_EQ(error_of(j), "cfg.json: num_experts_per_tok: expected an integer in [1, 8], got 9");
  j = fixture_json("Llama-3.1-8B");
  j["num_key_value_heads"] = 5;
  EXPECT_EQ(error_of(j), "cfg.json: num_key_value_heads: expected a divisor of num_attention_heads (32)");
  EXPECT_EQ(error_of(nlohmann::json::array()), "cfg.json: (top level): expected a JSON object");
}

}  // namespace
}  // namespace hzp::models
