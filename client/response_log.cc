#include "client/response_log.h"

#include <chrono>

#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace gpeserve::client {
namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <typename T>
std::vector<T> List(const google::protobuf::RepeatedField<T>& field) {
  return std::vector<T>(field.begin(), field.end());
}

nlohmann::json Line(const v1::StreamResponse& r) {
  switch (r.kind_case()) {
    case v1::StreamResponse::kDelta: {
      const v1::TokenDelta& d = r.delta();
      nlohmann::json j = {{"kind", "delta"},
                          {"segment", d.segment()},
                          {"source_units_read", d.source_units_read()},
                          {"ids", List(d.ids())},
                          {"text", d.text()},
                          {"word_complete", d.word_complete()},
                          {"server_time_us", d.server_time_us()},
                          {"session_time_us", d.session_time_us()}};
      if (d.word_complete()) j["lag_ms"] = d.lag_ms();
      return j;
    }
    case v1::StreamResponse::kWaiting: {
      const v1::WaitingForSource& w = r.waiting();
      return {{"kind", "waiting"},
              {"segment", w.segment()},
              {"source_units_read", w.source_units_read()},
              {"server_time_us", w.server_time_us()},
              {"session_time_us", w.session_time_us()}};
    }
    case v1::StreamResponse::kSegment: {
      const v1::SegmentDone& s = r.segment();
      return {{"kind", "segment"},
              {"segment", s.index()},
              {"text", s.text()},
              {"ids", List(s.ids())},
              {"delays", List(s.delays())},
              {"lags_ms", List(s.lags_ms())},
              {"first_word", s.first_word()},
              {"words", s.words()},
              {"source_units", s.source_units()},
              {"source_units_unread", s.source_units_unread()},
              {"cut", s.cut()},
              {"finish_reason", s.finish_reason()}};
    }
    case v1::StreamResponse::kDone: {
      const v1::SessionDone& d = r.done();
      return {{"kind", "done"},
              {"text", d.text()},
              {"ids", List(d.ids())},
              {"delays", List(d.delays())},
              {"delays_ms", List(d.delays_ms())},
              {"lags_ms", List(d.lags_ms())},
              {"source_units", d.source_units()},
              {"source_units_unread", d.source_units_unread()},
              {"segments", d.segments()},
              {"finish_reason", d.finish_reason()}};
    }
    case v1::StreamResponse::KIND_NOT_SET:
      break;
  }
  return {{"kind", "unknown"}};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ResponseLog>> ResponseLog::Open(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(path + ": cannot create file");
  return std::unique_ptr<ResponseLog>(new ResponseLog(std::move(out)));
}

void ResponseLog::Start(int64_t session, const std::vector<std::string>& words,
                        double words_per_second, const v1::SessionConfig& config) {
  const nlohmann::json j = {
      {"kind", "start"},
      {"session", session},
      {"source", absl::StrJoin(words, " ")},
      {"source_words", words.size()},
      {"words_per_second", words_per_second},
      {"split", config.split() == v1::SessionConfig::SPLIT_TOKEN ? "token" : "word"},
      {"long_form", config.long_form().enabled()},
      {"client_time_us", NowMicros()}};
  Write(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void ResponseLog::Response(int64_t session, const ResponseSeen& seen) {
  nlohmann::json j = Line(seen.response);
  j["session"] = session;
  j["source_sent"] = seen.words_sent;
  j["client_time_us"] = seen.client_time_us;
  j["client_elapsed_ms"] = seen.client_elapsed_ms;
  Write(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void ResponseLog::Error(int64_t session, const absl::Status& status) {
  const nlohmann::json j = {{"kind", "error"},
                            {"session", session},
                            {"code", absl::StatusCodeToString(status.code())},
                            {"message", std::string(status.message())},
                            {"client_time_us", NowMicros()}};
  Write(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void ResponseLog::Write(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  out_ << line << '\n';
  out_.flush();
}

}  // namespace gpeserve::client
