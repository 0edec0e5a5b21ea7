#include "engine/tokenizer/decoder.h"

#include <utility>

#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {
namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }
  bool HasByteFallback() const override {
    for (const auto& step : steps_) {
      if (step->HasByteFallback()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Maps byte-level characters back to bytes; a token with any character outside the map (an
// added token such as "<|im_end|>" written in plain text) contributes its own UTF-8 bytes.
// Everything is joined into one token and made valid UTF-8 (U+FFFD for ill-formed bytes).
class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t pos = 0; pos < token.size();) {
        const int byte = CharToByte(NextCodePoint(token, &pos));
        if (byte < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(byte));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes.append(token);
      }
    }
    tokens->assign(1, Utf8Lossy(bytes));
  }
};

// Turns runs of "<0xHH>" tokens into the text of their bytes; a run that is not valid UTF-8
// becomes one U+FFFD per byte token.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (ValidateUtf8(run).ok()) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back(kReplacementUtf8);
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : *tokens) {
      if (const int byte = ParseByteToken(token); byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
  }
  bool HasByteFallback() const override { return true; }

 private:
  static int HexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // The byte of a "<0xHH>" token, or -1.
  static int ParseByteToken(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    const int hi = HexValue(token[3]), lo = HexValue(token[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& token : *tokens) all.append(token);
    tokens->assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& token : *tokens) {
      size_t begin = 0, end = token.size();
      for (int i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      for (int i = 0; i < stop_ && end >= begin + content_.size() &&
                      token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::shared_ptr<const Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = ReplaceAll(*pattern_, token, content_);
  }

 private:
  std::shared_ptr<const Regex> pattern_;
  std::string content_;
};

// Replacement characters become spaces, except in the first token when a prefix was prepended
// at encoding time (prepend_scheme other than "never"), where they are dropped.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepended)
      : replacement_(std::move(replacement)), prepended_(prepended) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    const auto marker = Regex::Literal(replacement_);
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = ReplaceAll(*marker, (*tokens)[i], i == 0 && prepended_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool prepended_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& json,
                                                         const JsonLocation& at) {
  if (!json.is_object()) return JsonError(at, "expected a decoder object");
  auto type = GetString(json, "type", at);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    auto steps = ParseArray<Decoder>(json, "decoders", at, DecoderFromJson);
    if (!steps.ok()) return steps.status();
    return std::make_unique<SequenceDecoder>(*std::move(steps));
  }
  if (*type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (*type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (*type == "Fuse") return std::make_unique<FuseDecoder>();
  if (*type == "Strip") {
    auto content = GetString(json, "content", at);
    if (!content.ok()) return content.status();
    const int start = json.value("start", 0), stop = json.value("stop", 0);
    return std::make_unique<StripDecoder>(*std::move(content), start, stop);
  }
  if (*type == "Replace") {
    auto pattern = PatternFromJson(json, at);
    if (!pattern.ok()) return pattern.status();
    auto content = GetString(json, "content", at);
    if (!content.ok()) return content.status();
    return std::make_unique<ReplaceDecoder>(*std::move(pattern), *std::move(content));
  }
  if (*type == "Metaspace") {
    bool prepended = true;
    if (json.contains("prepend_scheme")) {
      prepended = GetStringOr(json, "prepend_scheme", "always") != "never";
    } else {
      prepended = GetBoolOr(json, "add_prefix_space", true);
    }
    return std::make_unique<MetaspaceDecoder>(GetStringOr(json, "replacement", "\u2581"),
                                              prepended);
  }
  return JsonUnsupported(at.Child("type"), "decoder", *type);
}

}  // namespace gpeserve::tokenizer
