#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/model.h"
#include "engine/scheduler/long_read_pacer.h"
#include "engine/session/runner.h"
#include "engine/tokenizer/incremental_detokenizer.h"

namespace gpeserve::engine {
namespace {

// A session as the loop thread sees it.
struct Live {
  int64_t id = 0;
  std::unique_ptr<session::StreamSession> session;
  std::unique_ptr<sampler::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  EventCallback callback;
  bool admitted = false;
  std::chrono::steady_clock::time_point opened = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first_run;
  int64_t order = 0;         // arrival order; admission order once admitted
  int64_t last_served = -1;  // step
};

// The event that ends session `id` with an error.
SessionEvent ErrorEvent(int64_t id, absl::Status status) {
  SessionEvent event;
  event.kind = SessionEvent::Kind::kError;
  event.session_id = id;
  event.status = std::move(status);
  return event;
}

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

// The pieces of one forward step and the sessions they belong to, in the same order.
struct Batch {
  std::vector<session::Work> works;
  std::vector<Live*> lives;
  std::vector<int64_t> ids;  // lives' ids (a delivery may end a session and free its Live)
};

}  // namespace

enum class Engine::CommandKind { kOpen, kPush, kEnd, kCancel, kAbort };

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfSequence:
      return "end_of_sequence";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kMaxLag:
      return "max_lag";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "end_of_sequence";
}

struct Engine::Impl {
  struct Command {
    int64_t id = 0;
    CommandKind kind = CommandKind::kPush;
    std::vector<std::string> words;
    std::unique_ptr<Live> live;  // kOpen
    absl::Status status;         // kAbort
  };

  EngineConfig config;
  std::unique_ptr<kv::BlockAllocator> allocator;
  std::unique_ptr<kv::KvPool> pool;
  std::thread thread;

  // The loop waits on `mu` for commands (Mutex::Await: no condition variable to notify).
  mutable absl::Mutex mu;
  std::deque<Command> inbox ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
  int64_t open ABSL_GUARDED_BY(mu) = 0;  // sessions opened and not yet finished
  int64_t next_id ABSL_GUARDED_BY(mu) = 1;
  EngineStats stats ABSL_GUARDED_BY(mu);  // a snapshot after each step

  // ---- Loop thread only ----
  std::unique_ptr<scheduler::LongReadPacer> pacer;
  std::map<int64_t, std::unique_ptr<Live>> sessions;
  int64_t step = 0;
  int64_t orders = 0;
  EngineStats counters;

  // One step after another until Shutdown: Drain, FinishEnded, Candidates, the scheduler's
  // plan, Evict, Prepare, Run; then EndAll.
  void Loop(const model::Model& model);
  // Waits while every session waits for source; applies queued commands; false when the
  // engine stops.
  bool Drain();
  bool HasCommandsOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stop || !inbox.empty();
  }
  void Apply(Command& command);
  // Ends the sessions whose policy is done (end of sequence, limits) since the last step.
  void FinishEnded();
  // The sessions with work, and the admitted ones (possible preemption victims).
  std::vector<scheduler::Candidate> Candidates() const;
  // Ends the plan's sessions that can never fit; preempts its victims.
  void Evict(const scheduler::Plan& plan);
  // The plan's pieces as work (a piece whose blocks ran short after all waits a step).
  Batch Prepare(const scheduler::Plan& plan);
  // The forward step, sampling and token events; false when the forward failed (its sessions
  // then end with its error).
  bool Run(const model::Model& model, Batch& batch);
  // Shutting down: every open session and every queued Open gets an UNAVAILABLE event.
  void EndAll();
  // Delivers an event; a consumer that cannot take it gets the session cancelled.
  void Deliver(Live& live, const SessionEvent& event);
  // Ends a session with its final event and frees its blocks.
  void Finish(int64_t id, SessionEvent event);
  SessionEvent DoneEvent(const Live& live, FinishReason reason) const;
  void Publish();
};

