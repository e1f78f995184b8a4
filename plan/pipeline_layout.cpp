// Pipeline layouts: which transformer layers sit on which virtual stage, even,
// with uneven first and last stages, or from Megatron's layout text (see
// PipelineLayout in plan.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>

#include "plan/plan.hpp"

namespace hzp::plan {

int PipelineLayout::layers_of(int v) const {
  const auto i = static_cast<std::size_t>(v);
  return first_layer[i + 1] - first_layer[i];
}

int PipelineLayout::virtual_stage_of(int layer) const {
  // The last virtual stage whose first layer is at or before `layer`, skipping empty ones.
  const auto it = std::upper_bound(first_layer.begin(), first_layer.end() - 1, layer);
  return static_cast<int>(it - first_layer.begin()) - 1;
}

int PipelineLayout::stage_layers(int p) const {
  int n = 0;
  for (int c = 0; c < vpp; ++c) n += layers_of(virtual_stage(p, c));
  return n;
}

int PipelineLayout::max_stage_layers() const {
  int n = 0;
  for (int p = 0; p < pp; ++p) n = std::max(n, stage_layers(p));
  return n;
}

bool PipelineLayout::even() const {
  for (int v = 1; v < virtual_stages(); ++v) {
    if (layers_of(v) != layers_of(0)) return false;
  }
  return true;
}

std::string PipelineLayout::text() const {
  const int n = virtual_stages();
  std::vector<std::string> stage(static_cast<std::size_t>(n));
  for (int v = 0; v < n; ++v) {
    const int k = layers_of(v);
    std::string& s = stage[static_cast<std::size_t>(v)];
    if (v == 0) s += "E";
    if (k == 1) s += "t";
    if (k > 1) s += fmt::format("t*{}", k);
    if (v == n - 1) s += "L";
  }
  // Runs of equal stages fold into "(s|)*k"; at the very end the last one
  // stands alone, so that no empty stage follows the final separator.
  std::string out;
  for (int v = 0; v < n;) {
    int run = 1;
    while (v + run < n && stage[static_cast<std::size_t>(v + run)] == stage[static_cast<std::size_t>(v)]) ++run;
    const std::string& s = stage[static_cast<std::size_t>(v)];
    const bool last = v + run == n;
    const int folded = last ? run - 1 : run;
    if (folded == 1) out += s + "|";
    if (folded > 1) out += fmt::format("({}|)*{}", s, folded);
    if (last) out += s;
    v += run;
  }
  return out;
}

namespace {

// Megatron's layout text, expanded: "X*N" and "(...)*N" repeat, whitespace is
// ignored. Grammar: seq := item*; item := atom ('*' digits)?; atom := one of
// "EtLm|" or '(' seq ')'.
class LayoutExpander {
 public:
  explicit LayoutExpander(std::string_view text) : text_(text) {}

  // The expanded text, or an error message.
  bool run(std::string& out, std::string& error) {
    if (!sequence(out, error)) return false;
    skip_space();
    if (pos_ < text_.size()) {
      error = fmt::format("unexpected '{}' at character {}", character(), pos_ + 1);
      return false;
    }
    return true;
  }

 private:
  // Far more than any pipeline needs; stops "(((t*1000)*1000)*1000)" early.
  static constexpr std::size_t kMaxExpanded = 1 << 20;

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  // The character at pos_ whole: a UTF-8 sequence is not cut after its first byte.
  [[nodiscard]] std::string_view character() const {
    const auto lead = static_cast<unsigned char>(text_[pos_]);
    const std::size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return text_.substr(pos_, n);
  }

