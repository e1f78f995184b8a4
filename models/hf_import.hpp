// A HuggingFace config.json mapped onto hzp's model schema (`hzp models import`):
// Llama, Mistral/Mixtral, Qwen2/Qwen3 (dense and MoE), DeepSeek-V2/V3 and
// GPT-OSS, with a note for every part of the checkpoint the schema cannot hold.
#pragma once

#include <string>
#include <vector>

#include "models/model_spec.hpp"

namespace hzp::models {

struct HfImport {
  ModelSpec model;
  std::string model_type;
  /// What the schema cannot hold and how it was represented (also in model.source).
  std::vector<std::string> notes;
};

/// The `model_type` values import_hf_config reads.
[[nodiscard]] const std::vector<std::string>& hf_model_types();

/// Maps the text of a config.json onto a ModelSpec. `file` names it in errors
/// and in the model's source; `name` empty: the last part of `_name_or_path`,
/// else the file's stem (its folder's name for "config.json"), lowercased.
/// InputError naming the file and the key for an unsupported model_type (the
/// supported ones listed), a missing required key, or a value hzp cannot
/// represent. The model is what model_from_json reads back from model_to_json.
[[nodiscard]] HfImport import_hf_config(const std::string& text, const std::string& file, const std::string& name = "");

/// A ModelSpec as hzp's model file (schema_version 1), the catalog's keys in its order.
[[nodiscard]] std::string model_to_json(const ModelSpec& m);

}  // namespace hzp::models
