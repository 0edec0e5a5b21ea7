// The fixture of the server tests: an in-process gpeserve service on loopback (ephemeral port)
// over a tiny model, and helpers to send raw requests and compare with offline runs.
//
// Thread-safety: test code; helpers are called from the test's threads.
#pragma once

#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "engine/kv/kv_pool.h"
#include "engine/session/runner.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/convert.h"
#include "server/service.h"
#include "tests/engine/test_models.h"

namespace gpeserve::server {

using client::ConnectOptions;

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServiceConfig config = {}, int max_sessions = 64, int64_t kv_blocks = 2048,
             int max_message_bytes = 4 << 20) {
    model_ = testing::TinyChatModel(7);
    engine::EngineConfig engine_config;
    engine_config.block_size = 4;
    engine_config.kv_blocks = kv_blocks;
    engine_config.max_sessions = max_sessions;
    engine_config.on_step = [this](const engine::StepReport& step) {
      metrics_->ObserveStep(step.tokens);
    };
    if (tune_engine_) tune_engine_(engine_config);
    metrics_ = std::make_unique<Metrics>("tiny");
    auto engine = engine::Engine::Create(model_, engine_config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    config.model_name = "tiny";
    config.default_profile = "qwen2.5";
    config.profiles["qwen2.5"] = *policy::LoadProfile("qwen2.5");
    config.default_max_new_tokens = 12;
    config.max_message_bytes = max_message_bytes;
    service_ = std::make_unique<Service>(engine_, metrics_.get(), config);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    builder.SetMaxReceiveMessageSize(4 * max_message_bytes);  // as gpeserve sets it
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    connect_.server = "127.0.0.1:" + std::to_string(port_);
    stub_ = v1::Gpeserve::NewStub(client::Connect(connect_));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (engine_) engine_->Shutdown();
  }

  // What the session produces alone, offline (greedy).
  session::SessionResult Alone(const v1::SessionConfig& config,
                               const std::vector<std::string>& words, bool batch = false) {
    auto engine_config = ToEngineConfig(config, service_->config(), batch);
    EXPECT_TRUE(engine_config.ok()) << engine_config.status();
    const model::ModelConfig& c = model_->config();
    kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 512});
    auto pool = kv::KvPool::Create({.block_size = 4, .num_blocks = 512},
                                   {c.num_layers, c.num_kv_heads, c.head_dim}, model_->dtype(),
                                   model_->device());
    auto session = session::CreateOfflineSession(*model_, engine_config->options, words);
    auto result = session::RunToCompletion(*model_, **session, *pool, allocator);
    EXPECT_TRUE(result.ok()) << result.status();
    return *result;
  }

  // Waits until every KV block is free again (sessions end asynchronously).
  bool AllBlocksFree() {
    for (int i = 0; i < 200; ++i) {
      const engine::EngineStats s = engine_->stats();
      if (s.kv.free_blocks == s.kv.total_blocks && s.sessions_running == 0 &&
          s.sessions_waiting == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Set before Start: changes the engine's configuration (e.g. its limits).
  std::function<void(engine::EngineConfig&)> tune_engine_;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Metrics> metrics_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ConnectOptions connect_;
  std::unique_ptr<v1::Gpeserve::Stub> stub_;
};

inline std::vector<std::string> RandomWords(std::mt19937& rng, int n) {
  static const std::vector<std::string> vocabulary = {"the", "dog",    "sees", "a",     "cat",
                                                      "in",  "big",    "red",  "house", "runs",
                                                      "to",  "school", "Ü",    "naïve", "東京"};
  std::vector<std::string> words;
  for (int i = 0; i < n; ++i) words.push_back(vocabulary[rng() % vocabulary.size()]);
  return words;
}

// Sends raw requests and returns the call's final status (and the responses before it).
inline grpc::Status Exchange(v1::Gpeserve::Stub& stub,
                             const std::vector<v1::StreamRequest>& requests,
                             std::vector<v1::StreamResponse>* responses = nullptr,
                             const std::string& token = "") {
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub.Stream(&context);
  for (const v1::StreamRequest& r : requests) {
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  v1::StreamResponse response;
  while (stream->Read(&response)) {
    if (responses != nullptr) responses->push_back(response);
  }
  return stream->Finish();
}

inline v1::StreamRequest ConfigRequest(const v1::SessionConfig& config) {
  v1::StreamRequest r;
  *r.mutable_config() = config;
  return r;
}
inline v1::StreamRequest WordsRequest(const std::vector<std::string>& words) {
  v1::StreamRequest r;
  for (const std::string& w : words) r.mutable_chunk()->add_words(w);
  return r;
}
inline v1::StreamRequest TextRequest(const std::string& text) {
  v1::StreamRequest r;
  r.mutable_chunk()->set_text(text);
  return r;
}
inline v1::StreamRequest EndRequest() {
  v1::StreamRequest r;
  r.mutable_end();
  return r;
}

}  // namespace gpeserve::server
