// `hzp models`, `hzp clusters`, `hzp stacks` (the catalogs, or one entry as a template to
// copy), `hzp models import` (a HuggingFace config.json as a model file) and
// `hzp schema` (every input's JSON Schema or field reference).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "explore/schemas.hpp"
#include "models/hf_import.hpp"
#include "models/model_spec.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::cli {
namespace {

int cmd_models(bool json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text =
      fmt::format("{:<18} {:>7} {:>7} {:>10} {:>10}  {}\n", "name", "layers", "hidden", "params", "active", "kind");
  for (const auto& name : models::model_catalog_names()) {
    models::ModelSpec m = models::load_model(name);
    auto c = models::count_params(m);
    std::string kind = m.moe ? fmt::format("MoE {}x top-{}", m.moe->experts, m.moe->top_k) : "dense";
    if (m.mla) kind += ", MLA";
    j.push_back({{"name", name},
                 {"layers", m.layers},
                 {"hidden", m.hidden},
                 {"params", c.total},
                 {"active_params", c.active},
                 {"moe", m.moe.has_value()},
                 {"mla", m.mla.has_value()},
                 {"source", m.source}});
    text += fmt::format("{:<18} {:>7} {:>7} {:>9.2f}B {:>9.2f}B  {}\n", name, m.layers, m.hidden,
                        static_cast<double>(c.total) / 1e9, static_cast<double>(c.active) / 1e9, kind);
  }
  std::cout << (json ? j.dump(2) + "\n" : text);
  return 0;
}

// The limits --power-limit accepts: the rated one, then the measured caps.
std::vector<double> power_limits(const topologies::ClusterSpec& c) {
  std::vector<double> w;
  if (!c.device.power) return w;
  w.push_back(c.device.power->rated_W);
  for (const auto& cap : c.device.power->caps) w.push_back(cap.limit_W);
  return w;
}

int cmd_clusters(bool json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text = fmt::format("{:<16} {:<20} {:>9} {:>8} {:>14} {:>12}  {}\n", "name", "device", "bf16 TF",
                                 "HBM GiB", "scale-up", "NIC/device", "power W (--power-limit)");
  for (const auto& name : topologies::cluster_catalog_names()) {
    topologies::ClusterSpec c = topologies::load_cluster(name);
    std::string up = fmt::format("{}x{} {:.0f}GB/s", c.devices_per_node / c.scale_up.domain_devices,
                                 c.scale_up.domain_devices, c.scale_up.bw_GBps);
    const std::vector<double> limits = power_limits(c);
    j.push_back({{"name", name},
                 {"device", c.device.name},
                 {"bf16_tflops", c.device.peak_tflops.at(core::Dtype::Bf16)},
                 {"hbm_GiB", c.device.hbm_GiB},
                 {"devices_per_node", c.devices_per_node},
                 {"scale_up_domain", c.scale_up.domain_devices},
                 {"scale_up_GBps", c.scale_up.bw_GBps},
                 {"nic_GBps_per_device", c.nic_GBps_per_device()},
                 {"power_limits_W", limits},
                 {"source", c.source}});
    const std::string power = limits.empty() ? "-" : fmt::format("{}", fmt::join(limits, ", "));
    text +=
        fmt::format("{:<16} {:<20} {:>9.0f} {:>8.1f} {:>14} {:>9.1f}GB/s  {}\n", name, c.device.name,
                    c.device.peak_tflops.at(core::Dtype::Bf16), c.device.hbm_GiB, up, c.nic_GBps_per_device(), power);
  }
  std::cout << (json ? j.dump(2) + "\n" : text);
  return 0;
}

int cmd_stacks(bool json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  std::string text = fmt::format("{:<20} {:>8} {:>7} {:>10} {:>10} {:>9} {:>8}  {}\n", "name", "norm k", "attn",
                                 "gather", "reduce", "host us", "threads", "around collectives");
  for (const auto& name : stacks::stack_catalog_names()) {
    const stacks::StackSpec s = stacks::load_stack(name);
    const stacks::Collectives& c = s.collectives;
    std::string copies;
    for (auto [on, what] : {std::pair{c.copy_in, "param in"},
                            {c.copy_out, "param out"},
                            {c.grad_copy_in, "grad in"},
                            {c.int8_weights, "int8 params"},
                            {c.int4_gradients, "int4 grads"}}) {
      if (on) copies += (copies.empty() ? "" : ", ") + std::string(what);
    }
    if (copies.empty()) copies = "none";
    j.push_back({{"name", name},
                 {"norm_kernels", s.ops.norm.forward.kernels},
                 {"attention", core::to_string(s.attention)},
                 {"selective_recompute", core::name_of(core::kSelectivePolicies, s.selective)},
                 {"gather", stacks::to_string(c.gather)},
                 {"reduce", stacks::to_string(c.reduce)},
                 {"kernel_us", s.host.kernel_us},
                 {"background_threads", s.overlap.background_threads},
                 {"source", s.source}});
    text += fmt::format("{:<20} {:>8} {:>7} {:>10} {:>10} {:>9.0f} {:>8}  {}\n", name, s.ops.norm.forward.kernels,
                        core::to_string(s.attention), stacks::to_string(c.gather), stacks::to_string(c.reduce),
                        s.host.kernel_us, s.overlap.background_threads ? "yes" : "no", copies);
  }
  std::cout << (json ? j.dump(2) + "\n" : text + "host us 0: the cluster's launch latency\n");
  return 0;
}

struct CatalogArgs {
  bool json = false;
  std::string template_name;
};

int run_models(CatalogArgs& a) {
  if (a.template_name.empty()) return cmd_models(a.json);
  std::cout << models::model_text(a.template_name).text;
  return 0;
}

int run_stacks(CatalogArgs& a) {
  if (a.template_name.empty()) return cmd_stacks(a.json);
  std::cout << stacks::stack_text(a.template_name).first;
  return 0;
}

int run_clusters(CatalogArgs& a) {
  if (a.template_name.empty()) return cmd_clusters(a.json);
  std::cout << topologies::cluster_text(a.template_name).first;
  return 0;
}

struct ImportArgs {
  std::string config;
  std::string name;
  std::string out;
  bool force = false;
};

// The model JSON goes to --out, or to standard output with the summary on standard error.
int run_import(ImportArgs& a) {
  const bool to_stdout = a.out.empty() || a.out == "-";
  if (!to_stdout && !a.force && std::filesystem::exists(a.out)) {
    throw core::InputError(a.out, "", "already exists; pass --force to overwrite it");
  }
  const models::HfImport imp = models::import_hf_config(core::read_file(a.config), a.config, a.name);
  const std::string text = models::model_to_json(imp.model);
  const models::ParamCounts c = models::count_params(imp.model);
  std::string summary = fmt::format("{}: {} (model_type {}): {} parameters ({:.2f}B), {} active ({:.2f}B)\n",
                                    imp.model.name, a.config, imp.model_type, c.total,
                                    static_cast<double>(c.total) / 1e9, c.active, static_cast<double>(c.active) / 1e9);
  for (const auto& n : imp.notes) summary += "note: " + n + "\n";
  if (to_stdout) {
    std::cout << text;
    std::cerr << summary;
  } else {
    core::write_file_atomic(a.out, text);
    std::cout << summary << fmt::format("wrote {} (use it as --model {})\n", a.out, a.out);
  }
  return 0;
}

struct SchemaArgs {
  std::string name;
  bool markdown = false;
};

int run_schema(SchemaArgs& a) {
  const nlohmann::ordered_json schema = explore::input_schema(a.name);
  std::cout << (a.markdown ? schema_reference(schema) : schema.dump(2) + "\n");
  return 0;
}

}  // namespace

