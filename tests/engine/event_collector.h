// Collects one engine session's events for tests: Wait() blocks until its final event (done or
// error; a long-form session's segment events come before it).
//
// Thread-safety: the callback runs on the engine's loop thread; the accessors on any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace gpeserve::engine {

class Collector {
 public:
  EventCallback Callback() {
    return [this](const SessionEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
      if (e.kind == SessionEvent::Kind::kDone || e.kind == SessionEvent::Kind::kError) {
        ++finals_;
        done_.notify_all();
      }
      return true;
    };
  }
  // The final event.
  SessionEvent Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finals_ > 0; });
    return events_.back();
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
