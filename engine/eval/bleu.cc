#include "engine/eval/bleu.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace gpeserve::eval {
namespace {

// Characters 13a surrounds with spaces: {-~ [-` space-& (-+ :-@ /
bool IsPunctuation13a(unsigned char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsPeriodOrComma(unsigned char c) { return c == '.' || c == ','; }

// Python's str.isspace() for the code point starting at s[*pos]; advances *pos past it when
// true. Multi-byte UTF-8 sequences never contain ASCII bytes, so byte-wise rules elsewhere in
// this file give the same result as Python's code-point regexes.
bool ConsumePythonSpace(std::string_view s, size_t* pos) {
  const auto c = static_cast<unsigned char>(s[*pos]);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) {
    ++*pos;
    return true;
  }
  if (c < 0xC2) return false;
  uint32_t cp = 0;
  size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (*pos + len > s.size()) return false;
  cp = c & (0x7F >> len);
  for (size_t i = 1; i < len; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + i]) & 0x3F);
  const bool space = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                     cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
  if (space) *pos += len;
  return space;
}

// re.sub of a two-character pattern, left to right, without overlaps: when `match(a, b)`
// holds for bytes a, b at i, i+1, `emit` writes the replacement and both are consumed.
template <typename Match, typename Emit>
std::string SubstitutePairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() * 2);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() &&
        match(static_cast<unsigned char>(s[i]), static_cast<unsigned char>(s[i + 1]))) {
      emit(s[i], s[i + 1], &out);
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

using NgramCounts = std::map<std::vector<std::string_view>, int64_t>;

NgramCounts CountNgrams(const std::vector<std::string_view>& tokens, size_t n) {
  NgramCounts counts;
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    ++counts[std::vector<std::string_view>(tokens.begin() + i, tokens.begin() + i + n)];
  }
  return counts;
}

std::vector<std::string_view> SplitSpaces(const std::string& s) {
  std::vector<std::string_view> tokens;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ' ') {
      if (i > start) tokens.emplace_back(s.data() + start, i - start);
      start = i + 1;
    }
  }
  return tokens;
}

}  // namespace

std::string Tokenize13a(std::string_view segment) {
  std::string line(segment);
  // sacreBLEU strips trailing whitespace before tokenizing.
  while (!line.empty()) {
    size_t pos = line.size() - 1;
    while (pos > 0 && (static_cast<unsigned char>(line[pos]) & 0xC0) == 0x80) --pos;
    size_t probe = pos;
    if (!ConsumePythonSpace(line, &probe)) break;
    line.resize(pos);
  }
  line = absl::StrReplaceAll(line, {{"<skipped>", ""}, {"-\n", ""}});
  line = absl::StrReplaceAll(line, {{"\n", " "}});
  if (line.find('&') != std::string::npos) {
    line = absl::StrReplaceAll(line, {{"&quot;", "\""}});
    line = absl::StrReplaceAll(line, {{"&amp;", "&"}});
    line = absl::StrReplaceAll(line, {{"&lt;", "<"}});
    line = absl::StrReplaceAll(line, {{"&gt;", ">"}});
  }
  std::string s = " " + line + " ";
  std::string spaced;
  for (unsigned char c : s) {
    if (IsPunctuation13a(c)) {
      spaced.push_back(' ');
      spaced.push_back(static_cast<char>(c));
      spaced.push_back(' ');
    } else {
      spaced.push_back(static_cast<char>(c));
    }
  }
  // Period and comma unless preceded by a digit; unless followed by a digit; dash after a digit.
  s = SubstitutePairs(
      spaced, [](unsigned char a, unsigned char b) { return !IsDigit(a) && IsPeriodOrComma(b); },
      [](char a, char b, std::string* out) {
        *out += {a, ' ', b, ' '};
      });
  s = SubstitutePairs(
      s, [](unsigned char a, unsigned char b) { return IsPeriodOrComma(a) && !IsDigit(b); },
      [](char a, char b, std::string* out) {
        *out += {' ', a, ' ', b};
      });
  s = SubstitutePairs(
      s, [](unsigned char a, unsigned char b) { return IsDigit(a) && b == '-'; },
      [](char a, char b, std::string* out) {
        *out += {a, ' ', b, ' '};
      });
  // ' '.join(line.split()): Python's whitespace, single spaces.
  std::string out;
  size_t pos = 0;
  bool pending_space = false;
  while (pos < s.size()) {
    if (ConsumePythonSpace(s, &pos)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(s[pos++]);
  }
  return out;
}

BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::string>& references) {
  BleuScore b;
  for (size_t i = 0; i < hypotheses.size() && i < references.size(); ++i) {
    const std::string hyp = Tokenize13a(hypotheses[i]);
    const std::string ref = Tokenize13a(references[i]);
    const auto hyp_tokens = SplitSpaces(hyp);
    const auto ref_tokens = SplitSpaces(ref);
    b.sys_len += static_cast<int64_t>(hyp_tokens.size());
    b.ref_len += static_cast<int64_t>(ref_tokens.size());
    for (size_t n = 1; n <= 4; ++n) {
      const NgramCounts hyp_counts = CountNgrams(hyp_tokens, n);
      const NgramCounts ref_counts = CountNgrams(ref_tokens, n);
      for (const auto& [ngram, count] : hyp_counts) {
        const auto it = ref_counts.find(ngram);
        if (it != ref_counts.end()) b.correct[n - 1] += std::min(count, it->second);
      }
      b.total[n - 1] += std::max<int64_t>(0, static_cast<int64_t>(hyp_tokens.size()) - n + 1);
    }
  }
  if (b.sys_len < b.ref_len) {
    b.brevity_penalty =
        b.sys_len > 0 ? std::exp(1.0 - static_cast<double>(b.ref_len) / b.sys_len) : 0.0;
  } else {
    b.brevity_penalty = 1.0;
  }
  bool any_correct = false;
  for (int64_t c : b.correct) any_correct |= c > 0;
  if (!any_correct) return b;  // score 0, precisions 0
  double smooth = 1.0;
  for (int n = 0; n < 4; ++n) {
    if (b.total[n] == 0) break;
    if (b.correct[n] == 0) {
      smooth *= 2;
      b.precisions[n] = 100.0 / (smooth * b.total[n]);
    } else {
      b.precisions[n] = 100.0 * b.correct[n] / b.total[n];
    }
  }
  double log_sum = 0;
  for (double p : b.precisions) log_sum += p > 0 ? std::log(p) : -9999999999.0;
  b.score = b.brevity_penalty * std::exp(log_sum / 4);
  return b;
}

std::string BleuScore::ToString() const {
  const double ratio = ref_len > 0 ? static_cast<double>(sys_len) / ref_len : 0.0;
  return absl::StrFormat(
      "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %d ref_len = %d)", score,
      precisions[0], precisions[1], precisions[2], precisions[3], brevity_penalty, ratio, sys_len,
      ref_len);
}

std::string BleuScore::Signature() {
  return absl::StrFormat("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:%s",
                         kSacreBleuVersion);
}

}  // namespace gpeserve::eval
