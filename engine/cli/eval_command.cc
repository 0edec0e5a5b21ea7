// gpe eval: run a data set through streaming (or batch) sessions in-process and report BLEU,
// AL and LAAL, like the reference evaluation script.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/engine.h"
#include "engine/eval/bleu.h"
#include "engine/eval/dataset.h"
#include "engine/eval/latency.h"
#include "engine/eval/words.h"
#include "engine/model/default_model.h"
#include "engine/session/runner.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

int Fail(const std::string& message, int code = 1) {
  std::cerr << "gpe: " << message << "\n";
  return code;
}

// What one sentence produced.
struct ItemResult {
  std::string text;
  std::vector<int32_t> output;
  std::vector<int64_t> delays;
  int64_t source_units = 0;
  session::SessionCounters counters;
  std::string reason;
};

using Progress = std::function<void(size_t finished)>;

// One sentence at a time, each session alone on the model.
absl::Status RunSequential(const model::Model& model, const session::SessionOptions& options,
                           const std::vector<std::vector<std::string>>& sources, int block_size,
                           int kv_blocks, const Progress& progress,
                           std::vector<ItemResult>* results) {
  const model::ModelConfig& c = model.config();
  kv::BlockAllocator allocator({.block_size = block_size, .num_blocks = kv_blocks});
  auto pool =
      kv::KvPool::Create({.block_size = block_size, .num_blocks = kv_blocks},
                         {c.num_layers, c.num_kv_heads, c.head_dim}, model.dtype(), model.device());
  if (!pool.ok()) return pool.status();
  for (size_t i = 0; i < sources.size(); ++i) {
    auto session = session::CreateOfflineSession(model, options, sources[i]);
    if (!session.ok()) {
      return absl::Status(session.status().code(),
                          absl::StrFormat("item %d: %s", i, session.status().message()));
    }
    auto r = session::RunToCompletion(model, **session, *pool, allocator);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrFormat("item %d: %s", i, r.status().message()));
    }
    (*results)[i] = {r->text,         r->output,   r->delays,
                     r->source_units, r->counters, policy::DoneReasonName(r->reason)};
    progress(i + 1);
  }
  return absl::OkStatus();
}

// Up to `concurrency` sentences in flight on the engine (continuous batching); each session
// gets its whole source at once, so its output equals the sequential run's.
absl::Status RunOnEngine(std::shared_ptr<const model::Model> model,
                         const engine::EngineConfig& config, const session::SessionOptions& options,
                         const std::vector<std::vector<std::string>>& sources, int concurrency,
                         const Progress& progress, std::vector<ItemResult>* results,
                         engine::EngineStats* stats) {
  auto eng = engine::Engine::Create(std::move(model), config);
  if (!eng.ok()) return eng.status();
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, engine::SessionEvent>> finished;  // guarded by mu
  std::map<size_t, std::shared_ptr<engine::SessionHandle>> in_flight;
  size_t next = 0, done = 0;
  absl::Status failure;
  while (done < sources.size() && failure.ok()) {
    while (next < sources.size() && in_flight.size() < static_cast<size_t>(concurrency)) {
      const size_t index = next++;
      auto handle = (*eng)->Open({.options = options}, [&, index](const engine::SessionEvent& e) {
        if (e.kind == engine::SessionEvent::Kind::kTokens) return true;
        {
          std::lock_guard<std::mutex> lock(mu);
          finished.emplace_back(index, e);
        }
        cv.notify_one();
        return true;
      });
      if (!handle.ok()) {
        failure = absl::Status(handle.status().code(),
                               absl::StrFormat("item %d: %s", index, handle.status().message()));
        break;
      }
      (*handle)->Push(sources[index]);
      (*handle)->EndSource();
      in_flight[index] = *handle;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !finished.empty(); });
    while (!finished.empty()) {
      auto [index, e] = std::move(finished.front());
      finished.pop_front();
      in_flight.erase(index);
      ++done;
      if (e.kind == engine::SessionEvent::Kind::kError) {
        if (failure.ok()) {
          failure = absl::Status(e.status.code(),
                                 absl::StrFormat("item %d: %s", index, e.status.message()));
        }
        continue;
      }
      (*results)[index] = {e.full_text, e.output, e.delays, e.source_units, e.counters, e.reason};
    }
    lock.unlock();
    progress(done);
  }
  *stats = (*eng)->stats();
  (*eng)->Shutdown();
  return failure;
}

}  // namespace

