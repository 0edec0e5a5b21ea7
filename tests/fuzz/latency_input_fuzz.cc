// `gpe score --latency` input (delay lists, or a gpe-client --log step log): scores or an error
// naming the line, never a crash; every score's line or session is one the input has.
#include "engine/eval/latency_input.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  const auto scored = eval::ScoreLatencyInput(fuzz::Bytes(data, size), "fuzz.jsonl");
  if (!scored.ok()) {
    FUZZ_CHECK(scored.status().message().rfind("fuzz.jsonl:", 0) == 0);
    return 0;
  }
  if (!scored->step_log) FUZZ_CHECK(scored->scores.size() <= size);
  return 0;
}
