// Evaluation data sets in the reference evaluation's format: a JSON array of objects holding
// a source and a target string under chosen keys, e.g. [{"en": "...", "de": "..."}].
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpeserve::eval {

struct Example {
  std::string source;
  std::string reference;
};

// Parses a data set's JSON text (a JSON array of objects with string fields `source_key` and
// `target_key`); `name` names it in errors (the entry point for fuzzing).
absl::StatusOr<std::vector<Example>> ParseDataset(std::string_view text, const std::string& name,
                                                  const std::string& source_key,
                                                  const std::string& target_key);

// Reads `path`. Errors name the file and, for a bad item, its index and the keys it lacks.
absl::StatusOr<std::vector<Example>> LoadDataset(const std::string& path,
                                                 const std::string& source_key,
                                                 const std::string& target_key);

}  // namespace gpeserve::eval
