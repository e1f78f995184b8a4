// Megatron-LM arguments as plan options (see megatron_args.hpp).
#include "cli/megatron_args.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "core/options.hpp"
#include "plan/options.hpp"

namespace hzp::cli {
namespace {

// What a flag sets: an option's value (from the next word), or a fixed value.
struct Target {
  const core::OptionSpec* spec = nullptr;
  std::optional<nlohmann::json> fixed;  // a Boolean flag or a value flag
};

std::optional<Target> target_of(const std::string& flag) {
  // Megatron-LM's flags that are not spellings of one option's flag.
  if (flag == "--recompute-activations") {
    return Target{&plan::find_plan_option("recompute")->spec, nlohmann::json("selective")};
  }
  if (flag == "--use-flash-attn") return Target{&plan::find_plan_option("flash_attention")->spec, nlohmann::json(true)};
  if (flag == "--cross-entropy-loss-fusion") {
    return Target{&plan::find_plan_option("fused_loss")->spec, nlohmann::json(true)};
  }
  for (const auto& row : plan::plan_option_table()) {
    const core::OptionSpec& s = row.spec;
    if (s.type == core::ValueType::Boolean) {
      if (!s.flag.empty() && flag == s.flag) return Target{&s, nlohmann::json(true)};
      if (!s.false_flag.empty() && flag == s.false_flag) return Target{&s, nlohmann::json(false)};
      continue;
    }
    for (const auto& [f, text] : s.value_flags) {
      if (flag == f) return Target{&s, core::value_from_text(s, text).value};
    }
    if (flag == core::flag_of(s)) return Target{&s, std::nullopt};
    for (const auto& alias : s.flag_aliases) {
      if (flag == alias) return Target{&s, std::nullopt};
    }
  }
  return std::nullopt;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w == "\\") continue;
    const auto eq = w.find('=');
    if (w.rfind("--", 0) == 0 && eq != std::string::npos) {
      words.push_back(w.substr(0, eq));
      words.push_back(w.substr(eq + 1));
    } else {
      words.push_back(w);
    }
  }
  return words;
}

}  // namespace

MegatronImport import_megatron_args(const std::string& text, const std::string& source) {
  MegatronImport m;
  // Megatron-LM's defaults where hzp's differ: plain DDP unless
  // --use-distributed-optimizer, no sequence parallelism, gradients reduced
  // after the backward pass, the host synchronising on pipeline receives,
  // eager cross-entropy.
  m.values = {{"strategy", "ddp"},
              {"sequence_parallel", false},
              {"overlap_grad_reduce", false},
              {"pipeline_p2p_sync", true},
              {"fused_loss", false}};
  const std::vector<std::string> w = words_of(text);
  // Text without a single flag is no command line: a mistyped file name, or
  // an empty file (issue 42, item 10).
  if (std::none_of(w.begin(), w.end(), [](const std::string& x) { return x.rfind("--", 0) == 0; })) {
    constexpr const char* kExpected = "expected Megatron-LM arguments (e.g. --tensor-model-parallel-size 8)";
    if (w.empty()) throw core::InputError(source, "", fmt::format("{}, got nothing", kExpected));
    if (w.size() == 1 && source == "--from-megatron-args") {  // a file name that names no file
      throw core::InputError(source, "",
                             fmt::format("{} or a file of them; '{}' is neither (no such file, no flag)", kExpected,
                                         w.front()));
    }
    throw core::InputError(source, "", fmt::format("{}, found no flag", kExpected));
  }
  // --fp8-format (e4m3 or hybrid) turns FP8 on; the recipe is
  // --fp8-recipe's, delayed scaling by Megatron-LM's default.
  const bool recipe_given = std::any_of(w.begin(), w.end(), [](const std::string& x) { return x == "--fp8-recipe"; });
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] == "--fp8-format" && i + 1 < w.size() && w[i + 1].rfind("--", 0) != 0) {
      const std::string format = w[++i];
      if (format != "e4m3" && format != "hybrid") {
        throw core::InputError(source, "--fp8-format", fmt::format("expected e4m3 or hybrid, got '{}'", format));
      }
      if (!recipe_given) {
        m.mapped.push_back(fmt::format("--fp8-format {} -> precision fp8-delayed (Megatron-LM's default "
                                       "--fp8-recipe delayed)",
                                       format));
        m.values.emplace_back("precision", "fp8-delayed");
      }
      continue;
    }
    if (w[i].rfind("--", 0) != 0) {
      m.ignored.push_back(w[i]);
      continue;
    }
    const bool has_value = i + 1 < w.size() && w[i + 1].rfind("--", 0) != 0;
    const std::optional<Target> t = target_of(w[i]);
    if (!t) {
      m.ignored.push_back(has_value ? w[i] + " " + w[i + 1] : w[i]);
      if (has_value) ++i;
      continue;
    }
    nlohmann::json value;
    if (t->fixed) {
      value = *t->fixed;
    } else {
      if (!has_value) throw core::InputError(source, w[i], "expected a value after the flag");
      const core::Checked c = core::value_from_text(*t->spec, w[++i]);
      if (!c.problem.empty()) throw core::InputError(source, w[i - 1], c.problem);
      value = c.value;
    }
    m.mapped.push_back(fmt::format("{}{} -> {} {}", w[i - (t->fixed ? 0 : 1)], t->fixed ? "" : " " + w[i], t->spec->key,
                                   core::value_to_text(*t->spec, value)));
    m.values.emplace_back(t->spec->key, value);
  }
  return m;
}

std::string describe_import(const MegatronImport& m) {
  std::string out =
      "from Megatron-LM arguments (its defaults first: strategy ddp, sequence_parallel false, "
      "overlap_grad_reduce false, pipeline_p2p_sync true, fused_loss false; stack megatron-core-te unless "
      "--stack):\n";
  for (const auto& s : m.mapped) out += "  " + s + "\n";
  if (!m.ignored.empty()) {
    std::string ignored;
    for (const auto& s : m.ignored) ignored += (ignored.empty() ? "" : ", ") + s;
    out += "  ignored (no plan option; the model, GPUs and cluster come from --model, --gpus, --cluster): " + ignored +
           "\n";
  }
  return out;
}

}  // namespace hzp::cli
