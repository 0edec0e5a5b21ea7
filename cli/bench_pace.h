// gpe bench --pace: capacity at speech pace. Speakers arrive as in a live deployment: each of N
// slots streams a corpus sentence at W words/s into a session of its own and starts the next
// sentence's session when one ends (or, long-form, streams sentence after sentence into one
// session). Per N it prints the p50 and p99 word lag (engine/eval/word_lag.h: from the arrival
// of the source word a target word needed to its delivery), the lag split into waiting for a
// step and computing, the steps per word, and the largest N whose p99 stays within the SLO.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace gpeserve::model {
class Model;
}

namespace gpeserve::cli {

struct PaceOptions {
  double words_per_second = 2;  // each speaker's pace
  double lag_slo_seconds = 1;   // capacity: the largest count whose p99 lag is within this
  double seconds = 20;          // per count: sessions start during this long, then drain
  bool long_form = false;       // one long-form session per speaker instead of one per sentence
  uint64_t seed = 1;            // the corpus (engine/train/corpus.h)
  // > 0: a sentence session writes this many target tokens per source word (at most
  // max_new_tokens): a translation's length, for a random model that never ends by itself.
  double target_tokens_per_word = 0;
};

// Runs `counts` speakers (one row each) on an engine made from `engine_config` (its kv_blocks
// and max_sessions set here, to hold the largest count) with sessions configured as `config`;
// prints the rows and the capacity on stdout. Returns the process exit code.
int RunPaceRows(const std::shared_ptr<const model::Model>& model,
                engine::EngineConfig engine_config, engine::SessionConfig config,
                const std::vector<int>& counts, const PaceOptions& options);

}  // namespace gpeserve::cli
