// Words of a text as evaluation counts them: |Y| for AL and LAAL is the number of words of a
// session's output. Whitespace is what Python's str.split() splits on (ASCII whitespace, the
// separators U+001C..U+001F, and Unicode's spaces and line separators), because the reference
// evaluation code and SimulEval count words that way; a gpe eval and a gpe-client eval of the
// same outputs then give the same latency as they do.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>
#include <vector>

namespace gpeserve::eval {

// The words of UTF-8 `text`, in order (views into it). Invalid bytes are kept inside words.
std::vector<std::string_view> SplitWords(std::string_view text);

}  // namespace gpeserve::eval
