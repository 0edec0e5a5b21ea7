// BLEU and latency scoring input: hypothesis/reference lines of arbitrary bytes give a score in
// [0, 100]; delays and lengths from the bytes give finite AL and LAAL when the lengths are
// positive.
#include <cmath>
#include <cstring>

#include "engine/eval/bleu.h"
#include "engine/eval/latency.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  // Lines alternate hypothesis, reference.
  std::vector<std::string> hyps, refs;
  std::string_view text = fuzz::Bytes(data, size);
  for (bool hyp = true; !text.empty(); hyp = !hyp) {
    const size_t end = std::min(text.find('\n'), text.size());
    (hyp ? hyps : refs).emplace_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  refs.resize(hyps.size());
  const eval::BleuScore bleu = eval::CorpusBleu(hyps, refs);
  FUZZ_CHECK(bleu.score >= 0 && bleu.score <= 100.0000001);
  // The same bytes as small delays (one per byte) and two lengths.
  if (size >= 2) {
    std::vector<double> delays;
    double d = 0;
    for (size_t i = 2; i < size; ++i) delays.push_back(d += data[i] % 4);
    const double x = 1 + data[0], y = 1 + data[1];
    const double al = eval::AverageLagging(delays, x, y);
    const double laal = eval::LengthAdaptiveAverageLagging(delays, x, y);
    FUZZ_CHECK(std::isfinite(al) && std::isfinite(laal));
  }
  return 0;
}
