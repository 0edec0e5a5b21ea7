#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/engine_impl.h"

namespace gpeserve::engine {

SessionEvent ErrorEvent(int64_t id, absl::Status status) {
  SessionEvent event;
  event.kind = SessionEvent::Kind::kError;
  event.session_id = id;
  event.status = std::move(status);
  return event;
}

int64_t NowStamp() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

// `status` with how much of the session's source was received and never read (and, long-form,
// how many segments were finished) after its message.
absl::Status WithUnreadUnits(const absl::Status& status, const session::SegmentedSession& s) {
  return absl::Status(
      status.code(),
      absl::StrCat(
          status.message(), " (",
          s.long_form() ? absl::StrCat(s.segments_finished(), " segments were finished; ") : "",
          s.source_units() - s.source_units_read(), " of ", s.source_units(),
          " source units received were not read)"));
}

}  // namespace

FinishReason FinishReasonOf(policy::DoneReason reason) {
  switch (reason) {
    case policy::DoneReason::kMaxNewTokens:
      return FinishReason::kMaxNewTokens;
    case policy::DoneReason::kMaxLag:
      return FinishReason::kMaxLag;
    default:
      return FinishReason::kEndOfSequence;
  }
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfSequence:
      return policy::DoneReasonName(policy::DoneReason::kEndOfSequence);
    case FinishReason::kMaxNewTokens:
      return policy::DoneReasonName(policy::DoneReason::kMaxNewTokens);
    case FinishReason::kMaxLag:
      return policy::DoneReasonName(policy::DoneReason::kMaxLag);
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kEndOfSource:
      return "end_of_source";
  }
  return "cancelled";
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stop = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t Engine::total_blocks() const { return impl_->allocator->total_blocks(); }

EngineStats Engine::stats() const {
  MutexLock lock(&impl_->mu);
  return impl_->stats;
}

absl::StatusOr<std::shared_ptr<SessionHandle>> Engine::Open(const SessionConfig& config,
                                                            EventCallback on_event) {
  if (absl::Status s = sampler::Validate(config.sampling); !s.ok()) return s;
  session::SessionOptions options = config.options;
  options.max_positions = impl_->max_positions;
  options.adapter = nullptr;
  if (!config.adapter.empty()) {
    const auto it = impl_->adapters.find(config.adapter);
    if (it == impl_->adapters.end()) {
      std::vector<std::string> names;
      for (const auto& [name, adapter] : impl_->adapters) names.push_back(name);
      return absl::NotFoundError(
          absl::StrCat("unknown adapter '", config.adapter, "': ",
                       names.empty() ? "this server serves the base model only"
                                     : absl::StrCat("this server has ", absl::StrJoin(names, ", ")),
                       " (an empty adapter is the base model)"));
    }
    options.adapter = it->second;
  }
  auto session = session::SegmentedSession::Create(impl_->tokenizer, impl_->eos_ids, options,
                                                   config.long_form);
  if (!session.ok()) return session.status();
  auto live = std::make_unique<Live>();
  live->session = *std::move(session);
  live->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(
      *impl_->tokenizer, tokenizer::DecodeOptions{.skip_special_tokens = true});
  live->callback = std::move(on_event);
  live->report_waiting = config.report_waiting;
  int64_t id;
  {
    MutexLock lock(&impl_->mu);
    if (impl_->stop) return absl::UnavailableError("the engine is shutting down");
    if (impl_->open >= impl_->config.max_sessions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the engine has ", impl_->open, " open sessions, its limit (max_sessions); retry later"));
    }
    ++impl_->open;
    id = impl_->next_id++;
    live->id = id;
    // Seeds differ per session unless the client fixes one.
    live->sampler = std::make_unique<sampler::Sampler>(
        config.sampling, 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(id));
    Impl::Command command;
    command.id = id;
    command.kind = CommandKind::kOpen;
    command.live = std::move(live);
    impl_->inbox.push_back(std::move(command));
  }
  return std::shared_ptr<SessionHandle>(new SessionHandle(weak_from_this(), id));
}

void Engine::Post(int64_t id, CommandKind kind, std::vector<std::string> words,
                  absl::Status status) {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->stop) return;
    Impl::Command command;
    command.id = id;
    command.kind = kind;
    command.words = std::move(words);
    command.status = std::move(status);
    command.stamp = NowStamp();
    impl_->inbox.push_back(std::move(command));
  }
}

void SessionHandle::Push(std::vector<std::string> words) {
  if (auto engine = engine_.lock()) engine->Post(id_, Engine::CommandKind::kPush, std::move(words));
}
void SessionHandle::Boundary() {
  if (auto engine = engine_.lock()) engine->Post(id_, Engine::CommandKind::kBoundary);
}
void SessionHandle::EndSource() {
  if (auto engine = engine_.lock()) engine->Post(id_, Engine::CommandKind::kEnd);
}
void SessionHandle::Cancel() {
  if (auto engine = engine_.lock()) engine->Post(id_, Engine::CommandKind::kCancel);
}
void SessionHandle::Abort(absl::Status status) {
  if (auto engine = engine_.lock()) {
    engine->Post(id_, Engine::CommandKind::kAbort, {}, std::move(status));
  }
}

