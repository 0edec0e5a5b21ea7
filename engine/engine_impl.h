// The engine's insides, shared by engine.cc (the thread-safe API and the loop's bookkeeping:
// commands, finishing sessions, the statistics' snapshot; plain C++, so that clang's
// thread-safety analysis checks every use of the engine's mutex) and engine_loop.cc (the step:
// plan, forward pass, sampling; libtorch). Internal to the engine library.
//
// Thread-safety: members under `mu` as annotated; the rest belongs to the loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/engine.h"
#include "engine/kv/block_allocator.h"
#include "engine/scheduler/long_read_pacer.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/util/mutex.h"

namespace gpeserve::kv {
class KvPool;
}

namespace gpeserve::engine {

// A session as the loop thread sees it.
struct Live {
  int64_t id = 0;
  std::unique_ptr<session::SegmentedSession> session;
  std::unique_ptr<sampler::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  EventCallback callback;
  bool admitted = false;
  std::chrono::steady_clock::time_point opened = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first_run;
  int64_t order = 0;            // arrival order; admission order once admitted
  int64_t last_served = -1;     // step
  std::vector<double> lags_ms;  // per target word of the running segment
  // The last command from the client (open, words, boundary, end): the idle limit's clock.
  std::chrono::steady_clock::time_point last_command = std::chrono::steady_clock::now();
  bool report_waiting = false;    // SessionConfig::report_waiting
  bool waiting_reported = false;  // a kWaiting went out since the last source command
};

// The pieces of one forward step and the sessions they belong to, in the same order. A
// session's pieces after its first (fused, EngineConfig::fuse_reads) follow the plan's pieces.
struct Batch {
  std::vector<session::Work> works;
  std::vector<Live*> lives;
  std::vector<int64_t> ids;  // lives' ids (a delivery may end a session and free its Live)
  // Per piece: completed when it was prepared, before the forward pass (a piece of the same
  // session follows it in this step).
  std::vector<bool> completed;
  int64_t sessions = 0;  // distinct sessions
};

// The event that ends session `id` with an error.
SessionEvent ErrorEvent(int64_t id, absl::Status status);

FinishReason FinishReasonOf(policy::DoneReason reason);

enum class Engine::CommandKind { kOpen, kPush, kBoundary, kEnd, kCancel, kAbort };

// Microseconds of the steady clock: the stamps of source words (SegmentedSession).
int64_t NowStamp();

struct Engine::Impl {
  struct Command {
    int64_t id = 0;
    CommandKind kind = CommandKind::kPush;
    std::vector<std::string> words;
    std::unique_ptr<Live> live;  // kOpen
    absl::Status status;         // kAbort
    int64_t stamp = 0;           // NowStamp() when the handle posted it
  };

  ~Impl();  // engine_loop.cc (the pool's tensors)

  EngineConfig config;
  // What Open needs of the model (so that the API side needs no libtorch).
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::vector<int64_t> eos_ids;
  int64_t max_positions = 0;
  std::map<std::string, const model::Adapter*> adapters;  // by name
  std::unique_ptr<kv::BlockAllocator> allocator;
  std::unique_ptr<kv::KvPool> pool;
  std::thread thread;

  // The loop waits on `mu` for commands (Mutex::Await: no condition variable to notify).
  mutable Mutex mu;
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

  // ---- engine_loop.cc: the step ----
  // One step after another until Shutdown: Drain, FinishEnded, Candidates, the scheduler's
  // plan, Evict, Prepare, Run; then EndAll.
  void Loop(const model::Model& model);
  // The sessions with work, and the admitted ones (possible preemption victims).
  std::vector<scheduler::Candidate> Candidates() const;
  // Ends the plan's sessions that can never fit; preempts its victims.
  void Evict(const scheduler::Plan& plan);
  // The plan's pieces as work (a piece whose blocks ran short after all waits a step), then
  // the pieces fused after them (Fuse).
  Batch Prepare(const scheduler::Plan& plan);
  // EngineConfig::fuse_reads: each piece that may complete before the forward pass is
  // completed now, and its session's next piece joins the batch when it fits whole in what the
  // step's token budget leaves (and is no long read); a write ends the chain.
  void Fuse(Batch& batch);
  // The forward step, sampling and token events; false when the forward failed (its sessions
  // then end with its error).
  // `step_start`: when the step was planned (StepReport::start).
  bool Run(const model::Model& model, Batch& batch,
           std::chrono::steady_clock::time_point step_start);

  // ---- engine.cc: commands, finishing sessions, the statistics' snapshot ----
  // Waits while every session waits for source; applies queued commands; false when the
  // engine stops.
  bool Drain();
  bool HasCommandsOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stop || !inbox.empty();
  }
  void Apply(Command& command);
  // kWaiting events for the sessions that asked for them and wait for source since their last
  // source command.
  void ReportWaiting();
  // Ends the sessions that waited for source longer than session_idle_seconds; returns the
  // seconds until the next one would (nullopt: none waits, or no limit).
  std::optional<double> ExpireIdle();
  // Delivers the long-form segments finished since the last step; ends the sessions that are
  // done (end of sequence, limits; long-form: the end of the stream).
  void FinishEnded();
  // Shutting down: every open session and every queued Open gets an UNAVAILABLE event.
  void EndAll();
  // Delivers an event; a consumer that cannot take it gets the session cancelled (false).
  bool Deliver(Live& live, const SessionEvent& event);
  // Ends a session with its final event and frees its blocks.
  void Finish(int64_t id, SessionEvent event);
  SessionEvent DoneEvent(const Live& live, FinishReason reason) const;
  void Publish();
};

}  // namespace gpeserve::engine
