#include "server/service.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "engine/eval/words.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/mutex.h"
#include "server/convert.h"
#include "server/pipe.h"

namespace gpeserve::server {

using v1::StreamRequest;
using v1::StreamResponse;

absl::StatusOr<std::string> TakeWholeCharacters(std::string_view text, std::string* carry) {
  std::string all = std::move(*carry);
  carry->clear();
  all.append(text);
  const size_t whole = tokenizer::CompleteUtf8Prefix(all);
  const std::string_view rest = std::string_view(all).substr(whole);
  if (!rest.empty()) {
    if (rest.size() > 3 || !tokenizer::EndsWithIncompleteUtf8(rest)) {
      return absl::InvalidArgumentError("the chunk's text is not valid UTF-8");
    }
    *carry = std::string(rest);
    all.resize(whole);
  }
  return all;
}

// ---- Calls and sessions -------------------------------------------------------------------------

struct Service::CallRegistry {
  Mutex mu;
  int64_t calls ABSL_GUARDED_BY(mu) = 0;
  std::map<const void*, std::shared_ptr<engine::SessionHandle>> open ABSL_GUARDED_BY(mu);
  // Calls with a session, per client connection (gRPC's peer: address and port).
  std::map<std::string, int> per_connection ABSL_GUARDED_BY(mu);
};

namespace {

// Opens an engine session whose events go to `pipe`.
absl::StatusOr<std::shared_ptr<engine::SessionHandle>> OpenSession(
    Service& service, const engine::SessionConfig& config, std::shared_ptr<Pipe> pipe) {
  if (!service.accepting()) {
    return absl::UnavailableError("the server is shutting down; retry on another replica");
  }
  pipe->SetAdapter(config.adapter);
  return service.engine().Open(
      config, [pipe = std::move(pipe)](const engine::SessionEvent& e) { return pipe->OnEvent(e); });
}

// Checks one source word: non-empty, valid UTF-8, no whitespace, within the size limit.
absl::Status CheckWord(const std::string& word, int max_bytes) {
  if (word.empty()) return absl::InvalidArgumentError("a source word is empty");
  if (static_cast<int>(word.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a source word has ", word.size(),
                                                   " bytes; the limit is ", max_bytes,
                                                   " (max_word_bytes)"));
  }
  if (!tokenizer::ValidateUtf8(word).ok()) {
    return absl::InvalidArgumentError("a source word is not valid UTF-8");
  }
  if (!eval::IsOneWord(word)) {
    return absl::InvalidArgumentError(
        "a source word contains whitespace; send words without it, or send `text`");
  }
  return absl::OkStatus();
}

// gRPC's own transport limit is set above max_message_bytes (server/main.cc), so that a message
// over the limit gets this answer, which names the flag, rather than gRPC's "Received message
// larger than max".
grpc::Status CheckMessageSize(size_t bytes, const ServiceConfig& config) {
  if (static_cast<int64_t>(bytes) <= config.max_message_bytes) return grpc::Status::OK;
  return {grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("a request message of ", bytes, " bytes is over this server's limit of ",
                       config.max_message_bytes,
                       " bytes (gpeserve --max_message_bytes); send the source in smaller chunks")};
}

// Registers a call for AbortAll and active_calls.
class CallScope {
 public:
  explicit CallScope(std::shared_ptr<Service::CallRegistry> registry)
      : registry_(std::move(registry)) {
    MutexLock lock(&registry_->mu);
    ++registry_->calls;
  }
  ~CallScope() {
    MutexLock lock(&registry_->mu);
    --registry_->calls;
    registry_->open.erase(this);
    ReleaseConnectionLocked();
  }
  // The call's session no longer counts against its connection (idempotent): before the call's
  // status goes out, so that a client that saw it may open the next session at once.
  void ReleaseConnection() {
    MutexLock lock(&registry_->mu);
    ReleaseConnectionLocked();
  }
  // Counts the call's session against its connection's limit (0: none): RESOURCE_EXHAUSTED
  // when the connection has `limit` already.
  grpc::Status AdmitOnConnection(const std::string& peer, int limit) {
    MutexLock lock(&registry_->mu);
    int& open = registry_->per_connection[peer];
    if (limit > 0 && open >= limit) {
      if (open == 0) registry_->per_connection.erase(peer);
      return {grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("this connection has ", open,
                           " open sessions, this server's limit per connection (gpeserve "
                           "--max_sessions_per_connection); wait for one of them to end")};
    }
    ++open;
    peer_ = peer;
    counted_ = true;
    return grpc::Status::OK;
  }
  void SetSession(std::shared_ptr<engine::SessionHandle> handle) {
    MutexLock lock(&registry_->mu);
    registry_->open[this] = std::move(handle);
  }
  void Cancel() {
    std::shared_ptr<engine::SessionHandle> handle;
    {
      MutexLock lock(&registry_->mu);
      auto it = registry_->open.find(this);
      if (it != registry_->open.end()) handle = it->second;
    }
    if (handle) handle->Cancel();
  }

