// The output side of a call (server/pipe.h) against a fake Sink that records what the pipe does
// to the call: responses go out in event order, one write in flight at a time (gRPC allows no
// more), the call ends once, after what is queued; Fail and error events end it with their
// status; a slow client is refused; after Detach the sink is never touched; a producer thread
// and the acknowledging thread together keep the order. Only the public interface is used.
#include "server/pipe.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace gpeserve::server {
namespace {

using engine::SessionEvent;

// Records the pipe's calls. A Write while the previous one is still in flight, or any call
// after End, breaks gRPC's rules for a reactor and is counted as a violation; so is any call
// after Poison() (the reactor is gone after OnDone).
class FakeSink : public Pipe::Sink {
 public:
  void Write(const v1::StreamResponse& response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ || ended_ || poisoned_) ++violations_;
    in_flight_ = true;
    writes_.push_back(response);  // a copy: the pipe's response lives until OnWriteDone only
    cv_.notify_all();
  }
  void End(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ || ended_ || poisoned_) ++violations_;
    ended_ = true;
    status_ = status;
    ++ends_;
    cv_.notify_all();
  }

  // Completes the write in flight as gRPC would (OnWriteDone); false when none is in flight.
  bool Ack(Pipe& pipe, bool ok = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!in_flight_) return false;
      in_flight_ = false;
    }
    pipe.OnWriteDone(ok);  // may start the next write inline, which takes mu_ again
    return true;
  }
  // Acknowledges writes until none is in flight; returns how many.
  int AckAll(Pipe& pipe) {
    int n = 0;
    while (Ack(pipe)) ++n;
    return n;
  }
  // Waits (bounded, so that a bug fails rather than hangs) for a write in flight or the end.
  // Returns false on the end or on the time limit.
  bool WaitForWrite() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return in_flight_ || ended_; });
    return in_flight_;
  }
  void Poison() {
    std::lock_guard<std::mutex> lock(mu_);
    poisoned_ = true;
  }

  std::vector<v1::StreamResponse> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  size_t write_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_.size();
  }
  bool in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  int ends() {
    std::lock_guard<std::mutex> lock(mu_);
    return ends_;
  }
  grpc::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  int violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::StreamResponse> writes_;
  bool in_flight_ = false;
  bool ended_ = false;
  bool poisoned_ = false;
  int ends_ = 0;
  int violations_ = 0;
  grpc::Status status_;
};

SessionEvent Tokens(std::vector<int32_t> ids, std::string text = "", bool word_complete = false,
                    int64_t units_read = 0) {
  SessionEvent e;
  e.kind = SessionEvent::Kind::kTokens;
  e.ids = std::move(ids);
  e.text = std::move(text);
  e.word_complete = word_complete;
  e.units_read = units_read;
  return e;
}

SessionEvent Done(std::vector<int32_t> output = {}, std::vector<int64_t> delays = {}) {
  SessionEvent e;
  e.kind = SessionEvent::Kind::kDone;
  e.reason = engine::FinishReason::kEndOfSequence;
  e.output = std::move(output);
  e.delays = std::move(delays);
  return e;
}

SessionEvent Error(absl::Status status) {
  SessionEvent e;
  e.kind = SessionEvent::Kind::kError;
  e.status = std::move(status);
  return e;
}

std::vector<int32_t> Ids(const v1::StreamResponse& r) {
  return std::vector<int32_t>(r.delta().ids().begin(), r.delta().ids().end());
}

// The first id of each written delta: the tests give each event a distinct first id.
std::vector<int32_t> FirstIds(const std::vector<v1::StreamResponse>& writes) {
  std::vector<int32_t> out;
  for (const v1::StreamResponse& r : writes) {
    out.push_back(r.has_delta() && r.delta().ids_size() > 0 ? r.delta().ids(0) : -1);
  }
  return out;
}

