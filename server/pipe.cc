#include "server/pipe.h"

#include <algorithm>

namespace gpeserve::server {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void Pipe::SourceArrived(size_t units) {
  std::lock_guard<std::mutex> lock(mu_);
  arrivals_.insert(arrivals_.end(), units, Clock::now());
}

bool Pipe::OnEvent(const engine::SessionEvent& e) {
  const Clock::time_point now = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (end_ || ended_) return true;  // the call is ending; nothing more goes out
  switch (e.kind) {
    case engine::SessionEvent::Kind::kTokens: {
      if (queue_.size() >= max_queued_) return false;
      if (!e.ids.empty()) ObserveTokens(now, e.ids.size());
      if (e.word_complete) ObserveWord(now, e.units_read);
      v1::StreamResponse response;
      v1::TokenDelta* delta = response.mutable_delta();
      delta->mutable_ids()->Add(e.ids.begin(), e.ids.end());
      delta->set_text(e.text);
      delta->set_word_complete(e.word_complete);
      delta->set_source_units_read(e.units_read);
      delta->set_server_time_us(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
      delta->set_session_time_us(
          std::chrono::duration_cast<std::chrono::microseconds>(now - opened_).count());
      queue_.push_back(std::move(response));
      break;
    }
    case engine::SessionEvent::Kind::kDone: {
      if (metrics_ != nullptr) {
        metrics_->ObserveSessionLatency(std::chrono::duration<double>(now - opened_).count());
        metrics_->ObserveQueueTime(e.queue_seconds);
        metrics_->SessionFinished(engine::FinishReasonName(e.reason));
      }
      v1::StreamResponse response;
      v1::SessionDone* done = response.mutable_done();
      done->set_text(e.full_text);
      done->mutable_ids()->Add(e.output.begin(), e.output.end());
      done->mutable_delays()->Add(e.delays.begin(), e.delays.end());
      const double end_ms = MsSinceFirstArrival(now);
      for (size_t i = 0; i < e.delays.size(); ++i) {
        done->add_delays_ms(i < word_ms_.size() ? word_ms_[i] : end_ms);
      }
      done->set_source_units(e.source_units);
      v1::SessionCounters* c = done->mutable_counters();
      c->set_source_tokens(e.counters.source_tokens);
      c->set_forward_tokens(e.counters.forward_tokens);
      c->set_shared_tokens(e.counters.shared_tokens);
      c->set_preemptions(e.counters.preemptions);
      done->set_finish_reason(engine::FinishReasonName(e.reason));
      done->set_source_units_unread(e.source_units_unread);
      queue_.push_back(std::move(response));
      end_ = grpc::Status::OK;
      break;
    }
    case engine::SessionEvent::Kind::kError:
      if (metrics_ != nullptr) metrics_->SessionFinished("error");
      end_ = ToGrpc(e.status);
      break;
  }
  Pump(lock);
  return true;
}

void Pipe::Fail(const grpc::Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!end_) end_ = status;
  Pump(lock);
}

void Pipe::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  writing_ = false;
  if (!queue_.empty()) queue_.pop_front();
  if (!ok) {  // the client is gone
    queue_.clear();
    if (!end_) end_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
  Pump(lock);
}

void Pipe::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = nullptr;
  ended_ = true;
}

void Pipe::Pump(std::unique_lock<std::mutex>& lock) {
  if (sink_ == nullptr || writing_ || ended_) return;
  Sink* sink = sink_;
  if (!queue_.empty()) {
    writing_ = true;
    const v1::StreamResponse& front = queue_.front();  // stays put until OnWriteDone pops it
    lock.unlock();
    sink->Write(front);
    return;
  }
  if (end_) {
    ended_ = true;
    const grpc::Status status = *end_;
    lock.unlock();
    sink->End(status);
  }
}

void Pipe::ObserveTokens(Clock::time_point now, size_t count) {
  if (metrics_ != nullptr) {
    if (!last_token_) {
      metrics_->ObserveTimeToFirstToken(std::chrono::duration<double>(now - opened_).count());
    } else {
      metrics_->ObserveInterTokenLatency(std::chrono::duration<double>(now - *last_token_).count());
    }
    for (size_t i = 1; i < count; ++i) metrics_->ObserveInterTokenLatency(0);
  }
  last_token_ = now;
}

void Pipe::ObserveWord(Clock::time_point now, int64_t units_read) {
  const int64_t before = static_cast<int64_t>(word_ms_.size());  // target words before it
  word_ms_.push_back(MsSinceFirstArrival(now));
  if (metrics_ == nullptr) return;
  double lag_seconds = 0;
  if (units_read >= 1 && static_cast<size_t>(units_read) <= arrivals_.size()) {
    lag_seconds = std::chrono::duration<double>(now - arrivals_[units_read - 1]).count();
  }
  metrics_->ObserveWordLag(static_cast<double>(std::max<int64_t>(0, units_read - before)),
                           lag_seconds);
}

double Pipe::MsSinceFirstArrival(Clock::time_point now) const {
  const Clock::time_point first = arrivals_.empty() ? opened_ : arrivals_.front();
  return std::chrono::duration<double, std::milli>(now - first).count();
}

}  // namespace gpeserve::server
