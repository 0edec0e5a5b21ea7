// Shared pieces of the fuzz targets (libFuzzer; scripts/fuzz builds and runs them): the
// built-in model's tokenizer from the source tree, JSON parsing without exceptions, and a check
// that stops the run (a finding) when a property the code promises does not hold.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace gpeserve::fuzz {

inline std::string_view Bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A broken promise: print it and abort (libFuzzer saves the input as a crash).
#define FUZZ_CHECK(condition)                                                                  \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #condition, __FILE__, __LINE__); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

// The built-in model's tokenizer (a byte-level BPE with added tokens), loaded once.
inline const tokenizer::Tokenizer& DefaultTokenizer() {
  static const std::shared_ptr<const tokenizer::Tokenizer> tokenizer = [] {
    auto loaded = tokenizer::Tokenizer::Load(GPESERVE_SOURCE_DIR "/models/default");
    if (!loaded.ok()) {
      std::fprintf(stderr, "cannot load the default tokenizer: %s\n",
                   std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return *loaded;
  }();
  return *tokenizer;
}

// `text` as JSON, or a discarded value (no exceptions).
inline nlohmann::json ParseJson(std::string_view text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace gpeserve::fuzz