absl::StatusOr<int64_t> KvCacheBlocks(const model::Model& model, const EngineConfig& config) {
  if (config.kv_blocks > 0) return config.kv_blocks;
  const model::ModelConfig& c = model.config();
  const int64_t block_bytes = kv::KvPool::BlockBytes(
      config.block_size, {c.num_layers, c.num_kv_heads, c.head_dim}, model.dtype());
  const int64_t blocks = config.kv_cache_memory / block_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_memory of ", config.kv_cache_memory,
                                                   " bytes holds no block of ", block_bytes,
                                                   " bytes"));
  }
  return blocks;
}

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(std::shared_ptr<const model::Model> model,
                                                       const EngineConfig& config) {
  if (model == nullptr || model->tokenizer() == nullptr) {
    return absl::FailedPreconditionError("the engine needs a model folder with a tokenizer");
  }
  if (config.block_size < 1 || config.scheduler.max_batch_tokens < 1 ||
      config.scheduler.max_sessions_per_step < 1 || config.max_sessions < 1) {
    return absl::InvalidArgumentError(
        "block_size, max_batch_tokens, max_sessions_per_step and max_sessions must be positive");
  }
  if (!(config.long_read_slowdown == 0 || config.long_read_slowdown >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "long_read_slowdown must be 0 (no pacing) or at least 1, got ", config.long_read_slowdown));
  }
  const model::ModelConfig& c = model->config();
  const absl::StatusOr<int64_t> blocks = KvCacheBlocks(*model, config);
  if (!blocks.ok()) return blocks.status();
  std::shared_ptr<Engine> engine(new Engine());
  engine->model_ = std::move(model);
  engine->impl_ = std::make_unique<Impl>();
  Impl& impl = *engine->impl_;
  impl.config = config;
  impl.config.kv_blocks = *blocks;
  impl.pacer = std::make_unique<scheduler::LongReadPacer>(config.long_read_slowdown);
  const kv::KvCacheConfig kv_config{.block_size = config.block_size,
                                    .num_blocks = static_cast<int>(*blocks)};
  impl.allocator = std::make_unique<kv::BlockAllocator>(kv_config);
  auto pool = kv::KvPool::Create(kv_config, {c.num_layers, c.num_kv_heads, c.head_dim},
                                 engine->model_->dtype(), engine->model_->device());
  if (!pool.ok()) return pool.status();
  impl.pool = std::make_unique<kv::KvPool>(*std::move(pool));
  impl.stats.kv = impl.allocator->stats();
  const model::Model* m = engine->model_.get();
  impl.thread = std::thread([&impl, m] { impl.Loop(*m); });
  return engine;
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stop = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t Engine::total_blocks() const { return impl_->allocator->total_blocks(); }

EngineInfo Engine::info() const {
  const model::ModelConfig& c = model_->config();
  return {.architecture = c.architecture_name,
          .dtype = model_->weight_dtype_name(),
          .device = model_->device().is_cuda() ? "cuda" : "cpu",
          .vocab_size = c.vocab_size,
          .kv_blocks = impl_->allocator->total_blocks(),
          .block_size = impl_->config.block_size,
          .max_sessions = impl_->config.max_sessions};
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

absl::StatusOr<std::shared_ptr<SessionHandle>> Engine::Open(const SessionConfig& config,
                                                            EventCallback on_event) {
  if (absl::Status s = sampler::Validate(config.sampling); !s.ok()) return s;
  session::SessionOptions options = config.options;
  options.max_positions = model_->config().max_position_embeddings;
  auto session =
      session::StreamSession::Create(model_->tokenizer(), model_->config().eos_token_ids, options);
  if (!session.ok()) return session.status();
  auto live = std::make_unique<Live>();
  live->session = *std::move(session);
  live->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(
      *model_->tokenizer(), tokenizer::DecodeOptions{.skip_special_tokens = true});
  live->callback = std::move(on_event);
  int64_t id;
  {
    absl::MutexLock lock(&impl_->mu);
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
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stop) return;
    Impl::Command command;
    command.id = id;
    command.kind = kind;
    command.words = std::move(words);
    command.status = std::move(status);
    impl_->inbox.push_back(std::move(command));
  }
}

