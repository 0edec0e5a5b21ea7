// gpeserve: the gRPC server. Run is parse (the flags, into the engine's and the service's
// configurations), build (model, metrics, engine, service), serve, and drain on a signal;
// everything else lives in server/ and engine/.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/engine.h"
#include "engine/model/adapter.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/policy/profile.h"
#include "flags/groups.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "server/service.h"

namespace gpeserve::server {
namespace {

int Fail(const std::string& message, int code = 1) {
  std::cerr << "gpeserve: " << message << "\n";
  return code;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs one short session so that the first client does not pay for lazy initialisation.
absl::Status WarmUp(engine::Engine& engine, const engine::SessionConfig& base) {
  engine::SessionConfig config = base;
  config.options.policy.max_new_tokens = 4;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<absl::Status> result;
  auto handle = engine.Open(config, [&](const engine::SessionEvent& e) {
    if (e.kind == engine::SessionEvent::Kind::kTokens) return true;
    std::lock_guard<std::mutex> lock(mu);
    result = e.kind == engine::SessionEvent::Kind::kError ? e.status : absl::OkStatus();
    cv.notify_all();
    return true;
  });
  if (!handle.ok()) return handle.status();
  (*handle)->Push({"Hello", "world"});
  (*handle)->EndSource();
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return result.has_value(); });
  return *result;
}

// Everything the command line sets.
struct Flags {
  flags::ModelFlags model;
  std::string profile = policy::kAutoProfile;
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9090";
  // The engine's defaults, with the server's limits on what a client may hold.
  engine::EngineConfig engine = [] {
    engine::EngineConfig c;
    c.session_idle_seconds = 600;
    c.max_unread_source_units = 50000;
    return c;
  }();
  ServiceConfig service;  // the session defaults and limits (profiles and token: Build)
  int64_t drain_seconds = 30;
  std::optional<std::string> auth_token_file, tls_cert, tls_key;
  std::vector<std::pair<std::string, std::string>> adapters;  // --adapter NAME=DIR
  bool merge_adapters = false;
};

// "NAME=DIR" of --adapter into `adapters`.
absl::Status ParseAdapterFlag(std::string_view text,
                              std::vector<std::pair<std::string, std::string>>* adapters) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    return absl::InvalidArgumentError("takes NAME=DIR (a name sessions ask for, a PEFT folder)");
  }
  const std::string name(text.substr(0, eq));
  for (char ch : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
        ch != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("adapter name '", name, "': letters, digits, '-', '_' and '.' only"));
    }
  }
  if (name == Metrics::kBaseAdapter) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter name '", name, "' is reserved (the metrics' label of the model alone)"));
  }
  for (const auto& [known, dir] : *adapters) {
    if (known == name) return absl::InvalidArgumentError("adapter '" + name + "' given twice");
  }
  adapters->emplace_back(name, std::string(text.substr(eq + 1)));
  return absl::OkStatus();
}

