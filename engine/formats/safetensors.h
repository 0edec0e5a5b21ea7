// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then
// the raw tensor bytes. Files are memory-mapped; tensors are views into the mapping.
//
// Thread-safety: a SafetensorsFile is immutable after Open and may be shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/mapped_file.h"

namespace gpeserve::model {

enum class DType { kF32, kBF16, kF16, kI8 };

// "F32", "BF16", "F16", "I8" (int8 weights written by gpe quantize); an error for anything else.
absl::StatusOr<DType> ParseDType(std::string_view name);
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the file
  size_t size = 0;    // bytes
  int64_t numel() const;
};

// "[d0, d1, ...]": a shape as error messages print it.
std::string ShapeString(const std::vector<int64_t>& shape);

// Validates a whole safetensors file held in memory and lists its tensors (sorted by name).
// Errors (InvalidArgument / DataLoss / Unimplemented) name `file_name` and, where it applies,
// the tensor: truncated file, header length past the end, header not JSON, unknown dtype,
// negative or inconsistent shape, offsets out of range or overlapping, size != shape x dtype.
// This is the entry point for fuzzing: it never reads outside `file`.
absl::StatusOr<std::vector<TensorInfo>> ParseSafetensors(std::string_view file,
                                                         std::string_view file_name);

class SafetensorsFile {
 public:
  // Memory-maps `path` read-only and validates it with ParseSafetensors.
  static absl::StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorInfo* Find(std::string_view name) const;
  // Start of a tensor's bytes inside the mapping (valid while this object lives).
  const void* Data(const TensorInfo& tensor) const { return mapped_->data() + tensor.offset; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> mapped_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A tensor to write: `data` holds numel x DTypeSize(dtype) bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes a safetensors file (tensors in the given order, 8-byte aligned data) with optional
// string metadata.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace gpeserve::model