// ---- The loop's bookkeeping ---------------------------------------------------------------------

SessionEvent Engine::Impl::DoneEvent(const Live& live, FinishReason reason) const {
  const session::SegmentedSession& s = *live.session;
  SessionEvent event;
  event.kind = SessionEvent::Kind::kDone;
  event.session_id = live.id;
  event.reason = reason;
  event.output = s.output();
  event.full_text = s.FinalText();
  event.delays = s.FinalDelays();
  if (!s.long_form()) {
    event.lags_ms = live.lags_ms;
    event.lags_ms.resize(std::min(event.lags_ms.size(), event.delays.size()));
  }
  event.source_units = s.source_units();
  event.units_read = s.units_read();
  event.source_units_unread = s.source_units() - s.source_units_read();
  event.segments = s.segments_finished();
  event.counters = s.counters();
  event.queue_seconds = std::chrono::duration<double>(
                            live.first_run.value_or(std::chrono::steady_clock::now()) - live.opened)
                            .count();
  return event;
}

bool Engine::Impl::Deliver(Live& live, const SessionEvent& event) {
  if (live.callback && !live.callback(event) &&
      (event.kind == SessionEvent::Kind::kTokens || event.kind == SessionEvent::Kind::kSegment ||
       event.kind == SessionEvent::Kind::kWaiting)) {
    Finish(live.id, ErrorEvent(live.id, absl::ResourceExhaustedError(
                                            "the client did not read its events fast enough; "
                                            "the session was cancelled")));
    return false;
  }
  return true;
}

void Engine::Impl::Finish(int64_t id, SessionEvent event) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  std::unique_ptr<Live> live = std::move(it->second);
  sessions.erase(it);
  live->session->Release(*allocator);
  counters.source_tokens += live->session->counters().source_tokens;
  {
    MutexLock lock(&mu);
    --open;
  }
  Publish();  // the final event's reader sees the blocks freed
  if (live->callback) live->callback(event);
}

std::optional<double> Engine::Impl::ExpireIdle() {
  if (config.session_idle_seconds <= 0) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  std::optional<double> next;
  std::vector<int64_t> expired;
  for (const auto& [id, live] : sessions) {
    if (live->session->state() != session::SegmentedSession::State::kWaiting) continue;
    const double left = config.session_idle_seconds -
                        std::chrono::duration<double>(now - live->last_command).count();
    if (left <= 0) {
      expired.push_back(id);
    } else {
      next = std::min(next.value_or(left), left);
    }
  }
  for (int64_t id : expired) {
    ++counters.idle_timeouts;
    Finish(id,
           ErrorEvent(id, WithUnreadUnits(
                              absl::DeadlineExceededError(absl::StrCat(
                                  "the session waited for source for ", config.session_idle_seconds,
                                  " s and none came (gpeserve --session_idle_seconds); send "
                                  "the end of the source when it is complete")),
                              *sessions[id]->session)));
  }
  return next;
}

bool Engine::Impl::Drain() {
  std::deque<Command> commands;
  {
    MutexLock lock(&mu);
    if (stop) return false;
    commands.swap(inbox);
  }
  // Commands first: a word that came in during the last step keeps its session from expiring.
  for (Command& command : commands) Apply(command);
  const std::optional<double> idle_in = ExpireIdle();
  // Round the loop before any sleep: the waiting reports of the sessions just changed go out.
  if (!commands.empty()) return true;
  {
    MutexLock lock(&mu);
    const bool idle = std::none_of(sessions.begin(), sessions.end(), [](const auto& s) {
      return s.second->session->state() != session::SegmentedSession::State::kWaiting;
    });
    if (idle && idle_in) {
      mu.AwaitWithTimeout(absl::Condition(this, &Impl::HasCommandsOrStop), absl::Seconds(*idle_in));
    } else if (idle) {
      mu.Await(absl::Condition(this, &Impl::HasCommandsOrStop));
    }
    if (stop) return false;
    commands.swap(inbox);
  }
  for (Command& command : commands) Apply(command);
  return true;
}