// Parses the command line into *out; an exit code when the process should end (--help: 0, a
// usage error: 2).
std::optional<int> ParseFlags(int argc, char** argv, Flags* out) {
  flags::FlagSet flags(
      "gpeserve", "gpeserve [--model DIR] [options]",
      "Serves a model as a streaming processor over gRPC (proto/gpeserve/v1/gpeserve.proto):\n"
      "clients stream source words and receive target tokens while the source is still\n"
      "coming in (group position encoding, docs/GPE.md). Prometheus metrics on\n"
      "--metrics_listen. SIGTERM or SIGINT: stop accepting sessions, let running ones finish\n"
      "for up to --drain_seconds, cancel the rest, exit 0.\n"
      "Without --model it serves the built-in default model, a small English-to-German\n"
      "translator trained by scripts/train-default-model (docs/training.md).");
  ServiceConfig& service = out->service;
  flags::AddModelFlags(flags, &out->model);
  flags.Add("profile", "NAME|FILE",
            "default prompt profile: auto (the model's chat format, read from its chat "
            "template, else by its config.json model_type), qwen2.5, qwen3, llama3, gemma2, "
            "phi3, or a JSON file; "
            "sessions may also name any built-in profile, or auto",
            &out->profile);
  flags.AddParsed("adapter", "NAME=DIR",
                  "a PEFT LoRA adapter folder sessions may pick by NAME (SessionConfig.adapter); "
                  "repeatable: sessions of different adapters share forward steps",
                  "",
                  [out](std::string_view text) { return ParseAdapterFlag(text, &out->adapters); });
  flags.Add("merge_adapters",
            "fold the one --adapter into the weights at load: no per-step cost, every session "
            "runs it, and the base model alone is not served",
            &out->merge_adapters);
  flags.Add("listen", "HOST:PORT", "gRPC address (port 0: any free port)", &out->listen);
  flags.Add("metrics_listen", "HOST:PORT", "Prometheus /metrics address; 'none': off",
            &out->metrics_listen);
  flags::AddKvCacheFlags(flags, &out->engine);
  flags::AddSchedulerFlags(flags, &out->engine);
  flags.Add("max_sessions", "N", "open sessions (running and waiting); beyond: RESOURCE_EXHAUSTED",
            &out->engine.max_sessions, {.min = 1});
  flags.Add("wait_k", "K", "default wait-k of a session", &service.default_wait_k, {.min = 1});
  flags.Add("max_new_tokens", "N", "default target tokens of a session",
            &service.default_max_new_tokens, {.min = 1});
  flags.Add("max_new_tokens_limit", "N", "a session's max_new_tokens at most",
            &service.max_new_tokens_limit, {.min = 1});
  flags.Add("max_source_tokens", "N",
            "tokens of one session's prompt and source words together at most",
            &service.max_source_tokens, {.min = 1});
  flags.Add("max_instruction_bytes", "N",
            "bytes of a session's instruction (and custom prompt strings) at most",
            &service.max_instruction_bytes, {.min = 0});
  flags.Add("max_chunk_words", "N", "words in one SourceChunk at most", &service.max_chunk_words,
            {.min = 1});
  flags.Add("max_word_bytes", "N", "bytes in one source word at most", &service.max_word_bytes,
            {.min = 1});
  flags.Add("max_segment_words", "N", "a long-form session's max_segment_words at most",
            &service.max_segment_words, {.min = 1});
  flags.Add("max_message_bytes", "N", "size of one request message at most",
            &service.max_message_bytes, {.min = 1});
  flags.Add("max_queued_events", "N",
            "responses queued for a slow client before its session is cancelled",
            &service.max_queued_events, {.min = 1});
  flags.Add("max_sessions_per_connection", "N",
            "open sessions of one client connection at most; beyond: RESOURCE_EXHAUSTED (0: no "
            "limit; behind a proxy that pools connections, the proxy's connections count)",
            &service.max_sessions_per_connection, {.min = 0});
  flags.Add("max_session_source_bytes", "N",
            "bytes of source (words and text) one session may send in all; beyond: "
            "RESOURCE_EXHAUSTED",
            &service.max_session_source_bytes, {.min = 1});
  flags.Add("session_idle_seconds", "S",
            "a session waiting for source that gets none for S seconds ends with "
            "DEADLINE_EXCEEDED (0: never)",
            &out->engine.session_idle_seconds, {.min = 0});
  flags.Add("max_unread_source_units", "N",
            "source units a session may hold received and not yet read (a client far ahead of "
            "the translation); beyond: RESOURCE_EXHAUSTED (0: no limit)",
            &out->engine.max_unread_source_units, {.min = 0});
  flags.Add("drain_seconds", "S", "on SIGTERM: how long running sessions may finish",
            &out->drain_seconds, {.min = 0});
  flags.Add("auth_token_file", "FILE",
            "require 'authorization: Bearer <token>' with the token in FILE",
            &out->auth_token_file);
  flags.Add("tls_cert", "FILE", "PEM certificate chain: serve TLS (with --tls_key)",
            &out->tls_cert);
  flags.Add("tls_key", "FILE", "PEM private key of --tls_cert", &out->tls_key);
  flags.AddCheck([out] {
    if (out->service.default_max_new_tokens > out->service.max_new_tokens_limit) {
      return absl::InvalidArgumentError("--max_new_tokens exceeds --max_new_tokens_limit");
    }
    if (out->merge_adapters && out->adapters.size() != 1) {
      return absl::InvalidArgumentError("--merge_adapters folds exactly one --adapter");
    }
    if (out->tls_cert.has_value() != out->tls_key.has_value()) {
      return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
    }
    return absl::OkStatus();
  });
  return flags.ParseOrExit(argc, argv, 1);
}

// What serving needs, built from the flags: the model, the metrics, the engine (warmed up),
// the service and the server's credentials.
struct Parts {
  std::shared_ptr<const model::Model> model;
  std::unique_ptr<Metrics> metrics;
  std::shared_ptr<engine::Engine> engine;
  std::unique_ptr<Service> service;
  std::shared_ptr<grpc::ServerCredentials> credentials;
};