void add_catalog_commands(CLI::App& app, Commands& out) {
  auto models_cmd =
      std::make_unique<SimpleCommand<CatalogArgs>>(app.add_subcommand("models", "list the model catalog"), run_models);
  auto clusters_cmd = std::make_unique<SimpleCommand<CatalogArgs>>(
      app.add_subcommand("clusters", "list the cluster catalog"), run_clusters);
  auto stacks_cmd = std::make_unique<SimpleCommand<CatalogArgs>>(
      app.add_subcommand("stacks", "list the software-stack catalog"), run_stacks);
  for (auto* c : {models_cmd.get(), clusters_cmd.get(), stacks_cmd.get()}) {
    CLI::App* sub = app.get_subcommand(c == models_cmd.get()     ? "models"
                                       : c == clusters_cmd.get() ? "clusters"
                                                                 : "stacks");
    sub->add_flag("--json", c->args.json, "as JSON");
    sub->add_option("--template", c->args.template_name, "print this catalog entry's JSON, to copy and edit");
  }
  std::string types;
  for (const auto& t : models::hf_model_types()) types += (types.empty() ? "" : ", ") + t;
  CLI::App* import = app.get_subcommand("models")->add_subcommand(
      "import", "map a HuggingFace config.json (" + types +
                    ") onto a model file; prints its parameter counts and what the schema cannot hold");
  auto import_cmd = std::make_unique<SimpleCommand<ImportArgs>>(import, run_import);
  import->add_option("config", import_cmd->args.config, "the config.json")->required();
  import->add_option("--name", import_cmd->args.name, "the model's name (default: from _name_or_path or the file)");
  import->add_option("--out", import_cmd->args.out, "write the model file here (default: standard output)");
  import->add_flag("--force", import_cmd->args.force, "overwrite --out if it exists");
  out.push_back(std::move(import_cmd));  // before its parent, `models`
  out.push_back(std::move(models_cmd));
  out.push_back(std::move(clusters_cmd));
  out.push_back(std::move(stacks_cmd));
  CLI::App* schema = app.add_subcommand("schema", "print the JSON Schema of an input (or its field reference)");
  auto schema_cmd = std::make_unique<SimpleCommand<SchemaArgs>>(schema, run_schema);
  schema->add_option("name", schema_cmd->args.name, "plan | sweep | model | cluster | stack | schedule")
      ->required()
      ->check(CLI::IsMember(explore::schema_names()));
  schema->add_flag("--markdown", schema_cmd->args.markdown, "as the field reference of docs/REFERENCE.md");
  out.push_back(std::move(schema_cmd));
}

}  // namespace hzp::cli
