// gpe eval: run a data set through streaming (or batch) sessions in-process and report BLEU,
// AL and LAAL, like the reference evaluation script.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/eval/dataset.h"
#include "engine/eval/report.h"
#include "engine/eval/words.h"
#include "engine/model/adapter.h"
#include "engine/model/default_model.h"
#include "engine/session/runner.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

int Fail(const std::string& message, int code = 1) {
  std::cerr << "gpe: " << message << "\n";
  return code;
}

// What a session produced (the data set's source and reference are added by the caller).
eval::SentenceResult Sentence(std::string text, std::vector<int32_t> output,
                              std::vector<int64_t> delays, int64_t source_units,
                              const session::SessionCounters& counters, std::string reason) {
  return {.output = std::move(text),
          .output_ids = std::move(output),
          .delays = std::move(delays),
          .source_units = static_cast<double>(source_units),
          .source_tokens = counters.source_tokens,
          .forward_tokens = counters.forward_tokens,
          .reason = std::move(reason)};
}

// One sentence at a time, each session alone on the model.
absl::Status RunSequential(const model::Model& model, const session::SessionOptions& options,
                           const std::vector<std::vector<std::string>>& sources,
                           const engine::EngineConfig& config, eval::Progress& progress,
                           std::vector<eval::SentenceResult>* results) {
  const model::ModelConfig& c = model.config();
  const absl::StatusOr<int64_t> blocks = engine::KvCacheBlocks(model, config);
  if (!blocks.ok()) return blocks.status();
  const kv::KvCacheConfig kv_config{.block_size = config.block_size,
                                    .num_blocks = static_cast<int>(*blocks)};
  kv::BlockAllocator allocator(kv_config);
  auto pool = kv::KvPool::Create(kv_config, {c.num_layers, c.num_kv_heads, c.head_dim},
                                 engine::KvCacheScalarType(model, config), model.device());
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
    (*results)[i] = Sentence(r->text, r->output, r->delays, r->source_units, r->counters,
                             policy::DoneReasonName(r->reason));
    progress.Update(i + 1);
  }
  return absl::OkStatus();
}

// Up to `concurrency` sentences in flight on the engine (continuous batching); each session
// gets its whole source at once, so its output equals the sequential run's.
absl::Status RunOnEngine(const CommandModel& loaded, const engine::EngineConfig& config,
                         const session::SessionOptions& options,
                         const std::vector<std::vector<std::string>>& sources, int concurrency,
                         eval::Progress& progress, std::vector<eval::SentenceResult>* results,
                         engine::EngineStats* stats) {
  std::vector<std::shared_ptr<const model::Adapter>> adapters;
  if (loaded.adapter) adapters.push_back(loaded.adapter);
  auto eng = engine::Engine::Create(loaded.model, config, adapters);
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
      const engine::SessionConfig session_config{
          .options = options, .adapter = loaded.adapter ? loaded.adapter->name : ""};
      auto handle = (*eng)->Open(session_config, [&, index](const engine::SessionEvent& e) {
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
      (*results)[index] = Sentence(e.full_text, e.output, e.delays, e.source_units, e.counters,
                                   engine::FinishReasonName(e.reason));
    }
    lock.unlock();
    progress.Update(done);
  }
  *stats = (*eng)->stats();
  (*eng)->Shutdown();
  return failure;
}

// What a long-form run measured besides the segments' results.
struct LongFormTotals {
  int64_t streams = 0;
  int64_t segments = 0;
  int64_t kv_blocks_high_water = 0;  // the most any one session held
  int64_t units_unread = 0;
  bool aligned = true;  // segment i of each stream is item i of it (its reference)
  std::vector<std::string> stream_outputs;  // per stream: the segments' texts, space-joined
};

