#include "server/convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/policy/segmenter.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::server {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

namespace {
bool lf_set(const v1::LongForm& lf) {
  return lf.sentence_marks_size() > 0 || lf.max_segment_words() > 0 || lf.context_segments() > 0;
}
}  // namespace

absl::StatusOr<engine::SessionConfig> ToEngineConfig(const v1::SessionConfig& config,
                                                     const ServiceConfig& service, bool batch) {
  engine::SessionConfig out;
  session::SessionOptions& options = out.options;
  out.adapter = config.adapter();
  // The instruction of the session's adapter, or of the merged one every session runs.
  std::optional<std::string> adapter_instruction;
  for (const ServiceConfig::Adapter& adapter : service.adapters) {
    if (adapter.merged || adapter.name == out.adapter) adapter_instruction = adapter.instruction;
    // The merged adapter is in the weights: its sessions run the model as loaded.
    if (adapter.merged && adapter.name == out.adapter) out.adapter.clear();
  }
  if (config.has_prompt()) {
    const v1::Prompt& p = config.prompt();
    if (p.assistant().empty() || p.end().empty()) {
      return absl::InvalidArgumentError(
          "prompt.assistant and prompt.end must not be empty (they mark the target's start and "
          "the source's end)");
    }
    options.profile.name = "custom";
    options.profile.instruct = p.instruct();
    options.profile.user = p.user();
    options.profile.assistant = p.assistant();
    options.profile.end = p.end();
    options.profile.add_space = p.add_space();
  } else {
    const std::string name = config.profile().empty() ? service.default_profile : config.profile();
    auto it = service.profiles.find(name);
    if (it == service.profiles.end()) {
      std::vector<std::string> names;
      for (const auto& [known, profile] : service.profiles) names.push_back(known);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown profile '", name, "'; this server has: ", absl::StrJoin(names, ", ")));
    }
    options.profile = it->second;
  }
  int64_t prompt_bytes = static_cast<int64_t>(config.instruction().size());
  if (config.has_prompt()) {
    const v1::Prompt& p = config.prompt();
    prompt_bytes += static_cast<int64_t>(p.instruct().size() + p.user().size() +
                                         p.assistant().size() + p.end().size());
  }
  if (prompt_bytes > service.max_instruction_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the instruction", config.has_prompt() ? " and prompt strings have " : " has ",
                     prompt_bytes, " bytes; this server allows at most ",
                     service.max_instruction_bytes, " (gpeserve --max_instruction_bytes)"));
  }
  if (config.has_instruction()) {
    options.profile.instruction = config.instruction();
  } else if (adapter_instruction) {
    options.profile.instruction = *adapter_instruction;
  }
  if (config.has_phi()) options.profile.phi = config.phi();

  const int wait_k = config.wait_k() == 0 ? service.default_wait_k : config.wait_k();
  if (config.wait_k() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait_k is ", config.wait_k(), "; it must be between 1 and 1000"));
  }
  options.policy.wait_k = wait_k;
  switch (config.split()) {
    case v1::SessionConfig::SPLIT_UNSPECIFIED:
    case v1::SessionConfig::SPLIT_WORD:
      options.policy.split = policy::SplitMode::kWord;
      break;
    case v1::SessionConfig::SPLIT_TOKEN:
      options.policy.split = policy::SplitMode::kToken;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown split ", static_cast<int>(config.split())));
  }
  switch (config.paradigm()) {
    case v1::SessionConfig::PARADIGM_UNSPECIFIED:
    case v1::SessionConfig::PARADIGM_GPE:
      options.paradigm = session::Paradigm::kGpe;
      break;
    case v1::SessionConfig::PARADIGM_REENCODE:
      options.paradigm = session::Paradigm::kReencode;
      break;
    case v1::SessionConfig::PARADIGM_INTERLEAVED:
      options.paradigm = session::Paradigm::kInterleaved;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown paradigm ", static_cast<int>(config.paradigm())));
  }
  if (batch) options.paradigm = session::Paradigm::kBatch;
  switch (config.compat()) {
    case v1::SessionConfig::COMPAT_UNSPECIFIED:
    case v1::SessionConfig::COMPAT_NONE:
      options.policy.compat = policy::Compat::kNone;
      break;
    case v1::SessionConfig::COMPAT_REFERENCE:  // gpe sessions only: the session checks
      options.policy.compat = policy::Compat::kReference;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown compat ", static_cast<int>(config.compat())));
  }
  const uint32_t max_new =
      config.max_new_tokens() == 0 ? service.default_max_new_tokens : config.max_new_tokens();
  if (max_new > static_cast<uint32_t>(service.max_new_tokens_limit)) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens is ", max_new,
                                                   "; this server allows at most ",
                                                   service.max_new_tokens_limit));
  }
  options.policy.max_new_tokens = static_cast<int>(max_new);
  if (config.max_write_tokens() > 0) {
    if (config.max_write_tokens() > max_new) {
      return absl::InvalidArgumentError("max_write_tokens must not exceed max_new_tokens");
    }
    options.policy.max_write_tokens = static_cast<int>(config.max_write_tokens());
  }
  options.max_source_tokens = service.max_source_tokens;
  out.report_waiting = config.report_waiting();

  if (config.has_long_form() && config.long_form().enabled()) {
    const v1::LongForm& lf = config.long_form();
    if (batch) {
      return absl::InvalidArgumentError(
          "long_form with Generate: Generate is batch mode, which waits for the whole source; "
          "stream a long-form session with Stream");
    }
    out.long_form.enabled = true;
    if (lf.sentence_marks_size() > 0) {
      for (const std::string& mark : lf.sentence_marks()) {
        if (!tokenizer::ValidateUtf8(mark).ok()) {
          return absl::InvalidArgumentError("long_form.sentence_marks: a mark is not valid UTF-8");
        }
      }
      out.long_form.segmenter.sentence_marks.assign(lf.sentence_marks().begin(),
                                                    lf.sentence_marks().end());
      if (auto segmenter = policy::Segmenter::Create(out.long_form.segmenter); !segmenter.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("long_form.sentence_marks: ", segmenter.status().message()));
      }
    }
    if (lf.max_segment_words() > static_cast<uint32_t>(service.max_segment_words)) {
      return absl::InvalidArgumentError(
          absl::StrCat("long_form.max_segment_words is ", lf.max_segment_words(),
                       "; this server allows at most ", service.max_segment_words,
                       " (gpeserve --max_segment_words)"));
    }
    if (lf.max_segment_words() > 0)
      out.long_form.segmenter.max_segment_words = lf.max_segment_words();
    out.long_form.context_segments = lf.context_segments();
  } else if (config.has_long_form() && lf_set(config.long_form())) {
    return absl::InvalidArgumentError(
        "long_form has settings but long_form.enabled is false; set enabled to stream long-form");
  }

  const v1::Sampling& s = config.sampling();
  out.sampling.temperature = s.temperature();
  out.sampling.top_k = s.top_k();
  out.sampling.top_p = s.top_p() == 0 ? 1.0 : s.top_p();
  if (s.has_seed()) out.sampling.seed = s.seed();
  if (absl::Status status = sampler::Validate(out.sampling); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", status.message()));
  }
  return out;
}

