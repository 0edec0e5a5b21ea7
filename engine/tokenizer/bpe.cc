#include "engine/tokenizer/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& json,
                                                             const JsonLocation& at) {
  if (!json.is_object()) return JsonError(at, "expected a model object");
  const std::string type = GetStringOr(json, "type", "BPE");
  if (type != "BPE") return JsonUnsupported(at.Child("type"), "model type", type);
  if (auto d = json.find("dropout"); d != json.end() && d->is_number() && d->get<double>() > 0) {
    return JsonUnsupported(at.Child("dropout"), "BPE option", "dropout > 0");
  }
  std::unique_ptr<BpeModel> model(new BpeModel());

  const auto vocab = json.find("vocab");
  if (vocab == json.end() || !vocab->is_object()) {
    return JsonError(at.Child("vocab"), "expected an object mapping tokens to ids");
  }
  model->vocab_.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > (1 << 30)) {
      return JsonError(at.Child("vocab"), absl::StrCat("token '", token, "' has an invalid id"));
    }
    const auto id = id_json.get<int32_t>();
    model->vocab_[token] = id;
    if (static_cast<size_t>(id) >= model->id_to_token_.size()) model->id_to_token_.resize(id + 1);
    model->id_to_token_[id] = token;
  }

  model->continuing_subword_prefix_ = GetStringOr(json, "continuing_subword_prefix", "");
  model->end_of_word_suffix_ = GetStringOr(json, "end_of_word_suffix", "");
  model->fuse_unk_ = GetBoolOr(json, "fuse_unk", false);
  model->byte_fallback_ = GetBoolOr(json, "byte_fallback", false);
  model->ignore_merges_ = GetBoolOr(json, "ignore_merges", false);
  if (auto unk = json.find("unk_token"); unk != json.end() && unk->is_string()) {
    const auto id = model->TokenToId(unk->get<std::string>());
    if (!id) {
      return JsonError(at.Child("unk_token"),
                       absl::StrCat("unk token '", unk->get<std::string>(), "' is not in vocab"));
    }
    model->unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b) {
    model->byte_fallback_ids_[b] = model->TokenToId(absl::StrFormat("<0x%02X>", b)).value_or(-1);
  }
  for (char32_t cp = 0; cp < 512; ++cp) {
    std::string s;
    AppendUtf8(cp, &s);
    model->single_char_ids_[cp] = model->TokenToId(s).value_or(-1);
  }

  const auto merges = json.find("merges");
  if (merges == json.end() || !merges->is_array()) {
    return JsonError(at.Child("merges"), "expected an array");
  }
  model->merges_.reserve(merges->size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
  int32_t rank = 0;
  for (size_t i = 0; i < merges->size(); ++i) {
    const auto& m = (*merges)[i];
    const JsonLocation merge_at = at.Child("merges").Child(i);
    std::string a, b;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      if (line.starts_with("#version")) continue;
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() != 2) return JsonError(merge_at, "expected \"left right\"");
      a = parts[0];
      b = parts[1];
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return JsonError(merge_at, "expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto a_id = model->TokenToId(a);
    const auto b_id = model->TokenToId(b);
    const std::string merged = a + b.substr(std::min(prefix_len, b.size()));
    const auto new_id = model->TokenToId(merged);
    if (!a_id || !b_id || !new_id) {
      return JsonError(merge_at, absl::StrCat("merge '", a, "' + '", b, "' uses a token missing ",
                                              "from the vocabulary"));
    }
    model->merges_[PairKey(*a_id, *b_id)] = Merge{rank, *new_id};
    ++rank;
  }
  return model;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& token = id_to_token_[id];
  // Holes in the id range have empty strings; the empty string is never a real token.
  return token.empty() ? nullptr : &token;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  int32_t pending_unk = -1;  // an unk not yet emitted (it may still be fused), or -1
  const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    const char32_t cp = NextCodePoint(word, &pos);
    int32_t id = -1;
    if (!affixes && cp < 512) {
      id = single_char_ids_[cp];
      piece.assign(word.substr(begin, pos - begin));
    } else {
      piece.clear();
      if (begin > 0) piece.append(continuing_subword_prefix_);
      piece.append(word.substr(begin, pos - begin));
      if (pos == word.size()) piece.append(end_of_word_suffix_);
      id = TokenToId(piece).value_or(-1);
    }
    if (id >= 0) {
      if (pending_unk >= 0) symbols->push_back(pending_unk);
      pending_unk = -1;
      symbols->push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char byte : piece) all &= byte_fallback_ids_[byte] >= 0;
      if (all) {
        // As in HF: a pending unk is not flushed before byte-fallback tokens.
        for (unsigned char byte : piece) symbols->push_back(byte_fallback_ids_[byte]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) symbols->push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) symbols->push_back(pending_unk);
}

void BpeModel::MergeAll(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  if (n < 2) return;
  std::vector<int32_t>& ids = *symbols;
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> removed(n, false);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges_.find(PairKey(ids[pos], ids[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int pos = top.pos;
    if (removed[pos] || next[pos] < 0) continue;
    const int right = next[pos];
    const auto it = merges_.find(PairKey(ids[pos], ids[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    ids[pos] = top.new_id;
    removed[right] = true;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    consider(prev[pos]);
    consider(pos);
  }
  int out = 0;
  for (int i = 0; i < n; ++i) {
    if (!removed[i]) ids[out++] = ids[i];
  }
  ids.resize(out);
}

void BpeModel::ClearCache() const {
  MutexLock lock(&cache_mutex_);
  cache_.clear();
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = TokenToId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    MutexLock lock(&cache_mutex_);
    const auto it = cache_.find(absl::string_view(word.data(), word.size()));
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  InitialSymbols(word, &symbols);
  MergeAll(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    MutexLock lock(&cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(word, std::move(symbols));
  }
}

}  // namespace gpeserve::tokenizer
