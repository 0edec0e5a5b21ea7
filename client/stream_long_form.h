// gpe-client stream --long_form: one long-form session (docs/GPE.md 9) over a whole text, a
// talk of hours: cut into segments (a boundary after each line unless cut by marks alone),
// each printed as it finishes, then the segments, StreamLAAL, the per-word computation-aware
// lag and the session's KV high-water mark.
//
// Thread-safety: runs on the calling thread.
#pragma once

#include <string>

#include "client/client.h"
#include "flags/groups.h"

namespace gpeserve::client {

// Streams `text` at `words_per_second` (0: at once) with `config` made long-form by
// `long_form`; prints as above (`json`: the summary as JSON too). Returns the exit code.
int StreamLongForm(v1::Gpeserve::Stub& stub, const ConnectOptions& connect,
                   v1::SessionConfig config, const flags::LongFormFlags& long_form,
                   const std::string& text, double words_per_second, bool json,
                   const ResponseCallback& on_response = nullptr);

}  // namespace gpeserve::client