// A worked example of the whole call: each delta waits for the previous write to complete, the
// SessionDone is written last, and only once it is written does the call end with OK.
TEST(PipeTest, WritesResponsesInOrderOneAtATimeThenEndsWithOk) {
  FakeSink sink;
  Pipe pipe(&sink, /*metrics=*/nullptr, /*max_queued=*/16);
  EXPECT_TRUE(pipe.OnEvent(Tokens({11, 12}, "Hel", false, 2)));
  ASSERT_EQ(sink.write_count(), 1u);  // nothing in flight: written at once
  EXPECT_TRUE(pipe.OnEvent(Tokens({13}, "lo", true, 3)));
  EXPECT_TRUE(pipe.OnEvent(Done({11, 12, 13}, {3})));
  EXPECT_EQ(sink.write_count(), 1u);  // the first write is still in flight
  EXPECT_FALSE(sink.ended());

  ASSERT_TRUE(sink.Ack(pipe));
  EXPECT_EQ(sink.write_count(), 2u);
  EXPECT_FALSE(sink.ended());
  ASSERT_TRUE(sink.Ack(pipe));
  EXPECT_EQ(sink.write_count(), 3u);
  EXPECT_FALSE(sink.ended());  // the SessionDone is in flight: not finished yet
  ASSERT_TRUE(sink.Ack(pipe));
  EXPECT_TRUE(sink.ended());
  EXPECT_FALSE(sink.in_flight());

  const std::vector<v1::StreamResponse> w = sink.writes();
  ASSERT_EQ(w.size(), 3u);
  ASSERT_TRUE(w[0].has_delta());
  EXPECT_EQ(Ids(w[0]), (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(w[0].delta().text(), "Hel");
  EXPECT_FALSE(w[0].delta().word_complete());
  EXPECT_EQ(w[0].delta().source_units_read(), 2);
  ASSERT_TRUE(w[1].has_delta());
  EXPECT_EQ(Ids(w[1]), (std::vector<int32_t>{13}));
  EXPECT_EQ(w[1].delta().text(), "lo");
  EXPECT_TRUE(w[1].delta().word_complete());
  EXPECT_EQ(w[1].delta().source_units_read(), 3);
  ASSERT_TRUE(w[2].has_done());
  EXPECT_TRUE(sink.status().ok());
  EXPECT_EQ(sink.ends(), 1);
  EXPECT_EQ(sink.violations(), 0);
}

// The SessionDone carries the engine's final event field for field.
TEST(PipeTest, DoneCarriesTheFinalEvent) {
  FakeSink sink;
  Pipe pipe(&sink, nullptr, 16);
  pipe.SourceArrived(4);
  SessionEvent done = Done({5, 6, 7}, {2, 3});
  done.reason = engine::FinishReason::kMaxNewTokens;
  done.full_text = "a b";
  done.source_units = 4;
  done.source_units_unread = 1;
  done.counters.source_tokens = 10;
  done.counters.forward_tokens = 12;
  done.counters.shared_tokens = 3;
  done.counters.preemptions = 1;
  EXPECT_TRUE(pipe.OnEvent(done));
  ASSERT_EQ(sink.write_count(), 1u);
  const v1::SessionDone d = sink.writes()[0].done();
  EXPECT_EQ(d.text(), "a b");
  EXPECT_EQ(std::vector<int32_t>(d.ids().begin(), d.ids().end()), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(std::vector<int64_t>(d.delays().begin(), d.delays().end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d.delays_ms_size(), 2);  // one per target word
  EXPECT_EQ(d.source_units(), 4);
  EXPECT_EQ(d.source_units_unread(), 1);
  EXPECT_EQ(d.counters().source_tokens(), 10);
  EXPECT_EQ(d.counters().forward_tokens(), 12);
  EXPECT_EQ(d.counters().shared_tokens(), 3);
  EXPECT_EQ(d.counters().preemptions(), 1);
  EXPECT_EQ(d.finish_reason(), "max_new_tokens");
  EXPECT_FALSE(sink.ended());
  ASSERT_TRUE(sink.Ack(pipe));
  EXPECT_TRUE(sink.ended());
  EXPECT_TRUE(sink.status().ok());
}

// delays_ms: a word the pipe saw complete has the time it completed; a word completed only by
// the end of the session has the end's. A pause between the two makes their order strict (the
// steady clock only moves forward); no duration is asserted.
TEST(PipeTest, WordDelaysAreWhenThePipeSawEachWordComplete) {
  FakeSink sink;
  Pipe pipe(&sink, nullptr, 16);
  pipe.SourceArrived(3);
  EXPECT_TRUE(pipe.OnEvent(Tokens({1}, "one", /*word_complete=*/true, 2)));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(pipe.OnEvent(Tokens({2}, " two", /*word_complete=*/true, 3)));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(pipe.OnEvent(Done({1, 2, 3}, {2, 3, 3})));  // "three" ends with the session
  sink.AckAll(pipe);
  const std::vector<v1::StreamResponse> w = sink.writes();
  ASSERT_EQ(w.size(), 3u);
  ASSERT_TRUE(w[2].has_done());
  const auto& ms = w[2].done().delays_ms();
  ASSERT_EQ(ms.size(), 3);
  EXPECT_GE(ms[0], 0.0);
  EXPECT_LT(ms[0], ms[1]);
  EXPECT_LT(ms[1], ms[2]);
  // session_time_us only moves forward from one delta to the next.
  EXPECT_LT(w[0].delta().session_time_us(), w[1].delta().session_time_us());
  EXPECT_GT(w[0].delta().server_time_us(), 0);
}

// Property: for random sessions and random interleavings of engine events and write
// completions, the writes are exactly the deltas of the token events in order (then the
// SessionDone), one in flight at a time, and the call ends once, after the last write, with the
// status the session ended with: OK after a SessionDone, an error event's status, or Fail's.
TEST(PipeTest, RandomInterleavingsKeepOrderAndEndOnce) {
  for (int seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    FakeSink sink;
    Pipe pipe(&sink, nullptr, /*max_queued=*/1000);
    std::vector<SessionEvent> tokens;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> ids = {1000 + i};  // distinct first ids tell the deltas apart
      for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
        ids.push_back(static_cast<int>(rng() % 50));
      }
      std::string text = "w";
      text += std::to_string(i);
      tokens.push_back(Tokens(ids, text, rng() % 2 == 0, i + 1));
    }
    const int ending = static_cast<int>(rng() % 3);  // 0: done, 1: error event, 2: Fail
    const grpc::Status expected =
        ending == 0 ? grpc::Status::OK
        : ending == 1
            ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad chunk " + std::to_string(seed))
            : grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining " + std::to_string(seed));

    size_t next = 0;
    bool final_sent = false;
    while (!final_sent || sink.in_flight()) {
      const bool deliver = !final_sent && (!sink.in_flight() || rng() % 2 == 0);
      if (!deliver) {
        ASSERT_TRUE(sink.Ack(pipe));
      } else if (next < tokens.size()) {
        EXPECT_TRUE(pipe.OnEvent(tokens[next++]));
      } else {
        final_sent = true;
        if (ending == 0) {
          EXPECT_TRUE(pipe.OnEvent(Done({1}, {1})));
        } else if (ending == 1) {
          EXPECT_TRUE(pipe.OnEvent(Error(absl::InvalidArgumentError(expected.error_message()))));
        } else {
          pipe.Fail(expected);
        }
      }
    }

    const std::vector<v1::StreamResponse> w = sink.writes();
    ASSERT_EQ(w.size(), tokens.size() + (ending == 0 ? 1 : 0));
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_TRUE(w[i].has_delta()) << i;
      EXPECT_EQ(Ids(w[i]), tokens[i].ids) << i;
      EXPECT_EQ(w[i].delta().text(), tokens[i].text) << i;
      EXPECT_EQ(w[i].delta().word_complete(), tokens[i].word_complete) << i;
      EXPECT_EQ(w[i].delta().source_units_read(), tokens[i].units_read) << i;
    }
    if (ending == 0) {
      EXPECT_TRUE(w.back().has_done());
    }
    EXPECT_TRUE(sink.ended());
    EXPECT_EQ(sink.ends(), 1);
    EXPECT_EQ(sink.status().error_code(), expected.error_code());
    EXPECT_EQ(sink.status().error_message(), expected.error_message());
    EXPECT_EQ(sink.violations(), 0);
  }
}

// Fail ends the call only after the responses already queued are written, with Fail's code
// and message; events after it are not written.
TEST(PipeTest, FailEndsAfterWhatIsQueued) {
  FakeSink sink;
  Pipe pipe(&sink, nullptr, 16);
  EXPECT_TRUE(pipe.OnEvent(Tokens({1})));
  EXPECT_TRUE(pipe.OnEvent(Tokens({2})));
  pipe.Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a second SessionConfig"));
  EXPECT_FALSE(sink.ended());
  EXPECT_TRUE(pipe.OnEvent(Tokens({3})));  // the call is ending: dropped, not refused
  EXPECT_TRUE(pipe.OnEvent(Done({1, 2, 3}, {1})));
  EXPECT_EQ(sink.AckAll(pipe), 2);
  EXPECT_EQ(FirstIds(sink.writes()), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(sink.ended());
  EXPECT_EQ(sink.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(sink.status().error_message(), "a second SessionConfig");
  EXPECT_EQ(sink.violations(), 0);
}

// With nothing queued (e.g. a refused token before any session), Fail ends the call at once.
TEST(PipeTest, FailWithNothingQueuedEndsAtOnce) {
  FakeSink sink;
  Pipe pipe(&sink, nullptr, 16);
  pipe.Fail(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token"));
  EXPECT_TRUE(sink.ended());
  EXPECT_EQ(sink.write_count(), 0u);
  EXPECT_EQ(sink.status().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(sink.status().error_message(), "no token");
}

// The call's end is decided once: a second Fail, or a Fail after the SessionDone was queued,
// does not replace it (the client already has, or will get, a complete session).
TEST(PipeTest, TheFirstEndWins) {
  {
    FakeSink sink;
    Pipe pipe(&sink, nullptr, 16);
    EXPECT_TRUE(pipe.OnEvent(Tokens({1})));
    pipe.Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first"));
    pipe.Fail(grpc::Status(grpc::StatusCode::INTERNAL, "second"));
    sink.AckAll(pipe);
    EXPECT_EQ(sink.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(sink.status().error_message(), "first");
    EXPECT_EQ(sink.ends(), 1);
  }
  {
    FakeSink sink;
    Pipe pipe(&sink, nullptr, 16);
    EXPECT_TRUE(pipe.OnEvent(Done({1}, {1})));
    pipe.Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "late"));
    sink.AckAll(pipe);
    ASSERT_EQ(sink.write_count(), 1u);
    EXPECT_TRUE(sink.writes()[0].has_done());
    EXPECT_TRUE(sink.status().ok());
    EXPECT_EQ(sink.ends(), 1);
    EXPECT_EQ(sink.violations(), 0);
  }
}

// An error event writes nothing itself and ends the call, after what is queued, with the same
// code and message as the engine's status, for every code.
TEST(PipeTest, ErrorEventsEndWithTheirStatus) {
  for (int code = 1; code <= 16; ++code) {
    SCOPED_TRACE(code);
    FakeSink sink;
    Pipe pipe(&sink, nullptr, 16);
    EXPECT_TRUE(pipe.OnEvent(Tokens({7})));
    const std::string message = "engine said " + std::to_string(code);
    EXPECT_TRUE(pipe.OnEvent(Error(absl::Status(static_cast<absl::StatusCode>(code), message))));
    EXPECT_FALSE(sink.ended());  // the delta is still in flight
    EXPECT_EQ(sink.AckAll(pipe), 1);
    EXPECT_TRUE(sink.ended());
    EXPECT_EQ(static_cast<int>(sink.status().error_code()), code);
    EXPECT_EQ(sink.status().error_message(), message);
    EXPECT_EQ(sink.violations(), 0);
  }
}

// A write that fails (the client is gone) drops what is queued and ends the call CANCELLED.
TEST(PipeTest, AFailedWriteDropsTheQueueAndCancels) {
  FakeSink sink;
  Pipe pipe(&sink, nullptr, 16);
  EXPECT_TRUE(pipe.OnEvent(Tokens({1})));
  EXPECT_TRUE(pipe.OnEvent(Tokens({2})));
  EXPECT_TRUE(pipe.OnEvent(Tokens({3})));
  ASSERT_TRUE(sink.Ack(pipe, /*ok=*/false));
  EXPECT_TRUE(pipe.OnEvent(Tokens({4})));  // the engine's next event: nowhere to go
  EXPECT_EQ(sink.write_count(), 1u);
  EXPECT_TRUE(sink.ended());
  EXPECT_EQ(sink.status().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(sink.status().error_message(), "the client went away");
  EXPECT_EQ(sink.violations(), 0);
}

// Backpressure: the write in flight counts as queued; with `max_queued` responses unwritten
// the next token event is refused (OnEvent returns false, so the engine cancels the session)
// and is not written later; once a write completes there is room for one more. The
// SessionDone (or error) that follows a refusal is always taken, so the call can end.
TEST(PipeTest, AClientTooFarBehindIsRefused) {
  for (size_t max_queued : {1, 2, 5}) {
    SCOPED_TRACE(max_queued);
    FakeSink sink;
    Pipe pipe(&sink, nullptr, max_queued);
    int32_t id = 0;
    std::vector<int32_t> accepted;
    for (size_t i = 0; i < max_queued; ++i) {
      ASSERT_TRUE(pipe.OnEvent(Tokens({id}))) << i;
      accepted.push_back(id++);
    }
    EXPECT_FALSE(pipe.OnEvent(Tokens({id++})));
    EXPECT_FALSE(pipe.OnEvent(Tokens({id++})));
    ASSERT_TRUE(sink.Ack(pipe));
    ASSERT_TRUE(pipe.OnEvent(Tokens({id})));
    accepted.push_back(id++);
    EXPECT_FALSE(pipe.OnEvent(Tokens({id++})));
    EXPECT_TRUE(pipe.OnEvent(Done({0}, {1})));
    sink.AckAll(pipe);
    std::vector<v1::StreamResponse> w = sink.writes();
    ASSERT_EQ(w.size(), accepted.size() + 1);
    EXPECT_TRUE(w.back().has_done());
    w.pop_back();
    EXPECT_EQ(FirstIds(w), accepted);
    EXPECT_TRUE(sink.status().ok());
    EXPECT_EQ(sink.violations(), 0);
  }
}

// After Detach (the reactor's OnDone; the reactor is deleted next) no call reaches the sink,
// whether a write was in flight or nothing was pending.
TEST(PipeTest, NothingTouchesTheSinkAfterDetach) {
  {
    FakeSink sink;
    Pipe pipe(&sink, nullptr, 16);
    EXPECT_TRUE(pipe.OnEvent(Tokens({1})));
    EXPECT_TRUE(pipe.OnEvent(Tokens({2})));
    pipe.Detach();
    sink.Poison();
    pipe.OnEvent(Tokens({3}));
    pipe.OnWriteDone(true);
    pipe.OnWriteDone(false);
    pipe.OnEvent(Done({1}, {1}));
    pipe.Fail(grpc::Status(grpc::StatusCode::INTERNAL, "late"));
    EXPECT_EQ(sink.write_count(), 1u);
    EXPECT_FALSE(sink.ended());
    EXPECT_EQ(sink.violations(), 0);
  }
  {
    FakeSink sink;
    Pipe pipe(&sink, nullptr, 16);
    pipe.Detach();
    sink.Poison();
    pipe.SourceArrived(2);
    pipe.OnEvent(Tokens({1}));
    pipe.OnEvent(Error(absl::InternalError("late")));
    pipe.Fail(grpc::Status(grpc::StatusCode::INTERNAL, "late"));
    EXPECT_EQ(sink.write_count(), 0u);
    EXPECT_FALSE(sink.ended());
    EXPECT_EQ(sink.violations(), 0);
  }
}

// Thread-safety: the engine's thread delivers events (retrying the ones refused for
// backpressure, which must leave no trace) while another thread completes writes, as gRPC's
// threads do; writes start on either thread. The order holds, one write is in flight at a
// time, and the call ends once with OK after the SessionDone.
TEST(PipeTest, EventsFromAnotherThreadKeepOrder) {
  for (size_t max_queued : {2, 1000}) {
    SCOPED_TRACE(max_queued);
    FakeSink sink;
    Pipe pipe(&sink, nullptr, max_queued);
    const int n = 2000;
    std::thread engine([&] {
      for (int i = 0; i < n; ++i) {
        while (!pipe.OnEvent(Tokens({i}))) std::this_thread::yield();
      }
      pipe.OnEvent(Done({}, {}));
    });
    int acked = 0;
    while (sink.WaitForWrite()) {
      ASSERT_TRUE(sink.Ack(pipe));
      ++acked;
    }
    engine.join();
    ASSERT_TRUE(sink.ended()) << "timed out after " << acked << " writes";
    const std::vector<v1::StreamResponse> w = sink.writes();
    ASSERT_EQ(w.size(), static_cast<size_t>(n) + 1);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(w[i].has_delta());
      ASSERT_EQ(Ids(w[i]), std::vector<int32_t>{i});
    }
    EXPECT_TRUE(w.back().has_done());
    EXPECT_TRUE(sink.status().ok());
    EXPECT_EQ(sink.ends(), 1);
    EXPECT_EQ(sink.violations(), 0);
  }
}

// The value of one series in Prometheus text (e.g. `name{model="m"}`); -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// With metrics, each session is observed once: one time to first token, one inter-token
// latency per token after the first (tokens of one event count as arriving together), one
// word lag per completed word, one session latency and queue time, and its finish reason
// (errors as "error"). Counts only: no time is asserted.
TEST(PipeTest, ObservesEachSessionInTheMetrics) {
  Metrics metrics("m", {"de"});
  {
    FakeSink sink;
    Pipe pipe(&sink, &metrics, 16);
    pipe.SetAdapter("de");
    pipe.SourceArrived(3);
    EXPECT_TRUE(pipe.OnEvent(Tokens({1, 2}, "ab", /*word_complete=*/true, 2)));
    EXPECT_TRUE(pipe.OnEvent(Tokens({}, "", false, 2)));  // text only: no tokens observed
    EXPECT_TRUE(pipe.OnEvent(Tokens({3, 4, 5}, " cd", /*word_complete=*/true, 3)));
    SessionEvent done = Done({1, 2, 3, 4, 5}, {2, 3});
    done.reason = engine::FinishReason::kMaxNewTokens;
    EXPECT_TRUE(pipe.OnEvent(done));
    sink.AckAll(pipe);
    ASSERT_TRUE(sink.ended());
  }
  {
    FakeSink sink;
    Pipe pipe(&sink, &metrics, 16);
    EXPECT_TRUE(pipe.OnEvent(Error(absl::InternalError("boom"))));
    ASSERT_TRUE(sink.ended());
  }
  const std::string text = metrics.Render();
  const std::string m = "{adapter=\"de\",model=\"m\"}";
  EXPECT_EQ(Sample(text, "gpeserve:time_to_first_token_seconds_count" + m), 1) << text;
  EXPECT_EQ(Sample(text, "gpeserve:inter_token_latency_seconds_count" + m), 4) << text;
  EXPECT_EQ(Sample(text, "gpeserve:word_lag_words_count" + m), 2) << text;
  EXPECT_EQ(Sample(text, "gpeserve:word_lag_seconds_count" + m), 2) << text;
  EXPECT_EQ(Sample(text, "gpeserve:e2e_session_latency_seconds_count" + m), 1) << text;
  EXPECT_EQ(Sample(text, "gpeserve:queue_time_seconds_count" + m), 1) << text;
  EXPECT_EQ(
      Sample(text, "gpeserve:e2e_session_latency_seconds_count{adapter=\"base\",model=\"m\"}"), 0)
      << text;
  auto finished = [&](const std::string& adapter, const std::string& reason) {
    return Sample(text, "gpeserve:session_finished_total{adapter=\"" + adapter +
                            "\",model=\"m\",reason=\"" + reason + "\"}");
  };
  EXPECT_EQ(finished("de", "max_new_tokens"), 1) << text;
  EXPECT_EQ(finished("de", "error"), 0) << text;
  EXPECT_EQ(finished("base", "error"), 1) << text;  // the second pipe named no adapter
  EXPECT_EQ(finished("de", "end_of_sequence"), 0) << text;
}

// A session's end counts in the metrics even when its call ended first: refused (Fail, then
// the engine's cancelled end), a client gone mid-write, or the reactor already detached.
TEST(PipeTest, EndsCountWhateverTheCallsState) {
  Metrics metrics("m");
  auto cancelled = [] {
    SessionEvent done = Done({}, {});
    done.reason = engine::FinishReason::kCancelled;
    return done;
  };
  {
    FakeSink sink;
    Pipe pipe(&sink, &metrics, 16);
    pipe.Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "refused"));
    EXPECT_TRUE(pipe.OnEvent(cancelled()));
    EXPECT_EQ(sink.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    FakeSink sink;
    Pipe pipe(&sink, &metrics, 16);
    EXPECT_TRUE(pipe.OnEvent(Tokens({1})));
    pipe.OnWriteDone(false);  // the client is gone
    EXPECT_TRUE(pipe.OnEvent(cancelled()));
  }
  {
    FakeSink sink;
    Pipe pipe(&sink, &metrics, 16);
    pipe.Detach();
    sink.Poison();
    EXPECT_TRUE(pipe.OnEvent(Error(absl::InternalError("late"))));
    EXPECT_EQ(sink.violations(), 0);
  }
  const std::string text = metrics.Render();
  const std::string base = "{adapter=\"base\",model=\"m\"";
  EXPECT_EQ(Sample(text, "gpeserve:session_finished_total" + base + ",reason=\"cancelled\"}"), 2)
      << text;
  EXPECT_EQ(Sample(text, "gpeserve:session_finished_total" + base + ",reason=\"error\"}"), 1)
      << text;
  EXPECT_EQ(Sample(text, "gpeserve:e2e_session_latency_seconds_count" + base + "}"), 2) << text;
}

}  // namespace
}  // namespace gpeserve::server
