// Helpers of the engine tests: Collector gathers one engine session's events (Wait() blocks
// until its final event, done or error; a long-form session's segment events come before it);
// RunAlone runs a session offline, alone, greedy: the reference the engine's sessions must
// equal.
//
// Thread-safety: the Collector's callback runs on the engine's loop thread, its accessors on
// any thread; RunAlone is a function of its arguments.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/model.h"
#include "engine/session/runner.h"
#include "gtest/gtest.h"

namespace gpeserve::engine {

// `words` as one session with `options` (and `context` read with its prompt prefix,
// StreamSession::SetContext) alone on `m`, greedy, in a pool of its own (of `kv_dtype`;
// Undefined: the model's activation dtype).
inline session::SessionResult RunAlone(const model::Model& m, session::SessionOptions options,
                                       const std::vector<std::string>& words,
                                       std::span<const int32_t> context = {},
                                       torch::ScalarType kv_dtype = torch::ScalarType::Undefined) {
  const kv::KvCacheConfig kv_config{.block_size = 4, .num_blocks = 512};
  kv::BlockAllocator allocator(kv_config);
  auto pool = kv::KvPool::Create(
      kv_config, {m.config().num_layers, m.config().num_kv_heads, m.config().head_dim},
      kv_dtype == torch::ScalarType::Undefined ? m.dtype() : kv_dtype, m.device());
  options.max_positions = m.config().max_position_embeddings;  // as Engine::Open sets it
  auto session = session::CreateOfflineSession(m, options, words);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!context.empty()) {
    EXPECT_TRUE((*session)->SetContext(context).ok());
  }
  auto result = session::RunToCompletion(m, **session, *pool, allocator);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

class Collector {
 public:
  EventCallback Callback() {
    return [this](const SessionEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
      if (e.kind == SessionEvent::Kind::kDone || e.kind == SessionEvent::Kind::kError) ++finals_;
      done_.notify_all();
      return true;
    };
  }
  // The final event.
  SessionEvent Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finals_ > 0; });
    return events_.back();
  }
  // Waits until `ready` holds for the events so far (false after `timeout`).
  bool WaitUntil(const std::function<bool(const std::vector<SessionEvent>&)>& ready,
                 std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock<std::mutex> lock(mu_);
    return done_.wait_for(lock, timeout, [&] { return ready(events_); });
  }
  std::vector<SessionEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // The events of one kind, in order.
  std::vector<SessionEvent> Of(SessionEvent::Kind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SessionEvent> out;
    for (const SessionEvent& e : events_) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  int finals() {
    std::lock_guard<std::mutex> lock(mu_);
    return finals_;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<SessionEvent> events_;
  int finals_ = 0;
};

}  // namespace gpeserve::engine