absl::StatusOr<Parts> Build(Flags& flags) {
  ServiceConfig& service_config = flags.service;
  for (const std::string& name : policy::BuiltinProfileNames()) {
    auto profile = policy::LoadProfile(name);
    if (!profile.ok()) return profile.status();
    service_config.profiles[name] = *profile;
  }
  if (flags.auth_token_file) {
    auto token = ReadFile(*flags.auth_token_file);
    if (!token.ok()) return token.status();
    service_config.auth_token = std::string(absl::StripAsciiWhitespace(*token));
    if (service_config.auth_token.empty()) {
      return absl::InvalidArgumentError(*flags.auth_token_file + ": the token file is empty");
    }
  }

  // A named profile is checked before the model loads; auto needs the model's type.
  if (flags.profile != policy::kAutoProfile) {
    if (auto early = policy::LoadProfile(flags.profile); !early.ok()) return early.status();
  }
  Parts parts;
  absl::StatusOr<std::shared_ptr<const model::Model>> model;
  std::string model_dir = "(built-in default model)";
  if (flags.model.dir) {
    const std::filesystem::path dir(*flags.model.dir);
    model_dir = *flags.model.dir;
    service_config.model_name = dir.filename().string();
    if (service_config.model_name.empty()) {
      service_config.model_name = dir.parent_path().filename().string();
    }
    model = model::Model::Load(*flags.model.dir, flags.model.options);
  } else {
    service_config.model_name = model::kDefaultModelName;
    model = model::LoadDefaultModel(flags.model.options);
  }
  if (!model.ok()) return model.status();
  if ((*model)->tokenizer() == nullptr) {
    return absl::FailedPreconditionError(
        std::filesystem::is_regular_file(model_dir)
            ? model_dir + ": the GGUF file holds no tokenizer (tokenizer.ggml.*)"
            : model_dir + ": no tokenizer.json");
  }
  parts.model = *model;
  std::cout << "gpeserve: " << parts.model->kernel_path() << std::endl;
  // The built-in model's adapters are served beside it (unless --merge_adapters folds a named
  // one, or an --adapter takes the name).
  std::vector<std::pair<std::string, std::string>> sources = flags.adapters;
  if (!flags.model.dir && !flags.merge_adapters) {
    for (std::string_view builtin : model::kDefaultAdapterNames) {
      const auto taken = [&](const auto& named) { return named.first == builtin; };
      if (std::none_of(sources.begin(), sources.end(), taken)) {
        sources.emplace_back(builtin, "");
      }
    }
  }
  std::vector<std::shared_ptr<const model::Adapter>> adapters;
  std::vector<std::string> adapter_names;
  for (const auto& [name, dir] : sources) {
    auto adapter = dir.empty() ? model::LoadDefaultAdapter(name, *parts.model)
                               : model::LoadAdapter(dir, *parts.model, name);
    if (!adapter.ok()) return adapter.status();
    const model::AdapterConfig& c = (*adapter)->config;
    service_config.adapters.push_back(
        {.name = name,
         .rank = c.r,
         .alpha = c.lora_alpha,
         .target_modules =
             c.target_regex ? std::vector<std::string>{*c.target_regex} : c.target_list,
         .modules_to_save = c.modules_to_save,
         .instruction = c.instruction,
         .merged = flags.merge_adapters});
    std::cout << "gpeserve: adapter " << name << " from "
              << (dir.empty() ? "the built-in model" : dir) << " (r=" << c.r
              << ", alpha=" << c.lora_alpha << ", " << (*adapter)->parameters << " parameters"
              << (flags.merge_adapters ? ", merged into the weights" : "") << ")" << std::endl;
    if (flags.merge_adapters) {
      auto merged = parts.model->WithMergedAdapter(**adapter);
      if (!merged.ok()) return merged.status();
      parts.model = *merged;
    } else {
      adapters.push_back(*adapter);
      adapter_names.push_back(name);
    }
  }
  // auto: the model's chat format; a session may name it too.
  const std::string& model_type = parts.model->config().model_type();
  const std::string chat_template = parts.model->chat_template();
  auto profile_name = policy::ResolveProfileName(flags.profile, model_type, chat_template);
  if (!profile_name.ok()) return profile_name.status();
  auto profile = policy::LoadProfile(*profile_name);
  if (!profile.ok()) return profile.status();
  service_config.default_profile = profile->name.empty() ? *profile_name : profile->name;
  service_config.profiles[service_config.default_profile] = *profile;
  // A session may name auto: the model's own format, or none when it has no built-in profile.
  auto auto_name = policy::ResolveProfileName(policy::kAutoProfile, model_type, chat_template);
  if (auto_name.ok()) {
    auto auto_profile = policy::LoadProfile(*auto_name);
    if (!auto_profile.ok()) return auto_profile.status();
    service_config.profiles[policy::kAutoProfile] = *std::move(auto_profile);
  }

  // A merged adapter's sessions run the model as loaded: theirs is the base series, labelled
  // with its name.
  parts.metrics = std::make_unique<Metrics>(
      service_config.model_name, adapter_names,
      flags.merge_adapters ? flags.adapters.front().first : Metrics::kBaseAdapter);
  if (flags.metrics_listen != "none") {
    if (absl::Status s = parts.metrics->Serve(flags.metrics_listen); !s.ok()) return s;
  }
  flags.engine.on_step = [metrics = parts.metrics.get()](const engine::StepReport& step) {
    metrics->ObserveStep(step.tokens);
  };
  auto engine = engine::Engine::Create(parts.model, flags.engine, adapters);
  if (!engine.ok()) return engine.status();
  parts.engine = *engine;
  parts.service = std::make_unique<Service>(parts.engine, parts.metrics.get(), service_config);
  auto warm = ToEngineConfig(v1::SessionConfig(), service_config, /*batch=*/false);
  if (!warm.ok()) return warm.status();
  if (absl::Status s = WarmUp(*parts.engine, *warm); !s.ok()) {
    return absl::Status(s.code(), "warm-up failed: " + std::string(s.message()));
  }
  // Scrapes read the engine's statistics as they are; the warm-up session is not counted.
  // The callback owns the engine, so a scrape during shutdown never sees it destroyed.
  parts.metrics->SetStatsSource([e = parts.engine] { return e->stats(); });

  parts.credentials = grpc::InsecureServerCredentials();
  if (flags.tls_cert) {
    auto chain = ReadFile(*flags.tls_cert);
    if (!chain.ok()) return chain.status();
    auto key = ReadFile(*flags.tls_key);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *chain});
    parts.credentials = grpc::SslServerCredentials(ssl);
  }
  return parts;
}

