// What the service is configured with (gpeserve's flags): the session defaults and limits, the
// profiles sessions may name, the token.
//
// Thread-safety: a plain value, constant while the service runs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/policy/profile.h"

namespace gpeserve::server {

struct ServiceConfig {
  std::string model_name;                           // ListModels' name and the metrics' model label
  std::string default_profile;                      // a key of `profiles`
  std::map<std::string, policy::Profile> profiles;  // what sessions may ask for by name
  int default_wait_k = 3;
  int default_max_new_tokens = 256;
  int max_new_tokens_limit = 2048;      // a session's max_new_tokens at most
  int64_t max_source_tokens = 8192;     // tokens of the prompt and source words per session
  int max_instruction_bytes = 8192;     // bytes of a session's instruction and prompt strings
  int64_t max_message_bytes = 4 << 20;  // bytes of one request message
  int max_chunk_words = 1000;           // words in one SourceChunk
  int max_word_bytes = 1024;            // bytes in one word
  int max_segment_words = 1000;         // a long-form session's max_segment_words at most
  int max_queued_events = 1024;         // per session; beyond: RESOURCE_EXHAUSTED
  int max_sessions_per_connection = 0;  // open sessions of one client connection; 0: no limit
  int64_t max_session_source_bytes = 16 << 20;  // bytes of source one session sends in all
  std::string auth_token;  // non-empty: "authorization: Bearer <token>" required
  // LoRA adapters (ListModels); the merged one, if any, is what every session runs.
  struct Adapter {
    std::string name;
    int64_t rank = 0;
    double alpha = 0;
    std::vector<std::string> target_modules;
    std::vector<std::string> modules_to_save;
    // Its sessions' instruction when they give none (the adapter's prompt.json).
    std::optional<std::string> instruction;
    bool merged = false;
  };
  std::vector<Adapter> adapters;
};

}  // namespace gpeserve::server
