// gpe-client: talks to a gpeserve server.
//   gpe-client stream --server ADDR --text "..." --words_per_second 2
//   gpe-client eval --server ADDR --data dev.json --concurrency 8
//   gpe-client health --server ADDR
//   gpe-client models --server ADDR
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "client/response_log.h"
#include "client/stream_long_form.h"
#include "engine/eval/dataset.h"
#include "engine/eval/latency.h"
#include "engine/eval/report.h"
#include "engine/eval/words.h"
#include "engine/policy/wait_k_policy.h"
#include "engine/sampler/sampler.h"
#include "engine/session/stream_session.h"
#include "flags/groups.h"
#include "nlohmann/json.hpp"

namespace gpeserve::client {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& message, int code = 1) {
  std::cerr << "gpe-client: " << message << "\n";
  return code;
}

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

// Where the server is and how to reach it: every command's flags.
struct ConnectFlags {
  ConnectOptions options;  // --server, --tls_server_name
  std::optional<std::string> auth_token_file;
  std::optional<std::string> tls_ca_file;
  // The options with the token and the certificates read from their files.
  absl::StatusOr<ConnectOptions> Resolve() const;
};

void AddConnectFlags(flags::FlagSet& flags, ConnectFlags* connect) {
  flags.Add("server", "HOST:PORT", "the server", &connect->options.server);
  flags.Add("auth_token_file", "FILE", "send the token in FILE as a bearer token",
            &connect->auth_token_file);
  flags.Add("tls_ca", "FILE", "PEM root certificates: connect with TLS", &connect->tls_ca_file);
  flags.Add("tls_server_name", "NAME", "expect this name in the server's certificate",
            &connect->options.tls_server_name);
}

absl::StatusOr<ConnectOptions> ConnectFlags::Resolve() const {
  ConnectOptions resolved = options;
  if (auth_token_file) {
    std::string token;
    if (!ReadText(*auth_token_file, &token)) {
      return absl::NotFoundError(*auth_token_file + ": cannot open file");
    }
    resolved.auth_token = std::string(absl::StripAsciiWhitespace(token));
  }
  if (tls_ca_file && !ReadText(*tls_ca_file, &resolved.tls_ca)) {
    return absl::NotFoundError(*tls_ca_file + ": cannot open file");
  }
  return resolved;
}

// A session's configuration. An unset optional leaves its SessionConfig field unset, so that
// the server's default applies; split, paradigm, compat and sampling are always sent.
struct SessionConfigFlags {
  std::optional<std::string> profile;
  std::optional<std::string> instruction;
  std::optional<std::string> adapter;
  // int64_t: the proto's fields are uint32, and a value above INT_MAX still reaches the server
  // (which says why it refuses it).
  std::optional<int64_t> wait_k;
  std::optional<int64_t> max_new_tokens;
  policy::SplitMode split = policy::SplitMode::kWord;
  session::Paradigm paradigm = session::Paradigm::kGpe;
  policy::Compat compat = policy::Compat::kNone;
  sampler::SamplingParams sampling;
  v1::SessionConfig ToProto() const;
};

// A positive whole number sent as a uint32 field.
void AddUint32Flag(flags::FlagSet& flags, const std::string& name, std::string value_name,
                   std::string help, std::optional<int64_t>* field) {
  flags.Add(name, std::move(value_name), std::move(help), field, {.min = 1});
  flags.AddCheck([name, field] {
    if (*field && **field > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name,
                                                     " takes a whole number in [1, 4294967295] "
                                                     "(got '",
                                                     **field, "')"));
    }
    return absl::OkStatus();
  });
}

void AddSessionConfigFlags(flags::FlagSet& flags, SessionConfigFlags* config) {
  flags.Add("profile", "NAME", "prompt profile (default: the server's)", &config->profile);
  flags.Add("instruction", "TEXT", "override the profile's instruction", &config->instruction);
  flags.Add("adapter", "NAME", "a LoRA adapter of the server (gpe-client models lists them)",
            &config->adapter);
  AddUint32Flag(flags, "wait_k", "K",
                "source words read before the first write (default: the server's)",
                &config->wait_k);
  flags::AddSplitFlag(flags, &config->split);
  flags::AddParadigmFlag(flags, &config->paradigm);
  flags::AddCompatFlag(flags, &config->compat);
  AddUint32Flag(flags, "max_new_tokens", "N", "target tokens at most (default: the server's)",
                &config->max_new_tokens);
  flags::AddSamplingFlags(flags, &config->sampling);
}