 private:
  void ReleaseConnectionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_->mu) {
    if (counted_ && --registry_->per_connection[peer_] == 0) {
      registry_->per_connection.erase(peer_);
    }
    counted_ = false;
  }

  std::shared_ptr<Service::CallRegistry> registry_;
  std::string peer_;  // the connection its session counts against
  bool counted_ = false;
};

// AdmitOnConnection with the server's limit, counted in the metrics when it refuses.
grpc::Status AdmitOnConnection(Service& service, CallScope& scope, const std::string& peer) {
  grpc::Status s = scope.AdmitOnConnection(peer, service.config().max_sessions_per_connection);
  if (!s.ok() && service.metrics() != nullptr) {
    service.metrics()->LimitHit("max_sessions_per_connection");
  }
  return s;
}

// What a reactor needs to drain its Pipe into the call; shared by Stream and Generate.
template <class Reactor>
class PipedReactor : public Reactor, public Pipe::Sink {
 public:
  PipedReactor(Service& service, const grpc::CallbackServerContext& context)
      : peer_(context.peer()),
        scope_(service.registry()),
        metrics_(service.metrics()),
        pipe_(std::make_shared<Pipe>(this, service.metrics(), service.config().max_queued_events)) {
  }

  void OnWriteDone(bool ok) override { pipe_->OnWriteDone(ok); }
  void OnCancel() override { scope_.Cancel(); }
  void OnDone() override {
    pipe_->Detach();
    delete this;
  }
  void Write(const StreamResponse& response) override { this->StartWrite(&response); }
  void End(const grpc::Status& status) override {
    scope_.ReleaseConnection();
    if (!status.ok() && metrics_ != nullptr) {
      metrics_->CallFailed(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
    }
    this->Finish(status);
  }

 protected:
  const std::string peer_;  // the client's connection
  CallScope scope_;
  Metrics* metrics_;  // may be null
  std::shared_ptr<Pipe> pipe_;
};

class StreamReactor final
    : public PipedReactor<grpc::ServerBidiReactor<StreamRequest, StreamResponse>> {
 public:
  StreamReactor(Service& service, grpc::CallbackServerContext* context)
      : PipedReactor(service, *context), service_(service) {
    if (grpc::Status s = service.Authenticate(*context); !s.ok()) {
      pipe_->Fail(s);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or went away): the source is complete
      if (!handle_) {
        pipe_->Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "the request stream ended before a SessionConfig"));
      } else if (!source_ended_) {
        if (grpc::Status s = FlushText(); !s.ok()) {
          Refuse(s);
          return;
        }
        EndSource();
      }
      return;
    }
    grpc::Status s = CheckMessageSize(request_.ByteSizeLong(), service_.config());
    if (s.ok()) s = Handle(request_);
    if (!s.ok()) {
      Refuse(s);
      return;
    }
    StartRead(&request_);
  }

 private:
  // Ends the call with `status` and cancels its engine session, in this order: the session's
  // cancelled-done event must find the call already failed (else its status would race it).
  void Refuse(const grpc::Status& status) {
    pipe_->Fail(status);
    scope_.Cancel();
  }

  grpc::Status Handle(const StreamRequest& request) {
    const ServiceConfig& config = service_.config();
    switch (request.kind_case()) {
      case StreamRequest::kConfig: {
        if (handle_) {
          return {grpc::StatusCode::INVALID_ARGUMENT, "a second SessionConfig in one stream"};
        }
        auto engine_config = ToEngineConfig(request.config(), service_.config(), /*batch=*/false);
        if (!engine_config.ok()) return ToGrpc(engine_config.status());
        if (grpc::Status s = AdmitOnConnection(service_, scope_, peer_); !s.ok()) return s;
        auto handle = OpenSession(service_, *engine_config, pipe_);
        if (!handle.ok()) return ToGrpc(handle.status());
        handle_ = *handle;
        long_form_ = engine_config->long_form.enabled;
        scope_.SetSession(handle_);
        return grpc::Status::OK;
      }
      case StreamRequest::kChunk: {
        if (!handle_) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  "the first request of a stream must be a SessionConfig"};
        }
        if (source_ended_) {
          return {grpc::StatusCode::FAILED_PRECONDITION, "a SourceChunk after EndOfSource"};
        }
        const v1::SourceChunk& chunk = request.chunk();
        source_bytes_ += static_cast<int64_t>(chunk.text().size());
        for (const std::string& word : chunk.words()) {
          source_bytes_ += static_cast<int64_t>(word.size());
        }
        if (source_bytes_ > config.max_session_source_bytes) {
          if (service_.metrics() != nullptr) {
            service_.metrics()->LimitHit("max_session_source_bytes");
          }
          return {grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat("the session has been sent ", source_bytes_,
                               " bytes of source, over this server's limit of ",
                               config.max_session_source_bytes,
                               " per session (gpeserve --max_session_source_bytes); continue "
                               "in a new session")};
        }
        if (chunk.words_size() > 0 && !chunk.text().empty()) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  "a SourceChunk has both words and text; send one of them"};
        }
        if (chunk.boundary() && !long_form_) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  "SourceChunk.boundary in a sentence session: boundaries cut long-form "
                  "sessions (SessionConfig.long_form.enabled)"};
        }
        std::vector<std::string> words;
        if (chunk.words_size() > 0) {
          if (grpc::Status s = FlushText(); !s.ok()) return s;
          words = words_.Finish();  // a word cut in earlier text
          words.insert(words.end(), chunk.words().begin(), chunk.words().end());
        } else {
          // A character cut across chunks waits for its other bytes, as a cut word does.
          auto text = TakeWholeCharacters(chunk.text(), &carry_);
          if (!text.ok()) return ToGrpc(text.status());
          words = words_.Add(*text);
          if (static_cast<int>(words_.partial().size()) > config.max_word_bytes) {
            return ToGrpc(CheckWord(words_.partial(), config.max_word_bytes));
          }
          if (chunk.boundary()) {  // the boundary ends a word cut at the chunk's end
            if (grpc::Status s = FlushText(); !s.ok()) return s;
            for (std::string& word : words_.Finish()) words.push_back(std::move(word));
          }
        }
        if (static_cast<int>(words.size()) > config.max_chunk_words) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("a SourceChunk has ", words.size(), " words; the limit is ",
                               config.max_chunk_words, " (max_chunk_words): send smaller chunks")};
        }
        for (const std::string& word : words) {
          if (absl::Status s = CheckWord(word, config.max_word_bytes); !s.ok()) return ToGrpc(s);
        }
        Push(std::move(words));
        if (chunk.boundary()) handle_->Boundary();
        return grpc::Status::OK;
      }
      case StreamRequest::kEnd:
        if (!handle_) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  "the first request of a stream must be a SessionConfig"};
        }
        if (source_ended_) return {grpc::StatusCode::FAILED_PRECONDITION, "EndOfSource twice"};
        if (grpc::Status s = FlushText(); !s.ok()) return s;
        EndSource();
        return grpc::Status::OK;
      case StreamRequest::KIND_NOT_SET:
        break;
    }
    return {grpc::StatusCode::INVALID_ARGUMENT, "an empty StreamRequest: set config, chunk or end"};
  }

  // The text so far must not end inside a character when words or the end follow.
  grpc::Status FlushText() const {
    if (carry_.empty()) return grpc::Status::OK;
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "the text ended inside a UTF-8 character (its remaining bytes never came)"};
  }

  void Push(std::vector<std::string> words) {
    if (words.empty()) return;
    pipe_->SourceArrived(words.size());
    handle_->Push(std::move(words));
  }

  void EndSource() {
    Push(words_.Finish());
    source_ended_ = true;
    pipe_->SourceArrived(1);  // the end segment
    handle_->EndSource();
  }

  Service& service_;
  StreamRequest request_;
  std::shared_ptr<engine::SessionHandle> handle_;  // reactions only
  eval::WordStream words_;                         // a word cut at the end of the last text chunk
  std::string carry_;                              // a UTF-8 character cut there (its first bytes)
  bool source_ended_ = false;
  bool long_form_ = false;
  int64_t source_bytes_ = 0;  // words and text received in all
};

