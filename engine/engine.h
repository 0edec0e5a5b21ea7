// The engine: one loop thread that owns the model and the paged KV cache and runs the reads
// and writes of every live session in shared forward passes (continuous batching), and the
// thread-safe session API the server and the offline tools use.
//
//   auto engine = Engine::Create(model, config);
//   auto session = engine->Open(session_config, [](const SessionEvent& e) { ...; return true; });
//   session->Push({"Hello", "world"}); session->EndSource();   // from any thread
//
// Events reach the callback on the loop thread, in order, and the callback must not block: it
// returns false when its consumer cannot take more (a full queue), which cancels the session
// with RESOURCE_EXHAUSTED. Every session gets exactly one final event (done or error). Each
// step: new commands are applied, the scheduler plans the step (writes first, chunked reads,
// admission, preemption by recompute; engine/scheduler), one forward pass runs, tokens are
// sampled per session (engine/sampler) and fed back to the sessions' policies.
//
// Thread-safety: Engine and SessionHandle methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/core/ScalarType.h"
#include "engine/sampler/sampler.h"
#include "engine/scheduler/scheduler.h"
#include "engine/session/segmented_session.h"

namespace gpeserve::model {
class Model;
struct Adapter;
}  // namespace gpeserve::model

namespace gpeserve::engine {

// One forward step, as EngineConfig::on_step reports it.
struct StepReport {
  int64_t tokens = 0;    // tokens computed
  int64_t sessions = 0;  // sessions served
  // When the step was planned (it holds the words posted before; a word posted later waits for
  // the next step) and when its forward pass ended (its tokens are delivered after).
  std::chrono::steady_clock::time_point start, end;
};

// The element type of the KV cache (attention computes in the activation dtype whatever it is).
// kAuto: on the CPU the weights' 16-bit type (bf16 or fp16 models; fp32 for the others), on
// CUDA the activation dtype.
enum class KvCacheDtype { kAuto, kF32, kBF16, kF16 };

struct EngineConfig {
  int block_size = 16;  // tokens per KV block
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  int64_t kv_blocks = 0;              // blocks in the pool; 0: from kv_cache_memory
  int64_t kv_cache_memory = 1 << 30;  // bytes of K and V over all layers, when kv_blocks is 0
  // Prompt-prefix blocks stay cached after their session ends, for later sessions with the same
  // prompt (kv::BlockAllocator), until their blocks are needed; false: shared only while held.
  bool prefix_cache = true;
  scheduler::SchedulerConfig scheduler;
  // A session's read and the write it allows run in one forward step (the write's context
  // names the read's slots, written before any row attends): a word then costs one step less.
  // Within max_batch_tokens; never a long read, nor a read that fills a prompt-prefix block
  // (StreamSession::MayCompleteBeforeRun). false: one piece per session per step.
  bool fuse_reads = true;
  int max_sessions = 256;  // open sessions (running and waiting); Open fails beyond
  // Pacing of long reads (scheduler: long_read_tokens): while other sessions have work, the
  // steps that hold a piece of a long read are spaced so that the others' steps take on
  // average at most this factor longer than without it (measured step times); 0: no pacing.
  double long_read_slowdown = 1.5;
  // A session that waits for source and got no command (words, a boundary, the end) for this
  // many seconds is ended with DEADLINE_EXCEEDED (a client that went quiet holds no slot and no
  // KV forever); 0: never.
  double session_idle_seconds = 0;
  // A session holding more source units received and not yet read (a client far ahead of the
  // translation: queued work the engine has not taken up) is ended with RESOURCE_EXHAUSTED;
  // 0: no limit.
  int64_t max_unread_source_units = 0;
  // Called on the loop thread after each forward step (metrics, benchmarks); must be cheap and
  // must not call the engine.
  std::function<void(const StepReport& step)> on_step;
};

// The KV cache blocks `config` asks for on `model`: kv_blocks, or as many as kv_cache_memory
// holds (InvalidArgument when not one).
absl::StatusOr<int64_t> KvCacheBlocks(const model::Model& model, const EngineConfig& config);
// The KV cache's element type that `config` asks for on `model` (kv_cache_dtype resolved).
c10::ScalarType KvCacheScalarType(const model::Model& model, const EngineConfig& config);

// What the engine serves, for listings and logs.
struct EngineInfo {
  std::string architecture;  // e.g. Qwen2ForCausalLM
  std::string dtype;         // the weights as served: model::kServingDtypeChoices less auto
  std::string device;        // cpu, cuda
  int64_t vocab_size = 0;
  int64_t kv_blocks = 0;
  int block_size = 0;
  std::string kv_dtype;        // the KV cache's elements: fp32, bf16, fp16
  int64_t kv_block_bytes = 0;  // K and V of one block over all layers
  int max_sessions = 0;
  std::vector<std::string> adapters;  // the LoRA adapters sessions may pick, by name
};

struct SessionConfig {
  session::SessionOptions options;  // its `adapter` is set by Open from `adapter` below
  // A long-form session (docs/GPE.md 9): the source is cut into segments, each translated as
  // a one-sentence session, one after another, in one session.
  session::LongFormOptions long_form;
  sampler::SamplingParams sampling;
  std::string adapter;  // a LoRA adapter of the engine, by name; empty: the base model
  // Send a kWaiting event each time the session has done all it can with the source received
  // so far and needs more (or the end) to go on: what an agent that feeds one unit at a time
  // (SimulEval) waits for before its next read.
  bool report_waiting = false;
};

// Why a session ended without an error: the policy's stop rules (policy::DoneReason), a
// cancel, or (long-form) the end of the source with every segment finished.
enum class FinishReason { kEndOfSequence, kMaxNewTokens, kMaxLag, kCancelled, kEndOfSource };
// "end_of_sequence", "max_new_tokens", "max_lag", "cancelled", "end_of_source": the names the
// API, metrics and result files use.
const char* FinishReasonName(FinishReason reason);

struct SessionEvent {
  // kSegment: a long-form session finished a segment (before its next segment's tokens).
  // kWaiting (SessionConfig::report_waiting): the session has read (or, in a long-form segment
  // whose target ended, dropped) every source unit it received, produced every token it can
  // without more, and waits for source; `units_read` and `segment` say where it stands. Sent
  // once per wait: the next one follows a push, boundary or end.
  enum class Kind { kTokens, kSegment, kWaiting, kDone, kError };
  Kind kind = Kind::kTokens;
  int64_t session_id = 0;
  // kTokens: new output tokens and the text that became final with them (may be empty while
  // a multi-byte character or a byte-fallback run is incomplete).
  std::vector<int32_t> ids;
  std::string text;
  bool word_complete = false;  // a target word ended with this event
  int64_t units_read = 0;      // source units read so far (long-form: in the segment)
  int64_t segment = 0;         // the segment the tokens belong to (0 for a sentence session)
  // word_complete: milliseconds from the arrival of the source unit whose read completed the
  // word (the end segment: the cut) to now (computation-aware lag).
  double lag_ms = 0;
  // kSegment: the finished segment.
  session::SegmentRecord segment_record;
  // kSegment and kDone: per target word of the segment (a sentence session: of the output),
  // lag_ms as its kTokens event had it.
  std::vector<double> lags_ms;
  // kDone: the whole output and its statistics (a long-form session: no output, text or
  // delays, which its kSegment events carried; the totals over the stream).
  FinishReason reason = FinishReason::kEndOfSequence;
  std::vector<int32_t> output;
  std::string full_text;
  std::vector<int64_t> delays;
  int64_t source_units = 0;  // source units received, the end segment included once received
  // Received and never read: the session ended (end of sequence, a limit, cancelled) first.
  int64_t source_units_unread = 0;
  int64_t segments = 0;  // long-form: segments finished
  session::SessionCounters counters;
  double queue_seconds = 0;  // from Open to the first step the session ran in (or to its end)
  // kError (and kDone with reason kCancelled when cancelled by the engine).
  absl::Status status;
};

// Returns false when the consumer cannot take the event (the session is then cancelled).
using EventCallback = std::function<bool(const SessionEvent&)>;

struct EngineStats {
  int64_t sessions_running = 0;  // admitted
  int64_t sessions_waiting = 0;  // open, not admitted (new or preempted)
  int64_t steps = 0;
  int64_t step_tokens = 0;       // tokens computed over all steps
  int64_t step_sessions = 0;     // sessions served over all steps
  int64_t fused_pieces = 0;      // pieces run in the same step as their session's piece before
                                 // (EngineConfig::fuse_reads)
  int64_t source_tokens = 0;     // source tokens read by finished and running sessions
  int64_t generated_tokens = 0;  // output tokens emitted
  int64_t preemptions = 0;
  // Sessions ended by EngineConfig's limits: session_idle_seconds, max_unread_source_units.
  int64_t idle_timeouts = 0;
  int64_t unread_limit_hits = 0;
  kv::KvStats kv;
};

class Engine;

// One open session. Commands are queued for the loop thread; after the final event they are
// ignored.
class SessionHandle {
 public:
  int64_t id() const { return id_; }
  // More source words (each non-empty, no whitespace needed).
  void Push(std::vector<std::string> words);
  // A long-form session's segment boundary after the words pushed so far (nothing when a
  // sentence mark cut there already; an error event when no word came since the last boundary,
  // or for a sentence session).
  void Boundary();
  // The source is complete.
  void EndSource();
  // Ends the session: its blocks are freed at the next step and it gets a done event with
  // reason kCancelled.
  void Cancel();
  // Ends the session early with an error event carrying `status` (not OK), its message
  // followed by how many source units were received and never read, e.g. a server that drains.
  void Abort(absl::Status status);