  bool sequence(std::string& out, std::string& error) {
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == ')') return true;
      std::string atom;
      const char c = text_[pos_];
      if (c == '(') {
        const std::size_t open = pos_++;
        if (!sequence(atom, error)) return false;
        if (pos_ >= text_.size()) {
          error = fmt::format("unclosed '(' at character {}", open + 1);
          return false;
        }
        ++pos_;  // ')'
      } else if (std::string_view("EtLm|").find(c) != std::string_view::npos) {
        atom = std::string(1, c);
        ++pos_;
      } else {
        error = fmt::format("unexpected '{}' at character {} (expected E, t, L, |, '(' or ')')", character(), pos_ + 1);
        return false;
      }
      skip_space();
      std::size_t times = 1;
      if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        skip_space();
        const std::size_t start = pos_;
        times = 0;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && times <= kMaxExpanded) {
          times = times * 10 + static_cast<std::size_t>(text_[pos_++] - '0');
        }
        if (pos_ == start) {
          error = fmt::format("expected a count after '*' at character {}", start + 1);
          return false;
        }
      }
      if (out.size() + atom.size() * times > kMaxExpanded) {
        error = fmt::format("expands to more than {} symbols", kMaxExpanded);
        return false;
      }
      for (std::size_t i = 0; i < times; ++i) out += atom;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

PipelineLayout from_counts(const std::vector<int>& counts, int pp, int vpp) {
  PipelineLayout l;
  l.pp = pp;
  l.vpp = vpp;
  l.first_layer.assign(1, 0);
  for (int k : counts) l.first_layer.push_back(l.first_layer.back() + k);
  return l;
}

}  // namespace