class GenerateReactor final : public PipedReactor<grpc::ServerWriteReactor<StreamResponse>> {
 public:
  GenerateReactor(Service& service, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest& request)
      : PipedReactor(service, *context) {
    grpc::Status status = service.Authenticate(*context);
    if (status.ok()) status = Start(service, request);
    if (!status.ok()) pipe_->Fail(status);
  }

 private:
  grpc::Status Start(Service& service, const v1::GenerateRequest& request) {
    if (grpc::Status s = CheckMessageSize(request.ByteSizeLong(), service.config()); !s.ok()) {
      return s;
    }
    if (!tokenizer::ValidateUtf8(request.text()).ok()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "the text is not valid UTF-8"};
    }
    std::vector<std::string> words;
    for (std::string_view word : eval::SplitWords(request.text())) words.emplace_back(word);
    if (words.empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "the text is empty: Generate needs the whole source (its words)"};
    }
    for (const std::string& word : words) {
      if (absl::Status s = CheckWord(word, service.config().max_word_bytes); !s.ok()) {
        return ToGrpc(s);
      }
    }
    auto config = ToEngineConfig(request.config(), service.config(), /*batch=*/true);
    if (!config.ok()) return ToGrpc(config.status());
    if (grpc::Status s = AdmitOnConnection(service, scope_, peer_); !s.ok()) return s;
    auto handle = OpenSession(service, *config, pipe_);
    if (!handle.ok()) return ToGrpc(handle.status());
    scope_.SetSession(*handle);
    pipe_->SourceArrived(words.size() + 1);
    (*handle)->Push(std::move(words));
    (*handle)->EndSource();
    return grpc::Status::OK;
  }
};

}  // namespace