 private:
  friend class Engine;
  SessionHandle(std::weak_ptr<Engine> engine, int64_t id) : engine_(std::move(engine)), id_(id) {}
  std::weak_ptr<Engine> engine_;
  int64_t id_;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Starts the loop thread. `adapters`: LoRA adapters loaded for `model` (model::LoadAdapter),
  // each with a distinct non-empty name, which sessions pick by name; the engine keeps them.
  // Errors: bad sizes, a model without a tokenizer, an adapter without a name or named twice,
  // no memory.
  static absl::StatusOr<std::shared_ptr<Engine>> Create(
      std::shared_ptr<const model::Model> model, const EngineConfig& config,
      std::vector<std::shared_ptr<const model::Adapter>> adapters = {});
  ~Engine();

  // Opens a session. InvalidArgument for a bad configuration (wait_k, sampling, profile
  // strings, a phi or prompt beyond the model's positions); NotFound for an adapter the engine
  // does not have; ResourceExhausted when max_sessions are open.
  absl::StatusOr<std::shared_ptr<SessionHandle>> Open(const SessionConfig& config,
                                                      EventCallback on_event);

  // Stops the loop: open sessions get an error event (UNAVAILABLE). Idempotent.
  void Shutdown();

  EngineStats stats() const;
  EngineInfo info() const;
  const model::Model& model() const { return *model_; }
  int64_t total_blocks() const;

 private:
  struct Impl;
  enum class CommandKind;  // engine.cc: what a session's handle asks of the loop
  friend class SessionHandle;
  Engine() = default;
  void Post(int64_t id, CommandKind kind, std::vector<std::string> words = {},
            absl::Status status = {});

  std::shared_ptr<const model::Model> model_;
  std::vector<std::shared_ptr<const model::Adapter>> adapters_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpeserve::engine
