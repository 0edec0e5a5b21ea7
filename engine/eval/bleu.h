// Corpus BLEU exactly as sacreBLEU computes it by default (version 2.x: one reference,
// mixed case, the 13a tokenizer, exponential smoothing, no effective order), so that scores
// printed by gpeserve can be compared with published sacreBLEU numbers.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpeserve::eval {

// The sacreBLEU release whose behaviour this reproduces (tests/reference checks it).
inline constexpr char kSacreBleuVersion[] = "2.6.0";

struct BleuScore {
  double score = 0;                    // 0..100
  std::array<double, 4> precisions{};  // n-gram precisions, 0..100
  double brevity_penalty = 0;
  int64_t sys_len = 0, ref_len = 0;  // tokens
  std::array<int64_t, 4> correct{}, total{};

  // "BLEU = 35.21 67.9/42.1/28.4/19.3 (BP = 1.000 ratio = 1.003 hyp_len = 1234 ref_len = 1230)"
  std::string ToString() const;
  // "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
  static std::string Signature();
};

// sacreBLEU's "13a" tokenization of one segment (mteval-v13a): tokens joined by single spaces.
std::string Tokenize13a(std::string_view segment);

// Corpus BLEU of hypotheses against one reference each. REQUIRES: equal sizes.
BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::string>& references);

}  // namespace gpeserve::eval