v1::SessionConfig SessionConfigFlags::ToProto() const {
  v1::SessionConfig config;
  if (profile) config.set_profile(*profile);
  if (instruction) config.set_instruction(*instruction);
  if (adapter) config.set_adapter(*adapter);
  if (wait_k) config.set_wait_k(static_cast<uint32_t>(*wait_k));
  if (max_new_tokens) config.set_max_new_tokens(static_cast<uint32_t>(*max_new_tokens));
  config.set_split(split == policy::SplitMode::kToken ? v1::SessionConfig::SPLIT_TOKEN
                                                      : v1::SessionConfig::SPLIT_WORD);
  switch (paradigm) {
    case session::Paradigm::kReencode:
      config.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
      break;
    case session::Paradigm::kInterleaved:
      config.set_paradigm(v1::SessionConfig::PARADIGM_INTERLEAVED);
      break;
    default:  // kGpe; --paradigm offers no batch
      config.set_paradigm(v1::SessionConfig::PARADIGM_GPE);
      break;
  }
  config.set_compat(compat == policy::Compat::kReference ? v1::SessionConfig::COMPAT_REFERENCE
                                                         : v1::SessionConfig::COMPAT_NONE);
  v1::Sampling& out = *config.mutable_sampling();
  out.set_temperature(sampling.temperature);
  out.set_top_k(sampling.top_k);
  out.set_top_p(sampling.top_p);
  if (sampling.seed) out.set_seed(*sampling.seed);
  return config;
}

void AddLogFlag(flags::FlagSet& flags, std::optional<std::string>* path) {
  flags.Add("log", "FILE.jsonl",
            "write one JSON line per server response (source sent, tokens, text, server and "
            "client times; docs/server.md): gpe score --latency FILE.jsonl scores it",
            path);
}

// Source words as gpe eval and the server cut them (engine/eval/words.h).
std::vector<std::string> Words(const std::string& text) {
  const std::vector<std::string_view> words = eval::SplitWords(text);
  return std::vector<std::string>(words.begin(), words.end());
}

// AL and LAAL of a finished session in source units, with |Y| = the output's words.
// |X|, the source units of a session: the words sent + the end segment, whether or not the
// server received them all before the session ended (in split mode "token" the client does not
// know the tokens: the server's count, which may then miss units never received).
double SourceUnits(const v1::SessionConfig& config, const v1::SessionDone& done, size_t words) {
  if (config.split() == v1::SessionConfig::SPLIT_TOKEN) {
    return static_cast<double>(done.source_units());
  }
  return static_cast<double>(words + 1);
}

std::pair<double, double> Lagging(const v1::SessionDone& done, double x, double target_words) {
  const std::vector<double> delays(done.delays().begin(), done.delays().end());
  return {eval::AverageLagging(delays, x, target_words),
          eval::LengthAdaptiveAverageLagging(delays, x, target_words)};
}