// The items as `streams` long-form sessions on one engine (contiguous runs of items, one
// session each, in shared steps). With boundary cuts each stream is fed as a live client
// would be: `lookahead` items ahead of its finished segments, a boundary after each item (so
// segment i is item i); with mark cuts the whole stream at once.
absl::Status RunLongForm(const CommandModel& loaded, engine::EngineConfig config,
                         const session::SessionOptions& options,
                         const flags::LongFormFlags& long_form,
                         const std::vector<std::vector<std::string>>& sources, int streams,
                         eval::Progress& progress, std::vector<eval::SentenceResult>* results,
                         LongFormTotals* totals, engine::EngineStats* stats) {
  std::vector<std::shared_ptr<const model::Adapter>> adapters;
  if (loaded.adapter) adapters.push_back(loaded.adapter);
  config.max_sessions = streams;
  auto eng = engine::Engine::Create(loaded.model, config, adapters);
  if (!eng.ok()) return eng.status();
  const size_t n = sources.size();
  streams = static_cast<int>(std::min<size_t>(std::max(streams, 1), std::max<size_t>(n, 1)));
  struct Stream {
    size_t first = 0, end = 0, pushed = 0;
    std::shared_ptr<engine::SessionHandle> handle;
    bool ended = false;
    std::vector<session::SegmentRecord> segments;
  };
  std::vector<Stream> all(streams);
  for (int s = 0; s < streams; ++s) {
    all[s].first = n * s / streams;
    all[s].end = n * (s + 1) / streams;
    all[s].pushed = all[s].first;
  }
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, engine::SessionEvent>> events;  // guarded by mu
  constexpr size_t kLookahead = 4;
  auto feed = [&](Stream& st) {
    const size_t window =
        long_form.cut_by_marks ? st.end : st.first + st.segments.size() + kLookahead;
    while (st.pushed < st.end && st.pushed < window) {
      st.handle->Push(sources[st.pushed++]);
      if (!long_form.cut_by_marks) st.handle->Boundary();
    }
    if (st.pushed == st.end && !st.ended) {
      st.handle->EndSource();
      st.ended = true;
    }
  };
  const engine::SessionConfig session_config{.options = options,
                                             .long_form = long_form.options,
                                             .adapter = loaded.adapter ? loaded.adapter->name : ""};
  for (int s = 0; s < streams; ++s) {
    auto handle = (*eng)->Open(session_config, [&, s](const engine::SessionEvent& e) {
      if (e.kind == engine::SessionEvent::Kind::kTokens) return true;
      {
        std::lock_guard<std::mutex> lock(mu);
        events.emplace_back(s, e);
      }
      cv.notify_one();
      return true;
    });
    if (!handle.ok()) return handle.status();
    all[s].handle = *handle;
    feed(all[s]);
  }
  absl::Status failure;
  int open = streams;
  size_t finished_segments = 0;
  while (open > 0) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !events.empty(); });
    auto [s, e] = std::move(events.front());
    events.pop_front();
    lock.unlock();
    Stream& st = all[s];
    switch (e.kind) {
      case engine::SessionEvent::Kind::kSegment:
        st.segments.push_back(std::move(e.segment_record));
        progress.Update(++finished_segments);
        if (failure.ok()) feed(st);
        break;
      case engine::SessionEvent::Kind::kDone:
        --open;
        totals->kv_blocks_high_water =
            std::max(totals->kv_blocks_high_water, e.counters.kv_blocks_high_water);
        totals->units_unread += e.source_units_unread;
        break;
      case engine::SessionEvent::Kind::kError:
        --open;
        if (failure.ok()) {
          failure = absl::Status(e.status.code(),
                                 absl::StrFormat("stream %d: %s", s, e.status.message()));
        }
        for (Stream& other : all) {
          if (other.handle && &other != &st) other.handle->Cancel();
        }
        break;
      case engine::SessionEvent::Kind::kTokens:
      case engine::SessionEvent::Kind::kWaiting:  // not asked for (report_waiting is off)
        break;
    }
  }
  *stats = (*eng)->stats();
  (*eng)->Shutdown();
  if (!failure.ok()) return failure;
  totals->streams = streams;
  for (const Stream& st : all) {
    totals->segments += static_cast<int64_t>(st.segments.size());
    if (st.segments.size() != st.end - st.first) totals->aligned = false;
    std::string joined;
    for (const session::SegmentRecord& r : st.segments) {
      if (!r.text.empty()) joined += (joined.empty() ? "" : " ") + r.text;
    }
    totals->stream_outputs.push_back(std::move(joined));
  }
  if (!totals->aligned) return absl::OkStatus();
  for (const Stream& st : all) {
    for (size_t k = 0; k < st.segments.size(); ++k) {
      const session::SegmentRecord& r = st.segments[k];
      (*results)[st.first + k] = Sentence(r.text, r.output, r.delays, r.source_units, r.counters,
                                          policy::DoneReasonName(r.reason));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int EvalCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe eval [--model DIR] --data FILE.json [options]",
      "Runs every item of a data set (a JSON array of objects with source and target\n"
      "strings) through a session (one at a time, or --concurrency sessions at once on\n"
      "the engine, batched into shared forward passes) and prints corpus BLEU (sacreBLEU\n"
      "defaults), AL and LAAL (in source units: words + the end segment), tokens per\n"
      "sentence and wall time per sentence. Paradigms (docs/GPE.md): gpe (group\n"
      "positions), reencode (batch-streaming: re-encode the target after each read),\n"
      "interleaved (one chronological sequence); --mode batch reads the whole source\n"
      "first and uses plain causal positions.\n\n"
      "--long_form streams the whole data set through long-form sessions (one per\n"
      "--concurrency, over contiguous runs of items): a boundary after each item, so each\n"
      "segment is translated as the item alone would be and aligns with its reference;\n"
      "BLEU is over the segments and the AL and LAAL means are StreamLAAL's per-segment\n"
      "means; it prints the KV high-water mark of a session. --repeat N streams the data N\n"
      "times over (the high-water mark must not grow).");
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags);
  flags::AddAdapterFlags(flags, &model_flags);
  flags::SessionFlags session;
  session.options.policy.max_new_tokens = 256;
  flags::AddSessionFlags(flags, &session);
  bool batch = false;
  flags.AddChoice("mode", "streaming (wait-k) or batch (offline)", &batch,
                  {{"streaming", false}, {"batch", true}});
  std::optional<std::string> data_path, out_path;
  std::string source_key = "en", target_key = "de";
  std::optional<int64_t> limit;
  int concurrency = 1;
  flags.Add("data", "FILE", "data set: JSON array of objects", &data_path);
  flags.Add("source_key", "KEY", "source field", &source_key);
  flags.Add("target_key", "KEY", "reference field", &target_key);
  flags.Add("limit", "N", "evaluate the first N items only (negative: all)", &limit);
  flags.Add("out", "FILE", "write one JSON line per sentence", &out_path);
  flags.Add("concurrency", "N",
            "sessions in flight on the engine (1: one at a time, without the engine; long-form: "
            "the number of streams)",
            &concurrency, {.min = 1});
  flags::LongFormFlags long_form;
  flags::AddLongFormFlags(flags, &long_form);
  int repeat = 1;
  flags.Add("repeat", "N", "the data set N times over (e.g. a long stream)", &repeat, {.min = 1});
  engine::EngineConfig engine_config;
  engine_config.kv_blocks = 1024;
  flags::AddKvCacheFlags(flags, &engine_config);
  flags::AddSchedulerFlags(flags, &engine_config);
  flags.AddCheck([&] {
    if (session.options.policy.compat == policy::Compat::kReference &&
        (batch || session.options.paradigm != session::Paradigm::kGpe)) {
      return absl::InvalidArgumentError(
          "--compat reference applies to --mode streaming with --paradigm gpe");
    }
    if (long_form.options.enabled && batch) {
      return absl::InvalidArgumentError(
          "--long_form streams: --mode batch waits for the whole source, which a long-form "
          "stream never has");
    }
    return absl::OkStatus();
  });
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!data_path) {
    std::cerr << "gpe: --data is required\n\n" << flags.Help();
    return 2;
  }
  if (batch) session.options.paradigm = session::Paradigm::kBatch;
  // A named profile is checked before the model loads; auto needs the model's type.
  if (session.profile != policy::kAutoProfile) {
    if (auto early = policy::LoadProfile(session.profile); !early.ok()) {
      return Fail(std::string(early.status().message()));
    }
  }

  auto data = eval::LoadDataset(*data_path, source_key, target_key);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  if (repeat > 1) {
    const auto once = *data;
    for (int r = 1; r < repeat; ++r) data->insert(data->end(), once.begin(), once.end());
  }
  const size_t count = limit && *limit >= 0 ? std::min<size_t>(*limit, data->size()) : data->size();

  auto loaded = LoadCommandModel(model_flags);
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  const model::Model& model = *loaded->model;
  auto resolved =
      session.Resolve(model.config().model_type(), model.chat_template(), loaded->instruction);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  session::SessionOptions options = *resolved;
  options.adapter = loaded->adapter.get();
  const std::string paradigm(session::ParadigmName(options.paradigm));
  const int wait_k = options.policy.wait_k;
  std::cerr << "gpe: " << model.kernel_path() << "\n";
  std::ofstream out;
  if (out_path) {
    out.open(*out_path);
    if (!out) return Fail(*out_path + ": cannot create file");
  }
  std::vector<std::vector<std::string>> sources;
  for (size_t i = 0; i < count; ++i) {
    const std::vector<std::string_view> words = eval::SplitWords((*data)[i].source);
    sources.emplace_back(words.begin(), words.end());
  }
  eval::Progress progress("gpe", count);
  std::vector<eval::SentenceResult> results(count);
  absl::Status run;
  engine::EngineStats stats;
  LongFormTotals totals;
  if (long_form.options.enabled) {
    run = RunLongForm(*loaded, engine_config, options, long_form, sources, concurrency, progress,
                      &results, &totals, &stats);
  } else if (concurrency == 1) {
    run = RunSequential(model, options, sources, engine_config, progress, &results);
  } else {
    engine_config.max_sessions = concurrency;
    run = RunOnEngine(*loaded, engine_config, options, sources, concurrency, progress, &results,
                      &stats);
  }
  const double seconds = progress.Finish();
  if (!run.ok()) return Fail(std::string(run.message()));

  if (long_form.options.enabled && !totals.aligned) {
    // Segments cut by marks need not match the items: score each stream as one document.
    eval::Report report;
    for (int64_t s = 0; s < totals.streams; ++s) {
      std::string reference;
      for (size_t i = count * s / totals.streams; i < count * (s + 1) / totals.streams; ++i) {
        reference += (reference.empty() ? "" : " ") + (*data)[i].reference;
      }
      report.Add({.reference = reference, .output = totals.stream_outputs[s]});
    }
    const eval::BleuScore bleu = report.Bleu();
    std::cout << absl::StrFormat(
        "%s\n(over %d streams as documents: %d segments do not align with the %d items; "
        "--cut boundary aligns them)\nlong-form: KV high-water %d blocks in one session\n",
        bleu.ToString(), totals.streams, totals.segments, count, totals.kv_blocks_high_water);
    return 0;
  }
  eval::Report report;
  for (size_t i = 0; i < count; ++i) {
    eval::SentenceResult& result = results[i];
    result.source = (*data)[i].source;
    result.reference = (*data)[i].reference;
    report.Add(result);
    if (out.is_open()) out << eval::ResultLine(result) << "\n";
  }
  std::cout << report.Summary(
      {.setting = long_form.options.enabled
                      ? absl::StrFormat("%s, k=%d, long-form: %d segments in %d streams; AL and "
                                        "LAAL are StreamLAAL's per-segment means",
                                        paradigm, wait_k, totals.segments, totals.streams)
                      : absl::StrFormat("%s, k=%d, concurrency %d", paradigm, wait_k, concurrency),
       .seconds = seconds,
       .wall_per_sentence = true});
  if (long_form.options.enabled) {
    std::cout << absl::StrFormat(
        "long-form: KV high-water %d blocks of %d tokens in one session; %d source units never "
        "read\n",
        totals.kv_blocks_high_water, engine_config.block_size, totals.units_unread);
  }
  if (concurrency > 1 || long_form.options.enabled) {
    std::cout << absl::StrFormat(
        "engine: %d steps, %.1f tokens and %.1f sessions per step, %d preemptions\n", stats.steps,
        stats.steps > 0 ? static_cast<double>(stats.step_tokens) / stats.steps : 0.0,
        stats.steps > 0 ? static_cast<double>(stats.step_sessions) / stats.steps : 0.0,
        stats.preemptions);
  }
  return 0;
}

}  // namespace gpeserve::cli
