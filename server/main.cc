// gpeserve: the gRPC server. Flags are parsed once here into the engine's and the service's
// configurations; everything else lives in server/ and engine/.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/cli/args.h"
#include "engine/engine.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/policy/profile.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
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

int Run(int argc, char** argv) {
  cli::Args args(
      "gpeserve [--model DIR] [options]",
      "Serves a model as a streaming processor over gRPC (proto/gpeserve/v1/gpeserve.proto):\n"
      "clients stream source words and receive target tokens while the source is still\n"
      "coming in (group position encoding, docs/GPE.md). Prometheus metrics on\n"
      "--metrics_listen. SIGTERM or SIGINT: stop accepting sessions, let running ones finish\n"
      "for up to --drain_seconds, cancel the rest, exit 0.\n"
      "Without --model it serves the built-in default model, a small English-to-German\n"
      "translator trained by scripts/train-default-model (docs/training.md).");
  args.AddString("model", "DIR",
                 "Hugging Face model folder (default: the built-in English-to-German model)");
  args.AddString("profile", "NAME|FILE",
                 "default prompt profile (qwen2.5, llama3, gemma2, phi3, or a JSON file); "
                 "sessions may also name any built-in profile",
                 "qwen2.5");
  args.AddString("listen", "HOST:PORT", "gRPC address (port 0: any free port)", "127.0.0.1:50051");
  args.AddString("metrics_listen", "HOST:PORT", "Prometheus /metrics address; 'none': off",
                 "127.0.0.1:9090");
  args.AddString("device", "cpu|cuda", "device", "cpu");
  args.AddString("dtype", model::kServingDtypeChoices, model::kServingDtypeHelp, "auto");
  args.AddString("threads", "N", "CPU threads for the model (0 = all cores)", "0");
  args.AddString("kv_cache_memory", "BYTES", "KV cache size when --kv_blocks is 0", "1073741824");
  args.AddString("kv_blocks", "N", "KV cache blocks (0: from --kv_cache_memory)", "0");
  args.AddString("block_size", "N", "tokens per KV block", "16");
  args.AddString("max_batch_tokens", "N", "tokens in one forward step", "512");
  args.AddString("max_sessions_per_step", "N", "sessions in one forward step", "64");
  args.AddString("long_read_tokens", "N",
                 "a read with more tokens left than this (a long prompt) is paced", "256");
  args.AddString("long_read_slowdown", "F",
                 "pace long reads so that other sessions' steps take at most F times as long on "
                 "average (0: no pacing)",
                 "1.5");
  args.AddString("max_sessions", "N",
                 "open sessions (running and waiting); beyond: RESOURCE_EXHAUSTED", "256");
  args.AddString("wait_k", "K", "default wait-k of a session", "3");
  args.AddString("max_new_tokens", "N", "default target tokens of a session", "256");
  args.AddString("max_new_tokens_limit", "N", "a session's max_new_tokens at most", "2048");
  args.AddString("max_source_tokens", "N",
                 "tokens of one session's prompt and source words together at most", "8192");
  args.AddString("max_instruction_bytes", "N",
                 "bytes of a session's instruction (and custom prompt strings) at most", "8192");
  args.AddString("max_chunk_words", "N", "words in one SourceChunk at most", "1000");
  args.AddString("max_word_bytes", "N", "bytes in one source word at most", "1024");
  args.AddString("max_message_bytes", "N", "size of one request message at most", "4194304");
  args.AddString("max_queued_events", "N",
                 "responses queued for a slow client before its session is cancelled", "1024");
  args.AddString("drain_seconds", "S", "on SIGTERM: how long running sessions may finish", "30");
  args.AddString("auth_token_file", "FILE",
                 "require 'authorization: Bearer <token>' with the token in FILE");
  args.AddString("tls_cert", "FILE", "PEM certificate chain: serve TLS (with --tls_key)");
  args.AddString("tls_key", "FILE", "PEM private key of --tls_cert");
  if (auto code = args.ParseOrExit(argc, argv, 1)) return *code;

  auto number = [&](const char* name, int64_t min, int64_t* out) {
    if (!absl::SimpleAtoi(*args.Get(name), out) || *out < min) {
      std::cerr << "gpeserve: --" << name << " takes a whole number >= " << min << "\n";
      return false;
    }
    return true;
  };
  int64_t threads, kv_memory, kv_blocks, block_size, max_batch, max_per_step, max_sessions, wait_k,
      max_new, max_new_limit, max_source, max_instruction, max_chunk, max_word, max_message,
      max_queued, drain, long_read_tokens;
  if (!number("threads", 0, &threads) || !number("kv_cache_memory", 1, &kv_memory) ||
      !number("kv_blocks", 0, &kv_blocks) || !number("block_size", 1, &block_size) ||
      !number("max_batch_tokens", 1, &max_batch) ||
      !number("max_sessions_per_step", 1, &max_per_step) ||
      !number("max_sessions", 1, &max_sessions) || !number("wait_k", 1, &wait_k) ||
      !number("max_new_tokens", 1, &max_new) ||
      !number("max_new_tokens_limit", 1, &max_new_limit) ||
      !number("max_source_tokens", 1, &max_source) ||
      !number("max_instruction_bytes", 0, &max_instruction) ||
      !number("max_chunk_words", 1, &max_chunk) || !number("max_word_bytes", 1, &max_word) ||
      !number("max_message_bytes", 1, &max_message) ||
      !number("max_queued_events", 1, &max_queued) || !number("drain_seconds", 0, &drain) ||
      !number("long_read_tokens", 1, &long_read_tokens)) {
    return 2;
  }
  double long_read_slowdown = 0;
  if (!absl::SimpleAtod(*args.Get("long_read_slowdown"), &long_read_slowdown) ||
      !(long_read_slowdown == 0 || long_read_slowdown >= 1)) {
    return Fail("--long_read_slowdown takes 0 (off) or a number >= 1", 2);
  }
  if (max_new > max_new_limit) return Fail("--max_new_tokens exceeds --max_new_tokens_limit", 2);
  if (args.Get("tls_cert").has_value() != args.Get("tls_key").has_value()) {
    return Fail("--tls_cert and --tls_key go together", 2);
  }

  // Signals are waited for in this thread; every thread started from here on blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ServiceConfig service_config;
  service_config.default_wait_k = static_cast<int>(wait_k);
  service_config.default_max_new_tokens = static_cast<int>(max_new);
  service_config.max_new_tokens_limit = static_cast<int>(max_new_limit);
  service_config.max_source_tokens = max_source;
  service_config.max_instruction_bytes = static_cast<int>(max_instruction);
  service_config.max_message_bytes = max_message;
  service_config.max_chunk_words = static_cast<int>(max_chunk);
  service_config.max_word_bytes = static_cast<int>(max_word);
  service_config.max_queued_events = static_cast<int>(max_queued);
  for (const std::string& name : policy::BuiltinProfileNames()) {
    auto profile = policy::LoadProfile(name);
    if (!profile.ok()) return Fail(std::string(profile.status().message()));
    service_config.profiles[name] = *profile;
  }
  auto profile = policy::LoadProfile(*args.Get("profile"));
  if (!profile.ok()) return Fail(std::string(profile.status().message()));
  service_config.default_profile = profile->name.empty() ? *args.Get("profile") : profile->name;
  service_config.profiles[service_config.default_profile] = *profile;
  if (auto path = args.Get("auth_token_file")) {
    auto token = ReadFile(*path);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    service_config.auth_token = std::string(absl::StripAsciiWhitespace(*token));
    if (service_config.auth_token.empty()) return Fail(*path + ": the token file is empty");
  }

  // The model.
  const model::ModelOptions model_options{.dtype = *args.Get("dtype"),
                                          .device = *args.Get("device"),
                                          .threads = static_cast<int>(threads)};
  absl::StatusOr<std::shared_ptr<const model::Model>> model;
  std::string model_dir = "(built-in default model)";
  if (auto dir = args.Get("model")) {
    model_dir = *dir;
    service_config.model_name = std::filesystem::path(*dir).filename().string();
    if (service_config.model_name.empty()) {
      service_config.model_name = std::filesystem::path(*dir).parent_path().filename().string();
    }
    model = model::Model::Load(*dir, model_options);
  } else {
    service_config.model_name = model::kDefaultModelName;
    model = model::LoadDefaultModel(model_options);
  }
  if (!model.ok()) return Fail(std::string(model.status().message()));
  if ((*model)->tokenizer() == nullptr) return Fail(model_dir + ": no tokenizer.json");
  std::cout << "gpeserve: " << (*model)->kernel_path() << std::endl;

  // Metrics and the engine.
  Metrics metrics(service_config.model_name);
  if (*args.Get("metrics_listen") != "none") {
    if (absl::Status s = metrics.Serve(*args.Get("metrics_listen")); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  engine::EngineConfig engine_config;
  engine_config.block_size = static_cast<int>(block_size);
  engine_config.kv_blocks = kv_blocks;
  engine_config.kv_cache_memory = kv_memory;
  engine_config.scheduler.max_batch_tokens = max_batch;
  engine_config.scheduler.max_sessions_per_step = static_cast<int>(max_per_step);
  engine_config.scheduler.long_read_tokens = long_read_tokens;
  engine_config.long_read_slowdown = long_read_slowdown;
  engine_config.max_sessions = static_cast<int>(max_sessions);
  engine_config.on_step = [&metrics](int64_t tokens) { metrics.ObserveStep(tokens); };
  auto engine = engine::Engine::Create(*model, engine_config);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  Service service(*engine, &metrics, service_config);
  {
    auto warm = service.ToEngineConfig(v1::SessionConfig(), /*batch=*/false);
    if (!warm.ok()) return Fail(std::string(warm.status().message()));
    if (absl::Status s = WarmUp(**engine, *warm); !s.ok()) {
      return Fail("warm-up failed: " + std::string(s.message()));
    }
  }
  // Scrapes read the engine's statistics as they are; the warm-up session is not counted.
  // The callback owns the engine, so a scrape during shutdown never sees it destroyed.
  metrics.SetStatsSource([e = *engine] { return e->stats(); });

  // The server.
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (auto cert = args.Get("tls_cert")) {
    auto chain = ReadFile(*cert);
    auto key = ReadFile(*args.Get("tls_key"));
    if (!chain.ok() || !key.ok()) {
      return Fail(std::string((chain.ok() ? key.status() : chain.status()).message()));
    }
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *chain});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(*args.Get("listen"), credentials, &port);
  // The service refuses a message over --max_message_bytes with a message naming the flag;
  // gRPC's transport takes up to 4x that (its own error beyond).
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(std::numeric_limits<int>::max(), 4 * max_message)));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Fail("cannot listen on " + *args.Get("listen") + " (address in use or invalid?)");
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  const std::string host = args.Get("listen")->substr(0, args.Get("listen")->rfind(':'));
  std::cout << "gpeserve: serving " << service_config.model_name << " ("
            << (*engine)->info().architecture << ", " << (*engine)->info().dtype << ", "
            << (*engine)->info().device << ") on " << host << ":" << port;
  if (metrics.port() > 0) std::cout << ", metrics on port " << metrics.port();
  std::cout << (service_config.auth_token.empty() ? "" : ", token required")
            << (args.Get("tls_cert") ? ", TLS" : "") << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cout << "gpeserve: " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": draining (up to " << drain << " s)" << std::endl;
  server->GetHealthCheckService()->SetServingStatus(false);
  service.StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain);
  while (service.active_calls() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t left = service.active_calls();
  if (left > 0) {
    std::cout << "gpeserve: ending " << left << " sessions still running" << std::endl;
    service.AbortAll(absl::UnavailableError(
        absl::StrCat("the server shut down before the session ended (its --drain_seconds of ",
                     drain, " s ran out); open a new session on another replica")));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (*engine)->Shutdown();
  std::cout << "gpeserve: stopped" << std::endl;
  return 0;
}

}  // namespace
}  // namespace gpeserve::server

int main(int argc, char** argv) { return gpeserve::server::Run(argc, argv); }