// Starts the gRPC server on --listen and prints the serving line.
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(const Flags& flags, Parts& parts) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, parts.credentials, &port);
  // The service refuses a message over --max_message_bytes with a message naming the flag;
  // gRPC's transport takes up to 4x that (its own error beyond).
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(std::numeric_limits<int>::max(), 4 * flags.service.max_message_bytes)));
  builder.RegisterService(parts.service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError("cannot listen on " + flags.listen +
                                  " (address in use or invalid?)");
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  const engine::EngineInfo& info = parts.engine->info();
  std::cout << "gpeserve: KV cache: " << info.kv_blocks << " blocks of " << info.block_size
            << " tokens in " << info.kv_dtype << ", " << (int64_t{1} << 30) / info.kv_block_bytes
            << " blocks per GiB\n";
  std::cout << "gpeserve: serving " << flags.service.model_name << " (" << info.architecture << ", "
            << info.dtype << ", " << info.device << ") on "
            << flags.listen.substr(0, flags.listen.rfind(':')) << ":" << port;
  if (parts.metrics->port() > 0) std::cout << ", metrics on port " << parts.metrics->port();
  std::cout << (flags.service.auth_token.empty() ? "" : ", token required")
            << (flags.tls_cert ? ", TLS" : "") << std::endl;
  return server;
}

// After SIGTERM/SIGINT: refuse new sessions, let running ones finish for --drain_seconds,
// end the rest with UNAVAILABLE, stop the server and the engine.
void Drain(const Flags& flags, Parts& parts, grpc::Server& server, int signal_number) {
  const int64_t drain = flags.drain_seconds;
  std::cout << "gpeserve: " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": draining (up to " << drain << " s)" << std::endl;
  server.GetHealthCheckService()->SetServingStatus(false);
  parts.service->StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain);
  while (parts.service->active_calls() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t left = parts.service->active_calls();
  if (left > 0) {
    std::cout << "gpeserve: ending " << left << " sessions still running" << std::endl;
    parts.service->AbortAll(absl::UnavailableError(
        absl::StrCat("the server shut down before the session ended (its --drain_seconds of ",
                     drain, " s ran out); open a new session on another replica")));
  }
  server.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  parts.engine->Shutdown();
  std::cout << "gpeserve: stopped" << std::endl;
}

int Run(int argc, char** argv) {
  Flags flags;
  if (auto code = ParseFlags(argc, argv, &flags)) return *code;
  // Signals are waited for in this thread; every thread started from here on blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<Parts> parts = Build(flags);
  if (!parts.ok()) return Fail(std::string(parts.status().message()));
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = Serve(flags, *parts);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  Drain(flags, *parts, **server, signal_number);
  return 0;
}

}  // namespace
}  // namespace gpeserve::server

int main(int argc, char** argv) { return gpeserve::server::Run(argc, argv); }
