#include "server/pipe.h"

#include <algorithm>

#include "server/convert.h"

namespace gpeserve::server {

namespace {
int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int64_t Pipe::SessionMicros(Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(now - opened_).count();
}

void Pipe::SetAdapter(const std::string& adapter) {
  MutexLock lock(&mu_);
  series_ = metrics_ != nullptr ? &metrics_->Series(adapter) : nullptr;
}

void Pipe::SourceArrived(size_t units) {
  MutexLock lock(&mu_);
  if (units > 0 && !first_arrival_) first_arrival_ = Clock::now();
}

bool Pipe::OnEvent(const engine::SessionEvent& e) {
  const Clock::time_point now = Clock::now();
  Action action;
  {
    MutexLock lock(&mu_);
    // A session's end counts whether or not its call is still there to hear of it (a client
    // gone mid-write, a call refused before the engine's cancel came back).
    if (e.kind == engine::SessionEvent::Kind::kDone ||
        e.kind == engine::SessionEvent::Kind::kError) {
      ObserveEnd(now, e);
    }
    if (end_ || ended_) return true;  // the call is ending; nothing more goes out
    switch (e.kind) {
      case engine::SessionEvent::Kind::kTokens:
        if (queue_.size() >= max_queued_) return false;
        if (!e.ids.empty()) ObserveTokens(now, e.ids.size());
        if (e.word_complete) ObserveWord(now, e);
        queue_.push_back(ToDeltaResponse(e, WallMicros(), SessionMicros(now)));
        break;
      case engine::SessionEvent::Kind::kWaiting:
        if (queue_.size() >= max_queued_) return false;
        queue_.push_back(ToWaitingResponse(e, WallMicros(), SessionMicros(now)));
        break;
      case engine::SessionEvent::Kind::kSegment:
        if (queue_.size() >= max_queued_) return false;
        if (series_ != nullptr) {
          Metrics::SegmentFinished(*series_, e.counters.kv_blocks_high_water);
        }
        word_ms_.clear();  // a long-form session's SessionDone has no per-word delays
        segment_words_ = 0;
        queue_.push_back(ToSegmentResponse(e));
        break;
      case engine::SessionEvent::Kind::kDone: {
        if (e.reason == engine::FinishReason::kCancelled) {
          // Not a completion: the client went away, or the server or engine ended the session
          // (whoever did has usually failed the call first). Never an OK status.
          end_ = e.status.ok() ? grpc::Status(grpc::StatusCode::CANCELLED,
                                              "the session was cancelled before it ended")
                               : ToGrpc(e.status);
          break;
        }
        // Words the pipe saw complete have their times; the rest (a final word completed by
        // the end of the session) end now.
        std::vector<double> delays_ms(e.delays.size(), MsSinceFirstArrival(now));
        for (size_t i = 0; i < delays_ms.size() && i < word_ms_.size(); ++i) {
          delays_ms[i] = word_ms_[i];
        }
        queue_.push_back(ToDoneResponse(e, delays_ms));
        end_ = grpc::Status::OK;
        break;
      }
      case engine::SessionEvent::Kind::kError:
        end_ = ToGrpc(e.status);
        break;
    }
    action = Next();
  }
  Perform(action);
  return true;
}

void Pipe::Fail(const grpc::Status& status) {
  Action action;
  {
    MutexLock lock(&mu_);
    if (!end_) end_ = status;
    action = Next();
  }
  Perform(action);
}

void Pipe::OnWriteDone(bool ok) {
  Action action;
  {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) {  // the client is gone
      queue_.clear();
      if (!end_) end_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    action = Next();
  }
  Perform(action);
}

void Pipe::Detach() {
  MutexLock lock(&mu_);
  sink_ = nullptr;
  ended_ = true;
}

Pipe::Action Pipe::Next() {
  if (sink_ == nullptr || writing_ || ended_) return {};
  if (!queue_.empty()) {
    writing_ = true;
    return {.sink = sink_, .write = &queue_.front()};
  }
  if (end_) {
    ended_ = true;
    return {.sink = sink_, .end = *end_};
  }
  return {};
}

void Pipe::Perform(const Action& action) {
  if (action.sink == nullptr) return;
  if (action.write != nullptr) {
    action.sink->Write(*action.write);
  } else if (action.end) {
    action.sink->End(*action.end);
  }
}

void Pipe::ObserveEnd(Clock::time_point now, const engine::SessionEvent& e) {
  if (series_ == nullptr) return;
  if (e.kind == engine::SessionEvent::Kind::kError) {
    Metrics::SessionFinished(*series_, "error");
    return;
  }
  Metrics::ObserveSessionLatency(*series_, std::chrono::duration<double>(now - opened_).count());
  Metrics::ObserveQueueTime(*series_, e.queue_seconds);
  Metrics::SessionFinished(*series_, engine::FinishReasonName(e.reason));
}

void Pipe::ObserveTokens(Clock::time_point now, size_t count) {
  if (series_ != nullptr) {
    if (!last_token_) {
      Metrics::ObserveTimeToFirstToken(*series_,
                                       std::chrono::duration<double>(now - opened_).count());
    } else {
      Metrics::ObserveInterTokenLatency(*series_,
                                        std::chrono::duration<double>(now - *last_token_).count());
    }
    for (size_t i = 1; i < count; ++i) Metrics::ObserveInterTokenLatency(*series_, 0);
  }
  last_token_ = now;
}

void Pipe::ObserveWord(Clock::time_point now, const engine::SessionEvent& e) {
  const int64_t before = segment_words_++;  // target words of the segment before it
  word_ms_.push_back(MsSinceFirstArrival(now));
  if (series_ == nullptr) return;
  Metrics::ObserveWordLag(*series_,
                          static_cast<double>(std::max<int64_t>(0, e.units_read - before)),
                          e.lag_ms / 1000.0);
}

double Pipe::MsSinceFirstArrival(Clock::time_point now) const {
  const Clock::time_point first = first_arrival_.value_or(opened_);
  return std::chrono::duration<double, std::milli>(now - first).count();
}

}  // namespace gpeserve::server
