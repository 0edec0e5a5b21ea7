#include "client/stream_long_form.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/eval/latency.h"
#include "engine/eval/words.h"
#include "nlohmann/json.hpp"

namespace gpeserve::client {

int StreamLongForm(v1::Gpeserve::Stub& stub, const ConnectOptions& connect,
                   v1::SessionConfig config, const flags::LongFormFlags& long_form,
                   const std::string& text, double words_per_second, bool json,
                   const ResponseCallback& on_response) {
  v1::LongForm& lf = *config.mutable_long_form();
  lf.set_enabled(true);
  for (const std::string& mark : long_form.options.segmenter.sentence_marks) {
    lf.add_sentence_marks(mark);
  }
  lf.set_max_segment_words(static_cast<uint32_t>(long_form.options.segmenter.max_segment_words));
  lf.set_context_segments(static_cast<uint32_t>(long_form.options.context_segments));
  std::vector<std::string> words;
  LongFormStream stream;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    for (std::string_view w : eval::SplitWords(std::string_view(line.data(), line.size()))) {
      words.emplace_back(w);
    }
    if (!long_form.cut_by_marks && !words.empty() &&
        (stream.boundaries.empty() || stream.boundaries.back() != words.size())) {
      stream.boundaries.push_back(words.size());
    }
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  std::string so_far;
  double laal_sum = 0;
  int64_t segments = 0, high_water = 0;
  std::vector<double> lags;
  stream.on_segment = [&](const v1::SegmentDone& s) {
    const std::vector<double> delays(s.delays().begin(), s.delays().end());
    const double x = static_cast<double>(s.source_units());
    const double y = static_cast<double>(eval::SplitWords(s.text()).size());
    const double laal = eval::LengthAdaptiveAverageLagging(delays, x, y);
    laal_sum += laal;
    ++segments;
    high_water = std::max(high_water, s.counters().kv_blocks_high_water());
    lags.insert(lags.end(), s.lags_ms().begin(), s.lags_ms().end());
    if (tty) std::printf("\r\033[K");
    std::printf("[segment %lld, words %lld-%lld, %s] %s  (LAAL %.2f%s)\n",
                static_cast<long long>(s.index()), static_cast<long long>(s.first_word()),
                static_cast<long long>(s.first_word() + s.words() - 1), s.cut().c_str(),
                s.text().c_str(), laal,
                s.source_units_unread() > 0
                    ? absl::StrFormat(", %d units never read", s.source_units_unread()).c_str()
                    : "");
    std::fflush(stdout);
    so_far.clear();
  };
  auto result = RunSession(
      stub, connect, config, words, words_per_second,
      [&](const v1::TokenDelta& d) {
        so_far += d.text();
        if (tty) {
          std::printf("\r\033[K[segment %lld, read %lld] %s", static_cast<long long>(d.segment()),
                      static_cast<long long>(d.source_units_read()), so_far.c_str());
          std::fflush(stdout);
        }
      },
      &stream, on_response);
  if (tty) std::printf("\n");
  if (!result.ok()) {
    std::cerr << "gpe-client: " << absl::StatusCodeToString(result.status().code()) << ": "
              << result.status().message() << "\n";
    return 1;
  }
  const v1::SessionDone& done = result->done;
  std::printf(
      "%lld segments, %zu words; StreamLAAL = %.3f (source units, mean over segments); lag per "
      "word p50 %.0f ms, p90 %.0f ms; KV high-water %lld blocks; %lld source units never read; "
      "%s\n",
      static_cast<long long>(done.segments()), words.size(),
      segments > 0 ? laal_sum / static_cast<double>(segments) : 0.0, eval::Percentile(lags, 50),
      eval::Percentile(lags, 90), static_cast<long long>(done.counters().kv_blocks_high_water()),
      static_cast<long long>(done.source_units_unread()), done.finish_reason().c_str());
  if (json) {
    nlohmann::json j = {{"segments", done.segments()},
                        {"words", words.size()},
                        {"stream_laal", segments > 0 ? laal_sum / segments : 0.0},
                        {"lag_ms_p50", eval::Percentile(lags, 50)},
                        {"lag_ms_p90", eval::Percentile(lags, 90)},
                        {"kv_blocks_high_water", done.counters().kv_blocks_high_water()},
                        {"source_units", done.source_units()},
                        {"source_units_unread", done.source_units_unread()},
                        {"finish_reason", done.finish_reason()},
                        {"forward_tokens", done.counters().forward_tokens()}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace gpeserve::client
