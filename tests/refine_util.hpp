// Plan search's refinement of one answer, for the tests that check which
// variants it tries: a ZeRO-1 pipeline of `pp` stages of Llama-3 8B on 16
// H100s, set as the only answer found, then refined (explore::search::refine_best).
#pragma once

#include <cstdint>
#include <memory>

#include "explore/search_internal.hpp"

namespace hzp::test_util {

inline std::unique_ptr<explore::search::Search> refine_pipelined_answer(std::int64_t seq_len, std::int64_t sequences,
                                                                        int pp) {
  explore::PlanQuery q;
  q.model = "llama3-8b";
  q.gpus = {16};
  q.base.seq_len = seq_len;
  q.base.global_batch_sequences = sequences;
  auto s = std::make_unique<explore::search::Search>(q);
  plan::PlanOptions o = s->q.base;
  o.strategy = plan::Strategy::Zero1;
  o.pp = pp;
  explore::PlanChoice best;
  best.cluster = s->settings.at(0).cluster_name;
  best.gpus = 16;
  best.options = o;
  best.step_s = 1;
  s->found.push_back(best);
  explore::search::refine_best(*s);
  return s;
}

}  // namespace hzp::test_util
