// gpe eval: run a data set through streaming (or batch) sessions in-process and report BLEU,
// AL and LAAL, like the reference evaluation script.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/eval/bleu.h"
#include "engine/eval/latency.h"
#include "engine/session/runner.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

int Fail(const std::string& message, int code = 1) {
  std::cerr << "gpe: " << message << "\n";
  return code;
}

const char* ReasonName(policy::DoneReason reason) {
  switch (reason) {
    case policy::DoneReason::kEndOfSequence:
      return "end_of_sequence";
    case policy::DoneReason::kMaxNewTokens:
      return "max_new_tokens";
    case policy::DoneReason::kMaxLag:
      return "max_lag";
    case policy::DoneReason::kNone:
      return "none";
  }
  return "none";
}

}  // namespace

int EvalCommand(int argc, char** argv, int first) {
  Args args("gpe eval --model DIR --data FILE.json [options]",
            "Runs every item of a data set (a JSON array of objects with source and target\n"
            "strings) through a session, one at a time, and prints corpus BLEU (sacreBLEU\n"
            "defaults), AL and LAAL (in source units: words + the end segment), tokens per\n"
            "sentence and wall time per sentence. Paradigms (docs/GPE.md): gpe (group\n"
            "positions), reencode (batch-streaming: re-encode the target after each read),\n"
            "interleaved (one chronological sequence); --mode batch reads the whole source\n"
            "first and uses plain causal positions.");
  args.AddString("model", "DIR", "model folder");
  args.AddString("profile", "NAME|FILE", "prompt profile", "qwen2.5");
  args.AddString("instruction", "TEXT", "override the profile's instruction");
  args.AddString("data", "FILE", "data set: JSON array of objects");
  args.AddString("source_key", "KEY", "source field", "en");
  args.AddString("target_key", "KEY", "reference field", "de");
  args.AddString("mode", "streaming|batch", "streaming (wait-k) or batch (offline)", "streaming");
  args.AddString("paradigm", "gpe|reencode|interleaved", "streaming paradigm", "gpe");
  args.AddString("wait_k", "K", "source units read before the first write", "3");
  args.AddString("split", "word|token", "source unit", "word");
  args.AddString("phi", "N", "first target position id (default: the profile's)");
  args.AddString("max_new_tokens", "N", "target tokens per sentence at most", "256");
  args.AddString("limit", "N", "evaluate the first N items only");
  args.AddString("out", "FILE", "write one JSON line per sentence");
  args.AddString("dtype", "fp32|bf16|fp16", "serving dtype", "fp32");
  args.AddString("device", "cpu|cuda", "device", "cpu");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  args.AddString("kv_blocks", "N", "KV cache blocks", "1024");
  args.AddString("block_size", "N", "tokens per KV block", "16");
  bool help = false;
  if (absl::Status s = args.Parse(argc, argv, first, &help); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n\n" << args.Help();
    return 2;
  }
  if (help) {
    std::cout << args.Help();
    return 0;
  }
  if (!args.Get("model") || !args.Get("data")) {
    std::cerr << "gpe: --model and --data are required\n\n" << args.Help();
    return 2;
  }
  int wait_k, max_new, threads, kv_blocks, block_size, limit = -1;
  int64_t phi = -1;
  if (!absl::SimpleAtoi(*args.Get("wait_k"), &wait_k) || wait_k < 1 ||
      !absl::SimpleAtoi(*args.Get("max_new_tokens"), &max_new) || max_new < 1 ||
      !absl::SimpleAtoi(*args.Get("threads"), &threads) ||
      !absl::SimpleAtoi(*args.Get("kv_blocks"), &kv_blocks) || kv_blocks < 1 ||
      !absl::SimpleAtoi(*args.Get("block_size"), &block_size) || block_size < 1 ||
      (args.Get("limit") && !absl::SimpleAtoi(*args.Get("limit"), &limit)) ||
      (args.Get("phi") && (!absl::SimpleAtoi(*args.Get("phi"), &phi) || phi < 0))) {
    return Fail(
        "--wait_k, --max_new_tokens, --kv_blocks, --block_size take positive whole "
        "numbers; --phi, --limit, --threads whole numbers",
        2);
  }
  const std::string mode = *args.Get("mode"), paradigm = *args.Get("paradigm");
  if (mode != "streaming" && mode != "batch") return Fail("--mode takes streaming or batch", 2);
  auto parsed_paradigm = session::ParseParadigm(paradigm);
  if (!parsed_paradigm.ok() || *parsed_paradigm == session::Paradigm::kBatch) {
    return Fail("--paradigm takes gpe, reencode or interleaved (for batch: --mode batch)", 2);
  }
  const std::string split = *args.Get("split");
  if (split != "word" && split != "token") return Fail("--split takes word or token", 2);

  auto profile = policy::LoadProfile(*args.Get("profile"));
  if (!profile.ok()) return Fail(std::string(profile.status().message()));
  session::SessionOptions options;
  options.profile = *profile;
  if (auto text = args.Get("instruction")) options.profile.instruction = *text;
  if (phi >= 0) options.profile.phi = phi;
  options.policy.wait_k = wait_k;
  options.policy.max_new_tokens = max_new;
  options.policy.split = split == "token" ? policy::SplitMode::kToken : policy::SplitMode::kWord;
  options.paradigm = mode == "batch" ? session::Paradigm::kBatch : *parsed_paradigm;

  std::ifstream data_in(*args.Get("data"));
  if (!data_in) return Fail(*args.Get("data") + ": cannot open file");
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(data_in);
  } catch (const nlohmann::json::exception& e) {
    return Fail(*args.Get("data") + ": not valid JSON: " + e.what());
  }
  if (!data.is_array()) return Fail(*args.Get("data") + ": expected a JSON array of objects");
  const std::string source_key = *args.Get("source_key"), target_key = *args.Get("target_key");
  for (size_t i = 0; i < data.size(); ++i) {
    if (!data[i].is_object() || !data[i].contains(source_key) || !data[i][source_key].is_string() ||
        !data[i].contains(target_key) || !data[i][target_key].is_string()) {
      return Fail(absl::StrFormat("%s: item %d needs string fields '%s' and '%s'",
                                  *args.Get("data"), i, source_key, target_key));
    }
  }
  const size_t count = limit >= 0 ? std::min<size_t>(limit, data.size()) : data.size();

  auto model = model::Model::Load(
      *args.Get("model"),
      {.dtype = *args.Get("dtype"), .device = *args.Get("device"), .threads = threads});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const model::ModelConfig& c = (*model)->config();
  kv::BlockAllocator allocator({.block_size = block_size, .num_blocks = kv_blocks});
  auto pool = kv::KvPool::Create({.block_size = block_size, .num_blocks = kv_blocks},
                                 {c.num_layers, c.num_kv_heads, c.head_dim}, (*model)->dtype(),
                                 (*model)->device());
  if (!pool.ok()) return Fail(std::string(pool.status().message()));

  std::ofstream out;
  if (auto path = args.Get("out")) {
    out.open(*path);
    if (!out) return Fail(*path + ": cannot create file");
  }
  const bool tty = ::isatty(STDERR_FILENO);
  std::vector<std::string> hyps, refs;
  double al_sum = 0, laal_sum = 0, seconds = 0;
  int64_t source_tokens = 0, target_tokens = 0, forward_tokens = 0;
  for (size_t i = 0; i < count; ++i) {
    const std::string source = data[i][source_key].get<std::string>();
    const std::string reference = data[i][target_key].get<std::string>();
    const std::vector<std::string> words = absl::StrSplit(source, ' ', absl::SkipWhitespace());
    const auto start = std::chrono::steady_clock::now();
    auto session = session::CreateOfflineSession(**model, options, words);
    if (!session.ok()) return Fail(absl::StrFormat("item %d: %s", i, session.status().message()));
    auto result = session::RunToCompletion(**model, **session, *pool, allocator);
    if (!result.ok()) return Fail(absl::StrFormat("item %d: %s", i, result.status().message()));
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<std::string> target_words =
        absl::StrSplit(result->text, ' ', absl::SkipWhitespace());
    const std::vector<double> delays(result->delays.begin(), result->delays.end());
    const double x = static_cast<double>(result->source_units);
    const double y = static_cast<double>(target_words.size());
    al_sum += eval::AverageLagging(delays, x, y);
    laal_sum += eval::LengthAdaptiveAverageLagging(delays, x, y);
    source_tokens += result->counters.source_tokens;
    target_tokens += static_cast<int64_t>(result->output.size());
    forward_tokens += result->counters.forward_tokens;
    hyps.push_back(result->text);
    refs.push_back(reference);
    if (out.is_open()) {
      out << nlohmann::json{{"source", source},
                            {"reference", reference},
                            {"output", result->text},
                            {"output_ids", result->output},
                            {"delays", result->delays},
                            {"forward_tokens", result->counters.forward_tokens},
                            {"reason", ReasonName(result->reason)}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\n";
    }
    if (tty) {
      std::fprintf(stderr, "\r[%zu/%zu] %.1f s", i + 1, count, seconds);
    } else if ((i + 1) % 10 == 0 || i + 1 == count) {
      std::fprintf(stderr, "gpe: %zu/%zu sentences, %.1f s\n", i + 1, count, seconds);
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  const double n = std::max<double>(1, static_cast<double>(count));
  const eval::BleuScore bleu = eval::CorpusBleu(hyps, refs);
  std::cout << bleu.ToString() << "\n"
            << "signature: " << eval::BleuScore::Signature() << "\n"
            << absl::StrFormat("AL = %.3f  LAAL = %.3f  (source units; %d sentences, %s, k=%d)\n",
                               al_sum / n, laal_sum / n, count,
                               mode == "batch" ? "batch" : paradigm, wait_k)
            << absl::StrFormat(
                   "per sentence: %.1f source tokens, %.1f target tokens, %.1f forward tokens, "
                   "%.1f ms\n",
                   source_tokens / n, target_tokens / n, forward_tokens / n, 1e3 * seconds / n);
  return 0;
}

}  // namespace gpeserve::cli