std::vector<core::Problem> parse_pipeline_layout(std::string_view text, int pp, int vpp, int layers,
                                                 PipelineLayout& out) {
  auto problem = [&text](const std::string& what) {
    return std::vector<core::Problem>{{"pipeline_layout", fmt::format("\"{}\": {}", text, what)}};
  };
  std::string flat, error;
  if (!LayoutExpander(text).run(flat, error)) return problem(error);
  std::vector<std::string> stages(1);
  for (char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  const auto n = static_cast<std::size_t>(pp) * static_cast<std::size_t>(vpp);
  if (stages.size() != n) {
    return problem(fmt::format("expected pp x vpp = {} x {} = {} virtual stages separated by '|', got {}", pp, vpp, n,
                               stages.size()));
  }
  if (flat.find('m') != std::string::npos) {
    return problem("multi-token-prediction layers ('m') are not modelled: expected E, t and L only");
  }
  const auto count = [&flat](char c) { return std::count(flat.begin(), flat.end(), c); };
  if (count('E') != 1 || stages.front().front() != 'E') {
    return problem("expected one 'E' (the embedding), first in the first virtual stage");
  }
  if (count('L') != 1 || stages.back().empty() || stages.back().back() != 'L') {
    return problem("expected one 'L' (the head and loss), last in the last virtual stage");
  }
  if (count('t') != layers) {
    return problem(fmt::format("expected {} transformer layers ('t'), got {}", layers, count('t')));
  }
  std::vector<int> counts;
  for (const auto& s : stages) counts.push_back(static_cast<int>(std::count(s.begin(), s.end(), 't')));
  out = from_counts(counts, pp, vpp);
  return {};
}

PipelineLayout balanced_layout(int layers, int pp, int vpp) {
  const int n = pp * vpp;
  const int per = (layers + n - 1) / n;
  std::vector<int> counts(static_cast<std::size_t>(n), per);
  // Take the shortfall from the ends inwards: v = 0, n-1, 1, n-2, ...
  int shortfall = per * n - layers;
  for (int i = 0; shortfall > 0; ++i) {
    const int v = i % 2 == 0 ? (i / 2) % n : n - 1 - (i / 2) % n;
    if (counts[static_cast<std::size_t>(v)] == 0) continue;
    --counts[static_cast<std::size_t>(v)];
    --shortfall;
  }
  return from_counts(counts, pp, vpp);
}

namespace {

std::vector<core::Problem> check_layout(const models::ModelSpec& m, const PlanOptions& o, PipelineLayout& out) {
  if (o.pp < 1 || o.vpp < 1) return {{o.pp < 1 ? "pp" : "vpp", "expected a positive size"}};
  const int n = o.pp * o.vpp;
  const bool first_last = o.first_stage_layers || o.last_stage_layers;
  if (o.pipeline_layout) {
    if (first_last) {
      return {{"pipeline_layout", "expected either pipeline_layout or first_stage_layers/last_stage_layers, not both"}};
    }
    return parse_pipeline_layout(*o.pipeline_layout, o.pp, o.vpp, m.layers, out);
  }
  if (!first_last) {
    if (m.layers % n != 0) {
      return {{o.vpp > 1 ? "vpp" : "pp",
               fmt::format("expected pp x vpp to divide the {} layers of {}, got {} x {} (or give the first and "
                           "last stages' layer counts, or a pipeline layout)",
                           m.layers, m.name, o.pp, o.vpp)}};
    }
    out = from_counts(std::vector<int>(static_cast<std::size_t>(n), m.layers / n), o.pp, o.vpp);
    return {};
  }
  // Megatron's uneven first and last stages: each divides by vpp, the rest
  // splits evenly over the stages between, vpp chunks each.
  const std::string field = o.first_stage_layers ? "first_stage_layers" : "last_stage_layers";
  if (o.pp < 2) return {{field, "an uneven first or last stage needs pp > 1"}};
  const int first = o.first_stage_layers.value_or(-1), last = o.last_stage_layers.value_or(-1);
  for (auto [k, name] : {std::pair{first, "first_stage_layers"}, std::pair{last, "last_stage_layers"}}) {
    if (k >= 0 && k % o.vpp != 0) {
      return {{name,
               fmt::format("expected a multiple of vpp = {}, got {} (a pipeline_layout places any counts)", o.vpp, k)}};
    }
  }
  const int middle_stages = o.pp - (first >= 0 ? 1 : 0) - (last >= 0 ? 1 : 0);
  const int rest = m.layers - std::max(first, 0) - std::max(last, 0);
  if (rest < 0) {
    return {{field, fmt::format("the first and last stages hold {} layers; {} has {}",
                                std::max(first, 0) + std::max(last, 0), m.name, m.layers)}};
  }
  if ((middle_stages == 0 && rest != 0) || (middle_stages > 0 && rest % (middle_stages * o.vpp) != 0)) {
    return {{field, fmt::format("the other {} layers of {} do not split evenly over the {} other stages x vpp {}", rest,
                                m.name, middle_stages, o.vpp)}};
  }
  std::vector<int> counts;
  PipelineLayout placement;  // where each virtual stage runs (ZB-V: in a V)
  placement.pp = o.pp;
  placement.v_shape = traits(o.pipeline_schedule).v_shape;
  for (int v = 0; v < n; ++v) {
    const int p = placement.stage_of(v);
    const int k = p == 0 && first >= 0         ? first / o.vpp
                  : p == o.pp - 1 && last >= 0 ? last / o.vpp
                                               : rest / (middle_stages * o.vpp);
    counts.push_back(k);
  }
  out = from_counts(counts, o.pp, o.vpp);
  return {};
}

}  // namespace

std::vector<core::Problem> check_pipeline_layout(const models::ModelSpec& m, const PlanOptions& o,
                                                 PipelineLayout& out) {
  std::vector<core::Problem> ps = check_layout(m, o, out);
  // A virtual stage with nothing to run (no layer, and neither the embedding
  // of the first nor the head of the last) would have to pass activations
  // and gradients through; hzp does not lower such stages (issue 42, item 3).
  for (int v = 1; ps.empty() && v + 1 < out.virtual_stages(); ++v) {
    if (out.layers_of(v) > 0) continue;
    const std::string field = o.pipeline_layout      ? "pipeline_layout"
                              : o.first_stage_layers ? "first_stage_layers"
                                                     : "last_stage_layers";
    ps.push_back({field, fmt::format("expected every pipeline stage between the first and the last to hold a "
                                     "layer, got none on virtual stage {} (stage {}, chunk {}): hzp does not model "
                                     "stages that only pass activations through",
                                     v, out.stage_of(v), out.chunk_of(v))});
  }
  out.v_shape = ps.empty() && traits(o.pipeline_schedule).v_shape;
  out.dual = ps.empty() && traits(o.pipeline_schedule).mirrored;
  return ps;
}

PipelineLayout pipeline_layout(const models::ModelSpec& m, const PlanOptions& o) {
  PipelineLayout l;
  std::vector<core::Problem> ps = check_pipeline_layout(m, o, l);
  if (!ps.empty()) throw core::ProblemError(std::move(ps));
  return l;
}

}  // namespace hzp::plan
