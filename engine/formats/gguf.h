// Reading GGUF files, the single-file format of llama.cpp and Ollama (ggml's docs/gguf.md):
// a header (magic "GGUF", version 2 or 3, counts), typed metadata key/values (integers,
// floats, booleans, strings and arrays of them), tensor infos (name, dimensions, ggml type,
// offset), then the tensor data at `general.alignment` (default 32). Little-endian only;
// version 1 files (32-bit counts, 2023) are refused. Files are memory-mapped; tensors are
// views into the mapping.
//
// Thread-safety: a GgufFile is immutable after Open and may be shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/mapped_file.h"

namespace gpeserve::model {

// ggml's tensor types (the numbers are the file's). Block: elements stored together (1 for the
// plain types; a quantized block holds its scales beside its values).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// "F32", "Q4_K", ...; "type N" for a number ggml does not (or no longer) define.
std::string GgmlTypeName(GgmlType type);
// Elements per block and bytes per block; nullopt for a number ggml does not define.
struct GgmlBlock {
  int64_t elements;
  int64_t bytes;
};
std::optional<GgmlBlock> GgmlBlockOf(GgmlType type);

// A metadata value. Integers of every width are held as int64_t, except uint64 values beyond
// it (uint64_t); float32 and float64 as double. An array holds values of one type.
struct GgufValue {
  enum class Type : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
  };
  Type type = Type::kUint8;          // as stored
  Type element_type = Type::kUint8;  // arrays: the elements' type
  std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<GgufValue>> value;

  bool is_integer() const;
  bool is_float() const;  // float32 or float64
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // as stored: the fastest-varying first (ggml's ne[0], ne[1], ...)
  GgmlType type = GgmlType::kF32;
  size_t offset = 0;  // from the start of the file
  size_t size = 0;    // bytes
  int64_t numel() const;
  // The shape rows-first, as libtorch and safetensors write it: dims reversed.
  std::vector<int64_t> shape() const;
};

// A parsed GGUF file: its metadata and tensor infos (in file order).
struct GgufContents {
  uint32_t version = 0;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;
  size_t alignment = 32;
};

// Validates a whole GGUF file held in memory. Errors (InvalidArgument / DataLoss /
// Unimplemented) name `file_name` and, where it applies, the key or the tensor: bad magic,
// unsupported version or endianness, truncated header, metadata or tensor infos, unknown value
// or tensor type, duplicate key or tensor, a dimension count outside 1..4, a shape not whole
// blocks, an offset not aligned, tensors out of the file or overlapping. This is the entry point
// for fuzzing: it never reads outside `file` and bounds every count by the bytes left.
absl::StatusOr<GgufContents> ParseGguf(std::string_view file, std::string_view file_name);

// A memory-mapped GGUF file.
class GgufFile {
 public:
  static absl::StatusOr<std::shared_ptr<const GgufFile>> Open(const std::string& path);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufContents& contents() const { return contents_; }
  const std::vector<GgufTensorInfo>& tensors() const { return contents_.tensors; }
  // nullptr if absent.
  const GgufTensorInfo* Find(std::string_view name) const;
  const GgufValue* FindValue(std::string_view key) const;
  // Start of a tensor's bytes inside the mapping (valid while this object lives).
  const void* Data(const GgufTensorInfo& tensor) const { return mapped_->data() + tensor.offset; }

  // Typed metadata: NotFound when absent (the error names the file and key), InvalidArgument
  // when of another type; an integer for a float is accepted.
  absl::StatusOr<int64_t> Integer(std::string_view key) const;
  absl::StatusOr<double> Float(std::string_view key) const;
  absl::StatusOr<bool> Bool(std::string_view key) const;
  absl::StatusOr<std::string> String(std::string_view key) const;

 private:
  GgufFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> mapped_;
  GgufContents contents_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace gpeserve::model