void SessionHandle::Push(std::vector<std::string> words) {
  if (auto engine = engine_.lock()) engine->Post(id_, Engine::CommandKind::kPush, std::move(words));
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

// ---- The loop ---------------------------------------------------------------------------------

SessionEvent Engine::Impl::DoneEvent(const Live& live, FinishReason reason) const {
  const session::StreamSession& s = *live.session;
  SessionEvent event;
  event.kind = SessionEvent::Kind::kDone;
  event.session_id = live.id;
  event.reason = reason;
  event.output = s.output();
  event.full_text = s.FinalText();
  event.delays = s.FinalDelays();
  event.source_units = s.source_units();
  event.units_read = s.units_read();
  event.source_units_unread = s.source_units() - s.units_read();
  event.counters = s.counters();
  event.queue_seconds = std::chrono::duration<double>(
                            live.first_run.value_or(std::chrono::steady_clock::now()) - live.opened)
                            .count();
  return event;
}

void Engine::Impl::Deliver(Live& live, const SessionEvent& event) {
  if (live.callback && !live.callback(event) && event.kind == SessionEvent::Kind::kTokens) {
    Finish(live.id, ErrorEvent(live.id, absl::ResourceExhaustedError(
                                            "the client did not read its events fast enough; "
                                            "the session was cancelled")));
  }
}

void Engine::Impl::Finish(int64_t id, SessionEvent event) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  std::unique_ptr<Live> live = std::move(it->second);
  sessions.erase(it);
  live->session->Release(*allocator);
  counters.source_tokens += live->session->counters().source_tokens;
  {
    absl::MutexLock lock(&mu);
    --open;
  }
  Publish();  // the final event's reader sees the blocks freed
  if (live->callback) live->callback(event);
}

