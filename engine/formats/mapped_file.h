// A whole file memory-mapped read-only (what the model file readers parse and serve tensors
// from, without copying them).
//
// Thread-safety: immutable after Open; may be shared across threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gpeserve::model {

class MappedFile {
 public:
  // NotFound when `path` cannot be opened; Internal when it cannot be mapped.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The file's bytes (valid while this object lives).
  std::string_view bytes() const { return {base_, size_}; }
  const char* data() const { return base_; }

 private:
  MappedFile() = default;
  const char* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gpeserve::model