// ---- Service ------------------------------------------------------------------------------------

Service::Service(std::shared_ptr<engine::Engine> engine, Metrics* metrics, ServiceConfig config)
    : engine_(std::move(engine)),
      metrics_(metrics),
      config_(std::move(config)),
      registry_(std::make_shared<CallRegistry>()) {}

Service::~Service() = default;

grpc::ServerBidiReactor<StreamRequest, StreamResponse>* Service::Stream(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(*this, context);
}

grpc::ServerWriteReactor<StreamResponse>* Service::Generate(grpc::CallbackServerContext* context,
                                                            const v1::GenerateRequest* request) {
  return new GenerateReactor(*this, context, *request);
}

grpc::ServerUnaryReactor* Service::ListModels(grpc::CallbackServerContext* context,
                                              const v1::ListModelsRequest* request,
                                              v1::ListModelsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status s = Authenticate(*context); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  const engine::EngineInfo info = engine_->info();
  v1::ModelInfo* model = response->add_models();
  model->set_name(config_.model_name);
  model->set_architecture(info.architecture);
  model->set_dtype(info.dtype);
  model->set_device(info.device);
  model->set_vocab_size(info.vocab_size);
  for (const auto& [name, profile] : config_.profiles) model->add_profiles(name);
  model->set_default_profile(config_.default_profile);
  model->set_kv_blocks(info.kv_blocks);
  model->set_block_size(info.block_size);
  model->set_max_sessions(info.max_sessions);
  for (const ServiceConfig::Adapter& adapter : config_.adapters) {
    v1::AdapterInfo* a = model->add_adapters();
    a->set_name(adapter.name);
    a->set_rank(static_cast<int32_t>(adapter.rank));
    a->set_alpha(adapter.alpha);
    for (const std::string& t : adapter.target_modules) a->add_target_modules(t);
    for (const std::string& m : adapter.modules_to_save) a->add_modules_to_save(m);
    a->set_merged(adapter.merged);
    if (adapter.instruction) a->set_instruction(*adapter.instruction);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void Service::StopAccepting() { accepting_ = false; }

void Service::AbortAll(const absl::Status& status) {
  std::vector<std::shared_ptr<engine::SessionHandle>> handles;
  {
    MutexLock lock(&registry_->mu);
    for (const auto& [call, handle] : registry_->open) handles.push_back(handle);
  }
  for (const auto& handle : handles) handle->Abort(status);
}

int64_t Service::active_calls() const {
  MutexLock lock(&registry_->mu);
  return registry_->calls;
}

grpc::Status Service::Authenticate(const grpc::CallbackServerContext& context) const {
  if (config_.auth_token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end() ||
      std::string_view(it->second.data(), it->second.size()) != "Bearer " + config_.auth_token) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "this server needs a token: send metadata 'authorization: Bearer <token>' "
            "(gpe-client --auth_token_file FILE)"};
  }
  return grpc::Status::OK;
}

}  // namespace gpeserve::server