int EvalCommand(int argc, char** argv, int first) {
  Args args("gpe eval [--model DIR] --data FILE.json [options]",
            "Runs every item of a data set (a JSON array of objects with source and target\n"
            "strings) through a session (one at a time, or --concurrency sessions at once on\n"
            "the engine, batched into shared forward passes) and prints corpus BLEU (sacreBLEU\n"
            "defaults), AL and LAAL (in source units: words + the end segment), tokens per\n"
            "sentence and wall time per sentence. Paradigms (docs/GPE.md): gpe (group\n"
            "positions), reencode (batch-streaming: re-encode the target after each read),\n"
            "interleaved (one chronological sequence); --mode batch reads the whole source\n"
            "first and uses plain causal positions.");
  args.AddString("model", "DIR", "model folder (default: the built-in English-to-German model)");
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
  args.AddString("compat", "none|reference",
                 "reference: the reference evaluation code's stop and delay rules and output "
                 "text, token for token (docs/GPE.md 8)",
                 "none");
  args.AddString("max_new_tokens", "N", "target tokens per sentence at most", "256");
  args.AddString("limit", "N", "evaluate the first N items only");
  args.AddString("out", "FILE", "write one JSON line per sentence");
  args.AddString("dtype", model::kServingDtypeChoices, model::kServingDtypeHelp, "auto");
  args.AddString("device", "cpu|cuda", "device", "cpu");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  args.AddString("concurrency", "N",
                 "sessions in flight on the engine (1: one at a time, without the engine)", "1");
  args.AddString("max_batch_tokens", "N", "engine: tokens in one forward pass", "512");
  args.AddString("max_sessions_per_step", "N", "engine: sessions in one forward pass", "64");
  args.AddString("kv_blocks", "N", "KV cache blocks", "1024");
  args.AddString("block_size", "N", "tokens per KV block", "16");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("data")) {
    std::cerr << "gpe: --data is required\n\n" << args.Help();
    return 2;
  }
  int wait_k = 0, max_new = 0, threads = 0, kv_blocks = 0, block_size = 0, concurrency = 0,
      max_batch_tokens = 0, max_per_step = 0, limit = -1;
  int64_t phi = -1;
  if (!absl::SimpleAtoi(*args.Get("wait_k"), &wait_k) || wait_k < 1 ||
      !absl::SimpleAtoi(*args.Get("max_new_tokens"), &max_new) || max_new < 1 ||
      !absl::SimpleAtoi(*args.Get("threads"), &threads) ||
      !absl::SimpleAtoi(*args.Get("kv_blocks"), &kv_blocks) || kv_blocks < 1 ||
      !absl::SimpleAtoi(*args.Get("block_size"), &block_size) || block_size < 1 ||
      !absl::SimpleAtoi(*args.Get("concurrency"), &concurrency) || concurrency < 1 ||
      !absl::SimpleAtoi(*args.Get("max_batch_tokens"), &max_batch_tokens) || max_batch_tokens < 1 ||
      !absl::SimpleAtoi(*args.Get("max_sessions_per_step"), &max_per_step) || max_per_step < 1 ||
      (args.Get("limit") && !absl::SimpleAtoi(*args.Get("limit"), &limit)) ||
      (args.Get("phi") && (!absl::SimpleAtoi(*args.Get("phi"), &phi) || phi < 0))) {
    return Fail(
        "--wait_k, --max_new_tokens, --kv_blocks, --block_size, --concurrency, "
        "--max_batch_tokens, --max_sessions_per_step take positive whole numbers; --phi, "
        "--limit, --threads whole numbers",
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
  const std::optional<policy::Compat> compat = policy::ParseCompat(*args.Get("compat"));
  if (!compat) return Fail("--compat takes none or reference", 2);
  if (*compat == policy::Compat::kReference &&
      (mode == "batch" || *parsed_paradigm != session::Paradigm::kGpe)) {
    return Fail("--compat reference applies to --mode streaming with --paradigm gpe", 2);
  }

  auto profile = policy::LoadProfile(*args.Get("profile"));
  if (!profile.ok()) return Fail(std::string(profile.status().message()));
  session::SessionOptions options;
  options.profile = *profile;
  if (auto text = args.Get("instruction")) options.profile.instruction = *text;
  if (phi >= 0) options.profile.phi = phi;
  options.policy.wait_k = wait_k;
  options.policy.max_new_tokens = max_new;
  options.policy.split = split == "token" ? policy::SplitMode::kToken : policy::SplitMode::kWord;
  options.policy.compat = *compat;
  options.paradigm = mode == "batch" ? session::Paradigm::kBatch : *parsed_paradigm;

  auto data =
      eval::LoadDataset(*args.Get("data"), *args.Get("source_key"), *args.Get("target_key"));
  if (!data.ok()) return Fail(std::string(data.status().message()));
  const size_t count = limit >= 0 ? std::min<size_t>(limit, data->size()) : data->size();

  const model::ModelOptions model_options{
      .dtype = *args.Get("dtype"), .device = *args.Get("device"), .threads = threads};
  auto model = args.Get("model") ? model::Model::Load(*args.Get("model"), model_options)
                                 : model::LoadDefaultModel(model_options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  std::cerr << "gpe: " << (*model)->kernel_path() << "\n";
  std::ofstream out;
  if (auto path = args.Get("out")) {
    out.open(*path);
    if (!out) return Fail(*path + ": cannot create file");
  }
  std::vector<std::vector<std::string>> sources;
  for (size_t i = 0; i < count; ++i) {
    const std::vector<std::string_view> words = eval::SplitWords((*data)[i].source);
    sources.emplace_back(words.begin(), words.end());
  }
  const bool tty = ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const Progress progress = [&](size_t finished) {
    if (tty) {
      std::fprintf(stderr, "\r[%zu/%zu] %.1f s", finished, count, elapsed());
    } else if (finished % 10 == 0 || finished == count) {
      std::fprintf(stderr, "gpe: %zu/%zu sentences, %.1f s\n", finished, count, elapsed());
    }
  };
  std::vector<ItemResult> results(count);
  absl::Status run;
  engine::EngineStats stats;
  if (concurrency == 1) {
    run = RunSequential(**model, options, sources, block_size, kv_blocks, progress, &results);
  } else {
    engine::EngineConfig config;
    config.block_size = block_size;
    config.kv_blocks = kv_blocks;
    config.scheduler.max_batch_tokens = max_batch_tokens;
    config.scheduler.max_sessions_per_step = max_per_step;
    config.max_sessions = concurrency;
    run = RunOnEngine(*model, config, options, sources, concurrency, progress, &results, &stats);
  }
  const double seconds = elapsed();
  if (tty) std::fprintf(stderr, "\n");
  if (!run.ok()) return Fail(std::string(run.message()));

  std::vector<std::string> hyps, refs;
  double al_sum = 0, laal_sum = 0;
  int64_t source_tokens = 0, target_tokens = 0, forward_tokens = 0;
  for (size_t i = 0; i < count; ++i) {
    const ItemResult& result = results[i];
    const std::string& reference = (*data)[i].reference;
    const std::vector<double> delays(result.delays.begin(), result.delays.end());
    const double x = static_cast<double>(result.source_units);
    const double y = static_cast<double>(eval::SplitWords(result.text).size());
    al_sum += eval::AverageLagging(delays, x, y);
    laal_sum += eval::LengthAdaptiveAverageLagging(delays, x, y);
    source_tokens += result.counters.source_tokens;
    target_tokens += static_cast<int64_t>(result.output.size());
    forward_tokens += result.counters.forward_tokens;
    hyps.push_back(result.text);
    refs.push_back(reference);
    if (out.is_open()) {
      out << nlohmann::json{{"source", (*data)[i].source},
                            {"reference", reference},
                            {"output", result.text},
                            {"output_ids", result.output},
                            {"delays", result.delays},
                            {"forward_tokens", result.counters.forward_tokens},
                            {"reason", result.reason}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\n";
    }
  }
  const double n = std::max<double>(1, static_cast<double>(count));
  const eval::BleuScore bleu = eval::CorpusBleu(hyps, refs);
  std::cout << bleu.ToString() << "\n"
            << "signature: " << eval::BleuScore::Signature() << "\n"
            << absl::StrFormat(
                   "AL = %.3f  LAAL = %.3f  (source units; %d sentences, %s, k=%d, "
                   "concurrency %d)\n",
                   al_sum / n, laal_sum / n, count, mode == "batch" ? "batch" : paradigm, wait_k,
                   concurrency)
            << absl::StrFormat(
                   "per sentence: %.1f source tokens, %.1f target tokens, %.1f forward tokens, "
                   "%.1f ms of wall time\n",
                   source_tokens / n, target_tokens / n, forward_tokens / n, 1e3 * seconds / n);
  if (concurrency > 1) {
    std::cout << absl::StrFormat(
        "engine: %d steps, %.1f tokens and %.1f sessions per step, %d preemptions\n", stats.steps,
        stats.steps > 0 ? static_cast<double>(stats.step_tokens) / stats.steps : 0.0,
        stats.steps > 0 ? static_cast<double>(stats.step_sessions) / stats.steps : 0.0,
        stats.preemptions);
  }
  return 0;
}

}  // namespace gpeserve::cli