void Engine::Impl::Apply(Command& command) {
  if (command.kind == CommandKind::kOpen) {
    command.live->order = orders++;
    sessions[command.id] = std::move(command.live);
    return;
  }
  auto it = sessions.find(command.id);
  if (it == sessions.end()) return;  // already finished
  Live& live = *it->second;
  const session::SegmentedSession& s = *live.session;
  if (command.kind == CommandKind::kPush || command.kind == CommandKind::kBoundary ||
      command.kind == CommandKind::kEnd) {
    live.waiting_reported = false;
    // When the client sent it, not when the loop got to it.
    live.last_command =
        std::chrono::steady_clock::time_point(std::chrono::microseconds(command.stamp));
  }
  switch (command.kind) {
    case CommandKind::kPush:
    case CommandKind::kBoundary:
      if (absl::Status status = command.kind == CommandKind::kPush
                                    ? live.session->AddWords(command.words, command.stamp)
                                    : live.session->Boundary(command.stamp);
          !status.ok()) {
        // A long-form session loses the segments in flight: say how much.
        if (s.long_form()) status = WithUnreadUnits(status, s);
        Finish(live.id, ErrorEvent(live.id, std::move(status)));
      } else if (const int64_t unread = s.source_units() - s.source_units_read();
                 config.max_unread_source_units > 0 && unread > config.max_unread_source_units) {
        ++counters.unread_limit_hits;
        Finish(live.id,
               ErrorEvent(live.id, absl::ResourceExhaustedError(absl::StrCat(
                                       "the session holds ", unread,
                                       " source units received and not yet read, over this "
                                       "server's limit of ",
                                       config.max_unread_source_units,
                                       " (gpeserve --max_unread_source_units); send the source "
                                       "no faster than it is translated"))));
      }
      break;
    case CommandKind::kEnd:
      live.session->EndSource(command.stamp);
      break;
    case CommandKind::kAbort:
      Finish(live.id, ErrorEvent(live.id, WithUnreadUnits(command.status, s)));
      break;
    case CommandKind::kCancel:
      Finish(live.id, DoneEvent(live, FinishReason::kCancelled));
      break;
    case CommandKind::kOpen:  // handled above
      break;
  }
}

void Engine::Impl::ReportWaiting() {
  std::vector<int64_t> ids;
  for (const auto& [id, live] : sessions) {
    if (live->report_waiting && !live->waiting_reported &&
        live->session->state() == session::SegmentedSession::State::kWaiting) {
      ids.push_back(id);
    }
  }
  for (int64_t id : ids) {
    Live& live = *sessions[id];
    live.waiting_reported = true;
    SessionEvent event;
    event.kind = SessionEvent::Kind::kWaiting;
    event.session_id = id;
    event.units_read = live.session->units_read();
    event.segment = live.session->segment();
    Deliver(live, event);  // a consumer that cannot take it gets the session cancelled
  }
}

void Engine::Impl::Publish() {
  MutexLock lock(&mu);
  stats = counters;
  stats.sessions_running = stats.sessions_waiting = 0;
  for (const auto& [id, live] : sessions) {
    ++(live->admitted ? stats.sessions_running : stats.sessions_waiting);
  }
  stats.kv = allocator->stats();
}

void Engine::Impl::FinishEnded() {
  std::vector<int64_t> ids;
  for (const auto& [id, live] : sessions) ids.push_back(id);
  for (int64_t id : ids) {
    Live& live = *sessions[id];
    bool delivered = true;
    for (session::SegmentRecord& record : live.session->Advance(*allocator)) {
      SessionEvent event;
      event.kind = SessionEvent::Kind::kSegment;
      event.session_id = id;
      event.segment = record.index;
      event.lags_ms = std::move(live.lags_ms);
      event.lags_ms.resize(std::min(event.lags_ms.size(), record.delays.size()));
      live.lags_ms.clear();
      event.segment_record = std::move(record);
      event.counters = live.session->counters();
      // The next segment's text starts afresh.
      live.detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(
          *tokenizer, tokenizer::DecodeOptions{.skip_special_tokens = true});
      if (!(delivered = Deliver(live, event))) break;  // cancelled: the Live is gone
    }
    if (!delivered) continue;
    if (live.session->state() == session::SegmentedSession::State::kDone) {
      Finish(id, DoneEvent(live, live.session->long_form()
                                     ? FinishReason::kEndOfSource
                                     : FinishReasonOf(live.session->done_reason())));
    }
  }
}

void Engine::Impl::EndAll() {
  std::vector<int64_t> open_ids;
  for (const auto& [id, live] : sessions) open_ids.push_back(id);
  for (int64_t id : open_ids) {
    Finish(id, ErrorEvent(id, absl::UnavailableError("the engine shut down")));
  }
  std::deque<Command> queued;
  {
    MutexLock lock(&mu);
    queued.swap(inbox);
  }
  // Callbacks run without the lock: a consumer may call the engine back.
  for (Command& command : queued) {
    if (command.kind == CommandKind::kOpen && command.live->callback) {
      command.live->callback(
          ErrorEvent(command.id, absl::UnavailableError("the engine shut down")));
    }
  }
}

}  // namespace gpeserve::engine