int StreamCommand(int argc, char** argv) {
  flags::FlagSet flags(
      "gpe-client", "gpe-client stream [--text TEXT | --file FILE] [options]",
      "Streams a source to the server word by word at --words_per_second (stdin\n"
      "when neither --text nor --file is given) and prints the target as it grows:\n"
      "one updating line on a terminal; otherwise a line per target word with the\n"
      "source words read when it was complete. At the\n"
      "end: the full text, the delays, AL and LAAL (source units) and the reason.\n\n"
      "--long_form streams the text as one long-form session (a talk of hours): it is\n"
      "cut into segments (--cut boundary: a boundary after each line of the text, and\n"
      "sentence marks; --cut marks: sentence marks and --max_segment_words alone), each\n"
      "printed as it finishes; at the end: segments, StreamLAAL (the mean of the\n"
      "segments' LAAL), the computation-aware lag per word (ms from the arrival of the\n"
      "source word that completed its read) and the session's KV high-water mark.");
  ConnectFlags connect_flags;
  SessionConfigFlags session_flags;
  std::optional<std::string> source_text, source_file;
  double rate = 2;
  bool json = false;
  std::optional<std::string> log_path;
  flags::LongFormFlags long_form;
  AddConnectFlags(flags, &connect_flags);
  AddSessionConfigFlags(flags, &session_flags);
  flags::AddLongFormFlags(flags, &long_form);
  flags.Add("text", "TEXT", "the source text", &source_text);
  flags.Add("file", "FILE", "read the source text from FILE", &source_file);
  flags.Add("words_per_second", "R", "source pace (0: all at once)", &rate, {.min = 0});
  flags.Add("json", "print the SessionDone as JSON at the end", &json);
  AddLogFlag(flags, &log_path);
  if (auto code = flags.ParseOrExit(argc, argv, 2)) return *code;
  auto connect = connect_flags.Resolve();
  if (!connect.ok()) return Fail(std::string(connect.status().message()), 2);
  v1::SessionConfig config = session_flags.ToProto();
  std::string text;
  if (source_text) {
    text = *source_text;
  } else if (source_file) {
    if (!ReadText(*source_file, &text)) return Fail(*source_file + ": cannot open file");
  } else {
    std::stringstream in;
    in << std::cin.rdbuf();
    text = in.str();
  }
  const std::vector<std::string> words = Words(text);
  auto stub = v1::Gpeserve::NewStub(Connect(*connect));
  std::unique_ptr<ResponseLog> log;
  if (log_path) {
    auto opened = ResponseLog::Open(*log_path);
    if (!opened.ok()) return Fail(std::string(opened.status().message()));
    log = *std::move(opened);
    v1::SessionConfig logged = config;
    logged.mutable_long_form()->set_enabled(long_form.options.enabled);
    log->Start(0, words, rate, logged);
  }
  const ResponseCallback on_response =
      log ? ResponseCallback([&log](const ResponseSeen& seen) { log->Response(0, seen); })
          : ResponseCallback();
  if (long_form.options.enabled) {
    return StreamLongForm(*stub, *connect, config, long_form, text, rate, json, on_response);
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  std::string so_far, word;  // the whole target so far; the part since the last word ended
  auto result = RunSession(
      *stub, *connect, config, words, rate,
      [&](const v1::TokenDelta& d) {
        so_far += d.text();
        word += d.text();
        const long long read = static_cast<long long>(d.source_units_read());
        if (tty) {
          std::printf("\r\033[K[read %lld] %s", read, so_far.c_str());
          std::fflush(stdout);
        } else if (d.word_complete()) {
          std::printf("[read %lld] %s\n", read, word.c_str());
          std::fflush(stdout);
          word.clear();
        }
      },
      nullptr, on_response);
  if (tty) std::printf("\n");
  if (log && !result.ok()) log->Error(0, result.status());
  if (!result.ok()) {
    return Fail(absl::StrFormat("%s: %s", absl::StatusCodeToString(result.status().code()),
                                result.status().message()));
  }
  const v1::SessionDone& done = result->done;
  const auto [al, laal] = Lagging(done, SourceUnits(config, done, words.size()),
                                  static_cast<double>(eval::SplitWords(done.text()).size()));
  std::printf("text: %s\n", done.text().c_str());
  std::string delays;
  for (int64_t d : done.delays()) delays += (delays.empty() ? "" : ",") + std::to_string(d);
  std::printf("delays: [%s]\nAL = %.3f  LAAL = %.3f  (source units; %lld)  reason: %s\n",
              delays.c_str(), al, laal, static_cast<long long>(done.source_units()),
              done.finish_reason().c_str());
  if (done.source_units_unread() > 0) {
    std::printf("note: the session ended with %lld source units received and never read\n",
                static_cast<long long>(done.source_units_unread()));
  }
  if (json) {
    nlohmann::json j = {
        {"text", done.text()},
        {"ids", std::vector<int32_t>(done.ids().begin(), done.ids().end())},
        {"delays", std::vector<int64_t>(done.delays().begin(), done.delays().end())},
        {"delays_ms", std::vector<double>(done.delays_ms().begin(), done.delays_ms().end())},
        {"source_units", done.source_units()},
        {"source_units_unread", done.source_units_unread()},
        {"finish_reason", done.finish_reason()},
        {"forward_tokens", done.counters().forward_tokens()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

int EvalCommand(int argc, char** argv) {
  flags::FlagSet flags(
      "gpe-client", "gpe-client eval --data FILE.json [options]",
      "Runs every item of a data set (a JSON array of objects with source and\n"
      "target strings, as for `gpe eval`) through the server, --concurrency\n"
      "sessions at a time, and prints corpus BLEU (sacreBLEU defaults), AL and LAAL\n"
      "in source units, computation-aware AL in milliseconds, and throughput.");
  ConnectFlags connect_flags;
  SessionConfigFlags session_flags;
  std::optional<std::string> data_path, out_path;
  std::string source_key = "en", target_key = "de";
  int concurrency = 8;
  double rate = 0;
  std::optional<int> limit;  // a negative one: all items, as when unset
  AddConnectFlags(flags, &connect_flags);
  AddSessionConfigFlags(flags, &session_flags);
  flags.Add("data", "FILE", "data set: JSON array of objects", &data_path);
  flags.Add("source_key", "KEY", "source field", &source_key);
  flags.Add("target_key", "KEY", "reference field", &target_key);
  flags.Add("concurrency", "N", "sessions in flight", &concurrency, {.min = 1});
  flags.Add("words_per_second", "R", "source pace of each session (0: all at once)", &rate,
            {.min = 0});
  flags.Add("limit", "N", "evaluate the first N items only", &limit);
  flags.Add("out", "FILE", "write one JSON line per sentence", &out_path);
  std::optional<std::string> log_path;
  AddLogFlag(flags, &log_path);
  if (auto code = flags.ParseOrExit(argc, argv, 2)) return *code;
  if (!data_path) return Fail("--data is required\n\n" + flags.Help(), 2);
  auto connect = connect_flags.Resolve();
  if (!connect.ok()) return Fail(std::string(connect.status().message()), 2);
  const v1::SessionConfig config = session_flags.ToProto();
  auto data = eval::LoadDataset(*data_path, source_key, target_key);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  const size_t count = limit && *limit >= 0 ? std::min<size_t>(*limit, data->size()) : data->size();
  auto stub = v1::Gpeserve::NewStub(Connect(*connect));
  std::unique_ptr<ResponseLog> log;
  if (log_path) {
    auto opened = ResponseLog::Open(*log_path);
    if (!opened.ok()) return Fail(std::string(opened.status().message()));
    log = *std::move(opened);
  }
  std::vector<absl::StatusOr<SessionTrace>> results(count, absl::UnknownError("not run"));
  std::atomic<size_t> next{0}, finished{0};
  eval::Progress progress("gpe-client", count);
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) {
        const std::vector<std::string> words = Words((*data)[i].source);
        const auto session = static_cast<int64_t>(i);
        if (log) log->Start(session, words, rate, config);
        results[i] = RunSession(*stub, *connect, config, words, rate, nullptr, nullptr,
                                log ? ResponseCallback([&log, session](const ResponseSeen& seen) {
                                  log->Response(session, seen);
                                })
                                    : ResponseCallback());
        if (log && !results[i].ok()) log->Error(session, results[i].status());
        progress.Update(++finished);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double seconds = progress.Finish();
  std::ofstream out;
  if (out_path) {
    out.open(*out_path);
    if (!out) return Fail(*out_path + ": cannot create file");
  }
  // Computation-aware AL: delays in ms against a source of |X| units at the pace given (all at
  // once: every unit at time 0).
  eval::Report report(rate > 0 ? 1000.0 / rate : 0.0);
  for (size_t i = 0; i < count; ++i) {
    if (!results[i].ok()) {
      return Fail(absl::StrFormat("item %d: %s: %s", i,
                                  absl::StatusCodeToString(results[i].status().code()),
                                  results[i].status().message()));
    }
    const v1::SessionDone& done = results[i]->done;
    const eval::SentenceResult result{
        .source = (*data)[i].source,
        .reference = (*data)[i].reference,
        .output = done.text(),
        .output_ids = std::vector<int32_t>(done.ids().begin(), done.ids().end()),
        .delays = std::vector<int64_t>(done.delays().begin(), done.delays().end()),
        .delays_ms = std::vector<double>(done.delays_ms().begin(), done.delays_ms().end()),
        .source_units = SourceUnits(config, done, Words((*data)[i].source).size()),
        .source_tokens = done.counters().source_tokens(),
        .forward_tokens = done.counters().forward_tokens(),
        .reason = done.finish_reason()};
    report.Add(result);
    if (out.is_open()) out << eval::ResultLine(result) << "\n";
  }
  std::cout << report.Summary(
      {.setting = absl::StrFormat("%s, concurrency %d",
                                  session::ParadigmName(session_flags.paradigm), concurrency),
       .seconds = seconds,
       .throughput = true});
  return 0;
}

int HealthCommand(int argc, char** argv) {
  flags::FlagSet flags(
      "gpe-client", "gpe-client health [--server HOST:PORT]",
      "Asks grpc.health.v1.Health/Check; prints SERVING or NOT_SERVING and exits 0\n"
      "only when the server is SERVING.");
  ConnectFlags connect_flags;
  double timeout = 5;
  AddConnectFlags(flags, &connect_flags);
  flags.Add("timeout", "S", "seconds to wait for an answer", &timeout);
  flags.AddCheck([&timeout] {
    return timeout > 0 ? absl::OkStatus()
                       : absl::InvalidArgumentError(absl::StrCat(
                             "--timeout takes a positive number (got '", timeout, "')"));
  });
  if (auto code = flags.ParseOrExit(argc, argv, 2)) return *code;
  auto connect = connect_flags.Resolve();
  if (!connect.ok()) return Fail(std::string(connect.status().message()), 2);
  auto serving = CheckHealth(*connect, timeout);
  if (!serving.ok()) {
    std::cout << "UNREACHABLE (" << absl::StatusCodeToString(serving.status().code()) << ": "
              << serving.status().message() << ")\n";
    return 1;
  }
  std::cout << (*serving ? "SERVING" : "NOT_SERVING") << "\n";
  return *serving ? 0 : 1;
}

int ModelsCommand(int argc, char** argv) {
  flags::FlagSet flags("gpe-client", "gpe-client models [--server HOST:PORT]",
                       "Lists what the server serves (ListModels), as JSON.");
  ConnectFlags connect_flags;
  AddConnectFlags(flags, &connect_flags);
  if (auto code = flags.ParseOrExit(argc, argv, 2)) return *code;
  auto connect = connect_flags.Resolve();
  if (!connect.ok()) return Fail(std::string(connect.status().message()), 2);
  auto stub = v1::Gpeserve::NewStub(Connect(*connect));
  grpc::ClientContext context;
  Authorize(*connect, &context);
  v1::ListModelsResponse response;
  if (grpc::Status s = stub->ListModels(&context, v1::ListModelsRequest(), &response); !s.ok()) {
    return Fail(
        absl::StrFormat("%s: %s", absl::StatusCodeToString(FromGrpc(s).code()), s.error_message()));
  }
  for (const v1::ModelInfo& m : response.models()) {
    nlohmann::json adapters = nlohmann::json::array();
    for (const v1::AdapterInfo& a : m.adapters()) {
      adapters.push_back({{"name", a.name()},
                          {"rank", a.rank()},
                          {"alpha", a.alpha()},
                          {"target_modules", std::vector<std::string>(a.target_modules().begin(),
                                                                      a.target_modules().end())},
                          {"modules_to_save", std::vector<std::string>(a.modules_to_save().begin(),
                                                                       a.modules_to_save().end())},
                          {"merged", a.merged()}});
      if (a.has_instruction()) adapters.back()["instruction"] = a.instruction();
    }
    std::cout << nlohmann::json{{"name", m.name()},
                                {"architecture", m.architecture()},
                                {"dtype", m.dtype()},
                                {"device", m.device()},
                                {"vocab_size", m.vocab_size()},
                                {"profiles", std::vector<std::string>(m.profiles().begin(),
                                                                      m.profiles().end())},
                                {"default_profile", m.default_profile()},
                                {"kv_blocks", m.kv_blocks()},
                                {"block_size", m.block_size()},
                                {"max_sessions", m.max_sessions()},
                                {"adapters", adapters}}
                     .dump()
              << "\n";
  }
  return 0;
}

int BenchCommand(int argc, char** argv) {
  flags::FlagSet flags(
      "gpe-client", "gpe-client bench [options]",
      "A load generator: --sessions clients each run sessions back to back for\n"
      "--duration seconds, sending --words words per session at --words_per_second,\n"
      "and prints throughput (target tokens/s, sessions/s) and percentiles of the\n"
      "time to first token, inter-token latency and session time, with errors by code.");
  ConnectFlags connect_flags;
  SessionConfigFlags session_flags;
  int sessions = 8, words = 20;
  double duration = 30, rate = 4;
  AddConnectFlags(flags, &connect_flags);
  AddSessionConfigFlags(flags, &session_flags);
  flags.Add("sessions", "N", "concurrent sessions", &sessions, {.min = 1});
  flags.Add("duration", "S", "seconds to run", &duration);
  flags.AddCheck([&duration] {
    return duration > 0 ? absl::OkStatus()
                        : absl::InvalidArgumentError(absl::StrCat(
                              "--duration takes a positive number (got '", duration, "')"));
  });
  flags.Add("words", "N", "source words per session", &words, {.min = 1});
  flags.Add("words_per_second", "R", "source pace of each session (0: all at once)", &rate,
            {.min = 0});
  if (auto code = flags.ParseOrExit(argc, argv, 2)) return *code;
  auto connect = connect_flags.Resolve();
  if (!connect.ok()) return Fail(std::string(connect.status().message()), 2);
  const v1::SessionConfig config = session_flags.ToProto();
  static const std::vector<std::string> vocabulary = {
      "the",    "speaker", "said", "that", "our",   "city", "will", "build", "a",
      "new",    "bridge",  "over", "the",  "river", "next", "year", "and",   "many",
      "people", "think",   "it",   "is",   "a",     "good", "idea", "for",   "everyone"};
  auto stub = v1::Gpeserve::NewStub(Connect(*connect));
  std::mutex mu;
  std::vector<double> ttft, itl, e2e;
  std::map<std::string, int> errors;
  int64_t target_tokens = 0, completed = 0;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::vector<std::thread> workers;
  for (int w = 0; w < sessions; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; Clock::now() < end; ++round) {
        std::vector<std::string> source;
        for (int i = 0; i < words; ++i) {
          source.push_back(vocabulary[(i + 7 * w + 3 * round) % vocabulary.size()]);
        }
        const Clock::time_point began = Clock::now();
        auto result = RunSession(*stub, *connect, config, source, rate);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
        std::lock_guard<std::mutex> lock(mu);
        if (!result.ok()) {
          ++errors[absl::StatusCodeToString(result.status().code())];
          continue;
        }
        ++completed;
        e2e.push_back(ms);
        target_tokens += result->done.ids_size();
        if (result->first_token_ms >= 0) ttft.push_back(result->first_token_ms);
        for (size_t i = 1; i < result->token_ms.size(); ++i) {
          itl.push_back(result->token_ms[i] - result->token_ms[i - 1]);
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%d sessions in parallel for %.1f s, %d words at %.1f words/s each\n", sessions,
              seconds, words, rate);
  std::printf("completed %lld sessions (%.2f/s), %.1f target tokens/s\n",
              static_cast<long long>(completed), completed / seconds, target_tokens / seconds);
  std::printf("%-24s %9s %9s %9s\n", "ms", "p50", "p90", "p99");
  for (const auto& [name, values] :
       {std::pair<const char*, const std::vector<double>*>{"time to first token", &ttft},
        {"inter-token latency", &itl},
        {"session", &e2e}}) {
    std::printf("%-24s %9.1f %9.1f %9.1f\n", name, eval::Percentile(*values, 50),
                eval::Percentile(*values, 90), eval::Percentile(*values, 99));
  }
  for (const auto& [code, count] : errors) std::printf("errors %s: %d\n", code.c_str(), count);
  return errors.empty() ? 0 : 1;
}

constexpr char kUsage[] =
    "usage: gpe-client COMMAND [options]   (gpe-client COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  stream   stream a text to the server at a pace and print the target live\n"
    "  eval     run a data set through the server: BLEU, AL, LAAL, throughput\n"
    "  bench    load generator: throughput and latency percentiles\n"
    "  health   exit 0 when the server is SERVING\n"
    "  models   what the server serves\n";

}  // namespace
}  // namespace gpeserve::client

int main(int argc, char** argv) {
  using namespace gpeserve::client;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "stream") return StreamCommand(argc, argv);
  if (command == "eval") return EvalCommand(argc, argv);
  if (command == "bench") return BenchCommand(argc, argv);
  if (command == "health") return HealthCommand(argc, argv);
  if (command == "models") return ModelsCommand(argc, argv);
  std::fprintf(stderr, "gpe-client: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