v1::StreamResponse ToDeltaResponse(const engine::SessionEvent& e, int64_t server_time_us,
                                   int64_t session_time_us) {
  v1::StreamResponse response;
  v1::TokenDelta* delta = response.mutable_delta();
  delta->mutable_ids()->Add(e.ids.begin(), e.ids.end());
  delta->set_text(e.text);
  delta->set_word_complete(e.word_complete);
  delta->set_source_units_read(e.units_read);
  delta->set_server_time_us(server_time_us);
  delta->set_session_time_us(session_time_us);
  delta->set_segment(e.segment);
  if (e.word_complete) delta->set_lag_ms(e.lag_ms);
  return response;
}

v1::StreamResponse ToWaitingResponse(const engine::SessionEvent& e, int64_t server_time_us,
                                     int64_t session_time_us) {
  v1::StreamResponse response;
  v1::WaitingForSource* waiting = response.mutable_waiting();
  waiting->set_source_units_read(e.units_read);
  waiting->set_segment(e.segment);
  waiting->set_server_time_us(server_time_us);
  waiting->set_session_time_us(session_time_us);
  return response;
}

namespace {
void SetCounters(const session::SessionCounters& from, v1::SessionCounters* to) {
  to->set_source_tokens(from.source_tokens);
  to->set_forward_tokens(from.forward_tokens);
  to->set_shared_tokens(from.shared_tokens);
  to->set_preemptions(from.preemptions);
  to->set_kv_blocks_high_water(from.kv_blocks_high_water);
}
}  // namespace

v1::StreamResponse ToSegmentResponse(const engine::SessionEvent& e) {
  const session::SegmentRecord& r = e.segment_record;
  v1::StreamResponse response;
  v1::SegmentDone* segment = response.mutable_segment();
  segment->set_index(r.index);
  segment->set_text(r.text);
  segment->mutable_ids()->Add(r.output.begin(), r.output.end());
  segment->mutable_delays()->Add(r.delays.begin(), r.delays.end());
  segment->mutable_lags_ms()->Add(e.lags_ms.begin(), e.lags_ms.end());
  segment->set_first_word(r.first_word);
  segment->set_words(r.words);
  segment->set_source_units(r.source_units);
  segment->set_source_units_unread(r.units_unread);
  segment->set_cut(policy::CutReasonName(r.cut));
  segment->set_finish_reason(policy::DoneReasonName(r.reason));
  SetCounters(r.counters, segment->mutable_counters());
  segment->mutable_counters()->set_kv_blocks_high_water(e.counters.kv_blocks_high_water);
  return response;
}

v1::StreamResponse ToDoneResponse(const engine::SessionEvent& e,
                                  const std::vector<double>& delays_ms) {
  v1::StreamResponse response;
  v1::SessionDone* done = response.mutable_done();
  done->set_text(e.full_text);
  done->mutable_ids()->Add(e.output.begin(), e.output.end());
  done->mutable_delays()->Add(e.delays.begin(), e.delays.end());
  done->mutable_delays_ms()->Add(delays_ms.begin(), delays_ms.end());
  done->set_source_units(e.source_units);
  SetCounters(e.counters, done->mutable_counters());
  done->set_finish_reason(engine::FinishReasonName(e.reason));
  done->set_source_units_unread(e.source_units_unread);
  done->mutable_lags_ms()->Add(e.lags_ms.begin(), e.lags_ms.end());
  done->set_segments(e.segments);
  return response;
}

}  // namespace gpeserve::server