bool Engine::Impl::Drain() {
  std::deque<Command> commands;
  {
    absl::MutexLock lock(&mu);
    const bool idle = std::none_of(sessions.begin(), sessions.end(), [](const auto& s) {
      return s.second->session->state() != session::StreamSession::State::kWaiting;
    });
    if (idle) {
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
  const session::StreamSession& s = *live.session;
  switch (command.kind) {
    case CommandKind::kPush:
      if (absl::Status status = live.session->AddWords(command.words); !status.ok()) {
        Finish(live.id, ErrorEvent(live.id, std::move(status)));
      }
      break;
    case CommandKind::kEnd:
      live.session->EndSource();
      break;
    case CommandKind::kAbort:
      Finish(live.id,
             ErrorEvent(live.id, absl::Status(command.status.code(),
                                              absl::StrCat(command.status.message(), " (",
                                                           s.source_units() - s.units_read(),
                                                           " of ", s.source_units(),
                                                           " source units received were not "
                                                           "read)"))));
      break;
    case CommandKind::kCancel:
    case CommandKind::kOpen:
      Finish(live.id, DoneEvent(live, FinishReason::kCancelled));
      break;
  }
}

void Engine::Impl::Publish() {
  absl::MutexLock lock(&mu);
  stats = counters;
  stats.sessions_running = stats.sessions_waiting = 0;
  for (const auto& [id, live] : sessions) {
    ++(live->admitted ? stats.sessions_running : stats.sessions_waiting);
  }
  stats.kv = allocator->stats();
}

void Engine::Impl::FinishEnded() {
  std::vector<int64_t> done;
  for (const auto& [id, live] : sessions) {
    if (live->session->state() == session::StreamSession::State::kDone) done.push_back(id);
  }
  for (int64_t id : done) {
    Live& live = *sessions[id];
    Finish(id, DoneEvent(live, FinishReasonOf(live.session->done_reason())));
  }
}

std::vector<scheduler::Candidate> Engine::Impl::Candidates() const {
  const int bs = allocator->block_size();
  std::vector<scheduler::Candidate> candidates;
  for (const auto& [id, live] : sessions) {
    const session::StreamSession& s = *live->session;
    scheduler::Candidate c;
    c.id = id;
    c.runnable = s.state() == session::StreamSession::State::kRunnable;
    if (!c.runnable && !live->admitted) continue;
    c.admitted = live->admitted;
    if (c.runnable) {
      const session::StreamSession::PieceNeeds needs = s.NextPieceNeeds(bs);
      c.write = needs.samples;
      c.remaining = needs.remaining;
      c.min_tokens = needs.min_tokens;
      c.free_slots = needs.free_slots;
    }
    c.admit_order = live->order;
    c.last_served = live->last_served;
    c.blocks_held = s.blocks_held();
    candidates.push_back(c);
  }
  return candidates;
}

void Engine::Impl::Evict(const scheduler::Plan& plan) {
  for (int64_t id : plan.never_fit) {
    Finish(id, ErrorEvent(id, absl::ResourceExhaustedError(absl::StrCat(
                                  "the session needs more than the whole KV cache (",
                                  allocator->total_blocks(), " blocks of ", allocator->block_size(),
                                  " tokens); shorten the source or max_new_tokens, or give the "
                                  "server more KV cache"))));
  }
  for (int64_t id : plan.preempted) {
    Live& live = *sessions[id];
    live.session->Preempt(*allocator);
    live.admitted = false;
    ++counters.preemptions;
  }
}

Batch Engine::Impl::Prepare(const scheduler::Plan& plan) {
  Batch batch;
  for (const scheduler::Piece& piece : plan.pieces) {
    Live& live = *sessions[piece.id];
    auto work = live.session->Prepare(std::max<int64_t>(1, piece.tokens), *allocator);
    if (!work.ok()) continue;  // blocks ran short after all: it waits for the next step
    if (!live.admitted) {
      live.admitted = true;
      live.order = orders++;
    }
    if (!live.first_run) live.first_run = std::chrono::steady_clock::now();
    live.last_served = step;
    batch.works.push_back(*std::move(work));
    batch.lives.push_back(&live);
    batch.ids.push_back(live.id);
  }
  return batch;
}

bool Engine::Impl::Run(const model::Model& model, Batch& batch) {
  auto logits = session::RunWorks(model, *pool, batch.works);
  if (!logits.ok()) {
    for (int64_t id : batch.ids) Finish(id, ErrorEvent(id, logits.status()));
    return false;
  }
  int64_t step_tokens = 0;
  for (const session::Work& w : batch.works) step_tokens += static_cast<int64_t>(w.tokens.size());
  ++counters.steps;
  counters.step_tokens += step_tokens;
  counters.step_sessions += static_cast<int64_t>(batch.works.size());
  if (config.on_step) config.on_step(step_tokens);
  int64_t row = 0;
  for (size_t i = 0; i < batch.works.size(); ++i) {
    const bool sample = batch.works[i].sample;
    if (!sessions.contains(batch.ids[i])) {
      row += sample ? 1 : 0;
      continue;
    }
    Live& live = *batch.lives[i];
    std::optional<int32_t> token;
    if (sample) {
      const torch::Tensor r = (*logits)[row++].contiguous();
      token = live.sampler->Sample({r.data_ptr<float>(), static_cast<size_t>(r.numel())});
    }
    const session::StepResult result = live.session->Complete(token, *allocator);
    if (result.emitted || result.word_complete) {
      SessionEvent event;
      event.session_id = live.id;
      if (result.emitted) {
        event.ids.push_back(*result.emitted);
        event.text = live.detokenizer->Push(*result.emitted);
        ++counters.generated_tokens;
      }
      event.word_complete = result.word_complete;
      event.units_read = live.session->units_read();
      Deliver(live, event);
    }
  }
  return true;
}

void Engine::Impl::Loop(const model::Model& model) {
  while (Drain()) {
    FinishEnded();
    const std::vector<scheduler::Candidate> candidates = Candidates();
    if (candidates.empty()) {
      Publish();
      continue;
    }
    const auto step_start = std::chrono::steady_clock::now();
    const scheduler::Plan plan = scheduler::Schedule(config.scheduler, candidates,
                                                     {.free_blocks = allocator->free_blocks(),
                                                      .block_size = allocator->block_size(),
                                                      .total_blocks = allocator->total_blocks()},
                                                     pacer->Budget());
    Evict(plan);
    Batch batch = Prepare(plan);
    ++step;
    if (!batch.works.empty() && Run(model, batch)) {
      pacer->Observe(
          plan.long_read_tokens, plan.pieces.size() > static_cast<size_t>(plan.long_reads),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    }
    Publish();
  }
  EndAll();
}

void Engine::Impl::EndAll() {
  std::vector<int64_t> open_ids;
  for (const auto& [id, live] : sessions) open_ids.push_back(id);
  for (int64_t id : open_ids) {
    Finish(id, ErrorEvent(id, absl::UnavailableError("the engine shut down")));
  }
  absl::MutexLock lock(&mu);
  for (Command& command : inbox) {
    if (command.kind == CommandKind::kOpen && command.live->callback) {
      command.live->callback(
          ErrorEvent(command.id, absl::UnavailableError("the engine shut down")));
    }
  }
  inbox.clear();
}

}  // namespace gpeserve::engine
