// The engine's step: the plan, the forward pass, sampling (libtorch). The API and the loop's
// bookkeeping are in engine.cc.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/model.h"
#include "engine/session/runner.h"

namespace gpeserve::engine {

c10::ScalarType KvCacheScalarType(const model::Model& model, const EngineConfig& config) {
  switch (config.kv_cache_dtype) {
    case KvCacheDtype::kF32:
      return torch::kFloat32;
    case KvCacheDtype::kBF16:
      return torch::kBFloat16;
    case KvCacheDtype::kF16:
      return torch::kHalf;
    case KvCacheDtype::kAuto:
      break;
  }
  if (!model.device().is_cpu()) return model.dtype();
  // The CPU computes in fp32: a 16-bit model's keys and values keep its weights' type, which
  // holds twice the tokens in the same memory.
  const torch::ScalarType weights = model::ServingScalarType(model.weight_dtype());
  return weights == torch::kBFloat16 || weights == torch::kHalf ? weights : torch::kFloat32;
}

absl::StatusOr<int64_t> KvCacheBlocks(const model::Model& model, const EngineConfig& config) {
  if (config.kv_blocks > 0) return config.kv_blocks;
  const model::ModelConfig& c = model.config();
  const int64_t block_bytes =
      kv::KvPool::BlockBytes(config.block_size, {c.num_layers, c.num_kv_heads, c.head_dim},
                             KvCacheScalarType(model, config));
  const int64_t blocks = config.kv_cache_memory / block_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_memory of ", config.kv_cache_memory,
                                                   " bytes holds no block of ", block_bytes,
                                                   " bytes"));
  }
  return blocks;
}

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(
    std::shared_ptr<const model::Model> model, const EngineConfig& config,
    std::vector<std::shared_ptr<const model::Adapter>> adapters) {
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
  for (const auto& adapter : adapters) {
    if (adapter == nullptr || adapter->name.empty()) {
      return absl::InvalidArgumentError("every adapter needs a name");
    }
    if (adapter->layers.size() != static_cast<size_t>(c.num_layers)) {
      return absl::InvalidArgumentError(
          absl::StrCat("adapter '", adapter->name, "' was loaded for another model"));
    }
    if (!impl.adapters.emplace(adapter->name, adapter.get()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two adapters are named '", adapter->name, "'"));
    }
  }
  engine->adapters_ = std::move(adapters);
  impl.config = config;
  impl.tokenizer = engine->model_->tokenizer();
  impl.eos_ids = c.eos_token_ids;
  impl.max_positions = c.max_position_embeddings;
  impl.config.kv_blocks = *blocks;
  impl.pacer = std::make_unique<scheduler::LongReadPacer>(config.long_read_slowdown);
  const kv::KvCacheConfig kv_config{.block_size = config.block_size,
                                    .num_blocks = static_cast<int>(*blocks),
                                    .cache_freed_prefixes = config.prefix_cache};
  impl.allocator = std::make_unique<kv::BlockAllocator>(kv_config);
  auto pool =
      kv::KvPool::Create(kv_config, {c.num_layers, c.num_kv_heads, c.head_dim},
                         KvCacheScalarType(*engine->model_, config), engine->model_->device());
  if (!pool.ok()) return pool.status();
  impl.pool = std::make_unique<kv::KvPool>(*std::move(pool));
  {
    MutexLock lock(&impl.mu);
    impl.stats.kv = impl.allocator->stats();
  }
  const model::Model* m = engine->model_.get();
  impl.thread = std::thread([&impl, m] { impl.Loop(*m); });
  return engine;
}

EngineInfo Engine::info() const {
  const model::ModelConfig& c = model_->config();
  const c10::ScalarType kv = KvCacheScalarType(*model_, impl_->config);
  return {.architecture = c.architecture_name,
          .dtype = model_->weight_dtype_name(),
          .device = model_->device().is_cuda() ? "cuda" : "cpu",
          .vocab_size = c.vocab_size,
          .kv_blocks = impl_->allocator->total_blocks(),
          .block_size = impl_->config.block_size,
          .kv_dtype = kv == torch::kBFloat16 ? "bf16"
                      : kv == torch::kHalf   ? "fp16"
                                             : "fp32",
          .kv_block_bytes = kv::KvPool::BlockBytes(impl_->config.block_size,
                                                   {c.num_layers, c.num_kv_heads, c.head_dim}, kv),
          .max_sessions = impl_->config.max_sessions,
          .adapters = [this] {
            std::vector<std::string> names;
            for (const auto& [name, adapter] : impl_->adapters) names.push_back(name);
            return names;
          }()};
}

Engine::Impl::~Impl() = default;

std::vector<scheduler::Candidate> Engine::Impl::Candidates() const {
  const int bs = allocator->block_size();
  std::vector<scheduler::Candidate> candidates;
  for (const auto& [id, live] : sessions) {
    const session::SegmentedSession& s = *live->session;
    scheduler::Candidate c;
    c.id = id;
    c.runnable = s.state() == session::SegmentedSession::State::kRunnable;
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
    batch.completed.push_back(false);
  }
  batch.sessions = static_cast<int64_t>(batch.works.size());
  Fuse(batch);
  return batch;
}

void Engine::Impl::Fuse(Batch& batch) {
  if (!config.fuse_reads) return;
  int64_t budget = config.scheduler.max_batch_tokens;
  for (const session::Work& w : batch.works) budget -= static_cast<int64_t>(w.tokens.size());
  const int bs = allocator->block_size();
  // Appending keeps the pieces of a session in order: each is visited after the one before.
  for (size_t i = 0; i < batch.works.size() && budget > 0; ++i) {
    Live& live = *batch.lives[i];
    session::SegmentedSession& s = *live.session;
    if (batch.works[i].sample || !s.MayCompleteBeforeRun()) continue;
    s.Complete(std::nullopt, *allocator);  // a read: no token, no event
    batch.completed[i] = true;
    if (s.state() != session::SegmentedSession::State::kRunnable) continue;
    const session::StreamSession::PieceNeeds needs = s.NextPieceNeeds(bs);
    if (needs.remaining < 1 || needs.remaining > budget ||
        needs.remaining > config.scheduler.long_read_tokens) {
      continue;
    }
    auto work = s.Prepare(needs.remaining, *allocator);
    if (!work.ok()) continue;  // short of blocks: it runs next step
    budget -= static_cast<int64_t>(work->tokens.size());
    batch.works.push_back(*std::move(work));
    batch.lives.push_back(&live);
    batch.ids.push_back(live.id);
    batch.completed.push_back(false);
    ++counters.fused_pieces;
  }
}

bool Engine::Impl::Run(const model::Model& model, Batch& batch,
                       std::chrono::steady_clock::time_point step_start) {
  auto logits = session::RunWorks(model, *pool, batch.works);
  if (!logits.ok()) {
    for (int64_t id : batch.ids) Finish(id, ErrorEvent(id, logits.status()));
    return false;
  }
  int64_t step_tokens = 0;
  for (const session::Work& w : batch.works) step_tokens += static_cast<int64_t>(w.tokens.size());
  ++counters.steps;
  counters.step_tokens += step_tokens;
  counters.step_sessions += batch.sessions;
  if (config.on_step) {
    config.on_step({.tokens = step_tokens,
                    .sessions = batch.sessions,
                    .start = step_start,
                    .end = std::chrono::steady_clock::now()});
  }
  int64_t row = 0;
  for (size_t i = 0; i < batch.works.size(); ++i) {
    const bool sample = batch.works[i].sample;
    if (batch.completed[i]) continue;  // never a sampling piece
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
    // Computation-aware lag of each word completed now (the last one of a target may complete
    // without word_complete, when the target ends).
    double lag_ms = 0;
    if (live.session->delays_recorded() > static_cast<int64_t>(live.lags_ms.size())) {
      const std::optional<int64_t> stamp = live.session->LastDelayStamp();
      lag_ms = stamp ? static_cast<double>(NowStamp() - *stamp) / 1000.0 : 0.0;
      live.lags_ms.resize(live.session->delays_recorded(), lag_ms);
    }
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
      event.segment = live.session->segment();
      if (result.word_complete) event.lag_ms = lag_ms;
      Deliver(live, event);
    }
  }
  return true;
}

void Engine::Impl::Loop(const model::Model& model) {
  for (;;) {
    ReportWaiting();  // before Drain, which sleeps while every session waits
    if (!Drain()) break;
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
    if (!batch.works.empty() && Run(model, batch, step_start)) {
      pacer->Observe(
          plan.long_read_tokens, plan.pieces.size() > static_cast<size_t>(plan.long_reads),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    }
    Publish();
  }
  EndAll();
}

}  // namespace gpeserve::engine
