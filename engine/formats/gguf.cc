#include "engine/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF files are read in place");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr size_t kMaxKeyBytes = 65535;   // the spec's bound on a key
constexpr uint32_t kMaxDims = 4;         // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // arrays of arrays: the spec allows them; bound the stack

using Type = GgufValue::Type;

// A cursor over the file's bytes; every read is bounds-checked. Errors carry the file's name.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view file_name)
      : bytes_(bytes), file_name_(file_name) {}

  size_t position() const { return position_; }
  size_t left() const { return bytes_.size() - position_; }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    if (left() < sizeof(T)) return Truncated(what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  absl::StatusOr<std::string> ReadString(std::string_view what) {
    auto length = Read<uint64_t>(what);
    if (!length.ok()) return length.status();
    if (*length > left()) return Truncated(what);
    std::string s(bytes_.substr(position_, *length));
    position_ += *length;
    return s;
  }

  absl::Status Truncated(std::string_view what) const {
    return absl::DataLossError(absl::StrCat(file_name_,
                                            ": truncated GGUF file: ", std::string(what),
                                            " runs past the end (", bytes_.size(), " bytes)"));
  }
  absl::Status Invalid(std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ": ", std::string(message)));
  }

 private:
  std::string_view bytes_;
  std::string file_name_;
  size_t position_ = 0;
};

const char* ValueTypeName(Type type) {
  switch (type) {
    case Type::kUint8:
      return "uint8";
    case Type::kInt8:
      return "int8";
    case Type::kUint16:
      return "uint16";
    case Type::kInt16:
      return "int16";
    case Type::kUint32:
      return "uint32";
    case Type::kInt32:
      return "int32";
    case Type::kFloat32:
      return "float32";
    case Type::kBool:
      return "bool";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kUint64:
      return "uint64";
    case Type::kInt64:
      return "int64";
    case Type::kFloat64:
      return "float64";
  }
  return "?";
}

bool KnownValueType(uint32_t type) { return type <= static_cast<uint32_t>(Type::kFloat64); }

// The fewest bytes one value of `type` takes in the file (bounds an array's length).
size_t MinValueBytes(Type type) {
  switch (type) {
    case Type::kUint8:
    case Type::kInt8:
    case Type::kBool:
      return 1;
    case Type::kUint16:
    case Type::kInt16:
      return 2;
    case Type::kUint32:
    case Type::kInt32:
    case Type::kFloat32:
      return 4;
    case Type::kString:  // the length
    case Type::kUint64:
    case Type::kInt64:
    case Type::kFloat64:
      return 8;
    case Type::kArray:  // element type and length
      return 12;
  }
  return 1;
}

absl::StatusOr<GgufValue> ReadValue(Reader& in, Type type, const std::string& key, int depth);

template <typename T>
absl::StatusOr<GgufValue> ReadNumber(Reader& in, Type type, const std::string& key) {
  auto v = in.Read<T>(absl::StrCat("the value of '", key, "'"));
  if (!v.ok()) return v.status();
  GgufValue value;
  value.type = type;
  if constexpr (std::is_floating_point_v<T>) {
    value.value = static_cast<double>(*v);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      value.value = *v;
    } else {
      value.value = static_cast<int64_t>(*v);
    }
  } else {
    value.value = static_cast<int64_t>(*v);
  }
  return value;
}

absl::StatusOr<GgufValue> ReadValue(Reader& in, Type type, const std::string& key, int depth) {
  switch (type) {
    case Type::kUint8:
      return ReadNumber<uint8_t>(in, type, key);
    case Type::kInt8:
      return ReadNumber<int8_t>(in, type, key);
    case Type::kUint16:
      return ReadNumber<uint16_t>(in, type, key);
    case Type::kInt16:
      return ReadNumber<int16_t>(in, type, key);
    case Type::kUint32:
      return ReadNumber<uint32_t>(in, type, key);
    case Type::kInt32:
      return ReadNumber<int32_t>(in, type, key);
    case Type::kUint64:
      return ReadNumber<uint64_t>(in, type, key);
    case Type::kInt64:
      return ReadNumber<int64_t>(in, type, key);
    case Type::kFloat32:
      return ReadNumber<float>(in, type, key);
    case Type::kFloat64:
      return ReadNumber<double>(in, type, key);
    case Type::kBool: {
      auto b = in.Read<uint8_t>(absl::StrCat("the value of '", key, "'"));
      if (!b.ok()) return b.status();
      if (*b > 1) return in.Invalid(absl::StrCat("'", key, "': a bool must be 0 or 1, not ", *b));
      GgufValue value;
      value.type = type;
      value.value = *b == 1;
      return value;
    }
    case Type::kString: {
      auto s = in.ReadString(absl::StrCat("the value of '", key, "'"));
      if (!s.ok()) return s.status();
      GgufValue value;
      value.type = type;
      value.value = *std::move(s);
      return value;
    }
    case Type::kArray: {
      if (depth >= kMaxArrayDepth) {
        return in.Invalid(absl::StrCat("'", key, "': arrays nested deeper than ", kMaxArrayDepth));
      }
      const std::string what = absl::StrCat("the array '", key, "'");
      auto element_type = in.Read<uint32_t>(what);
      if (!element_type.ok()) return element_type.status();
      if (!KnownValueType(*element_type)) {
        return in.Invalid(absl::StrCat("'", key, "': unknown array element type ", *element_type));
      }
      auto length = in.Read<uint64_t>(what);
      if (!length.ok()) return length.status();
      const Type element = static_cast<Type>(*element_type);
      if (*length > in.left() / MinValueBytes(element)) return in.Truncated(what);
      GgufValue value;
      value.type = type;
      value.element_type = element;
      std::vector<GgufValue> elements;
      elements.reserve(*length);
      for (uint64_t i = 0; i < *length; ++i) {
        auto e = ReadValue(in, element, key, depth + 1);
        if (!e.ok()) return e.status();
        elements.push_back(*std::move(e));
      }
      value.value = std::move(elements);
      return value;
    }
  }
  return in.Invalid(absl::StrCat("'", key, "': unknown value type"));
}

}  // namespace

std::string GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ5_0:
      return "Q5_0";
    case GgmlType::kQ5_1:
      return "Q5_1";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ8_1:
      return "Q8_1";
    case GgmlType::kQ2_K:
      return "Q2_K";
    case GgmlType::kQ3_K:
      return "Q3_K";
    case GgmlType::kQ4_K:
      return "Q4_K";
    case GgmlType::kQ5_K:
      return "Q5_K";
    case GgmlType::kQ6_K:
      return "Q6_K";
    case GgmlType::kQ8_K:
      return "Q8_K";
    case GgmlType::kIQ2_XXS:
      return "IQ2_XXS";
    case GgmlType::kIQ2_XS:
      return "IQ2_XS";
    case GgmlType::kIQ3_XXS:
      return "IQ3_XXS";
    case GgmlType::kIQ1_S:
      return "IQ1_S";
    case GgmlType::kIQ4_NL:
      return "IQ4_NL";
    case GgmlType::kIQ3_S:
      return "IQ3_S";
    case GgmlType::kIQ2_S:
      return "IQ2_S";
    case GgmlType::kIQ4_XS:
      return "IQ4_XS";
    case GgmlType::kI8:
      return "I8";
    case GgmlType::kI16:
      return "I16";
    case GgmlType::kI32:
      return "I32";
    case GgmlType::kI64:
      return "I64";
    case GgmlType::kF64:
      return "F64";
    case GgmlType::kIQ1_M:
      return "IQ1_M";
    case GgmlType::kBF16:
      return "BF16";
    case GgmlType::kTQ1_0:
      return "TQ1_0";
    case GgmlType::kTQ2_0:
      return "TQ2_0";
    case GgmlType::kMXFP4:
      return "MXFP4";
  }
  return absl::StrCat("type ", static_cast<uint32_t>(type));
}

std::optional<GgmlBlock> GgmlBlockOf(GgmlType type) {
  constexpr int64_t k = 256;  // ggml's QK_K: the K-quants' and most i-quants' super-block
  switch (type) {
    case GgmlType::kF32:
      return GgmlBlock{1, 4};
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return GgmlBlock{1, 2};
    case GgmlType::kQ4_0:
      return GgmlBlock{32, 18};
    case GgmlType::kQ4_1:
      return GgmlBlock{32, 20};
    case GgmlType::kQ5_0:
      return GgmlBlock{32, 22};
    case GgmlType::kQ5_1:
      return GgmlBlock{32, 24};
    case GgmlType::kQ8_0:
      return GgmlBlock{32, 34};
    case GgmlType::kQ8_1:
      return GgmlBlock{32, 36};
    case GgmlType::kQ2_K:
      return GgmlBlock{k, 84};
    case GgmlType::kQ3_K:
      return GgmlBlock{k, 110};
    case GgmlType::kQ4_K:
      return GgmlBlock{k, 144};
    case GgmlType::kQ5_K:
      return GgmlBlock{k, 176};
    case GgmlType::kQ6_K:
      return GgmlBlock{k, 210};
    case GgmlType::kQ8_K:
      return GgmlBlock{k, 292};
    case GgmlType::kIQ2_XXS:
      return GgmlBlock{k, 66};
    case GgmlType::kIQ2_XS:
      return GgmlBlock{k, 74};
    case GgmlType::kIQ3_XXS:
      return GgmlBlock{k, 98};
    case GgmlType::kIQ1_S:
      return GgmlBlock{k, 50};
    case GgmlType::kIQ4_NL:
      return GgmlBlock{32, 18};
    case GgmlType::kIQ3_S:
      return GgmlBlock{k, 110};
    case GgmlType::kIQ2_S:
      return GgmlBlock{k, 82};
    case GgmlType::kIQ4_XS:
      return GgmlBlock{k, 136};
    case GgmlType::kI8:
      return GgmlBlock{1, 1};
    case GgmlType::kI16:
      return GgmlBlock{1, 2};
    case GgmlType::kI32:
      return GgmlBlock{1, 4};
    case GgmlType::kI64:
    case GgmlType::kF64:
      return GgmlBlock{1, 8};
    case GgmlType::kIQ1_M:
      return GgmlBlock{k, 56};
    case GgmlType::kTQ1_0:
      return GgmlBlock{k, 54};
    case GgmlType::kTQ2_0:
      return GgmlBlock{k, 66};
    case GgmlType::kMXFP4:
      return GgmlBlock{32, 17};
  }
  return std::nullopt;
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<int64_t>(value) || std::holds_alternative<uint64_t>(value);
}

bool GgufValue::is_float() const { return type == Type::kFloat32 || type == Type::kFloat64; }

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {dims.rbegin(), dims.rend()}; }

absl::StatusOr<GgufContents> ParseGguf(std::string_view file, std::string_view name) {
  Reader in(file, name);
  const std::string file_name(name);
  GgufContents contents;
  auto magic = in.Read<uint32_t>("the magic number");
  if (!magic.ok()) return magic.status();
  if (*magic != kMagic)
    return in.Invalid("not a GGUF file (the first four bytes are not \"GGUF\")");
  auto version = in.Read<uint32_t>("the version");
  if (!version.ok()) return version.status();
  if (*version != 0 && (*version & 0xFFFF) == 0) {
    return absl::UnimplementedError(
        absl::StrCat(file_name, ": a big-endian GGUF file: convert it on a little-endian machine"));
  }
  if (*version == 1) {
    return absl::UnimplementedError(absl::StrCat(
        file_name, ": GGUF version 1 (2023, 32-bit counts) is not read: convert the model again"));
  }
  if (*version != 2 && *version != 3) {
    return absl::UnimplementedError(
        absl::StrCat(file_name, ": GGUF version ", *version, " (versions 2 and 3 are read)"));
  }
  contents.version = *version;
  auto tensor_count = in.Read<uint64_t>("the tensor count");
  if (!tensor_count.ok()) return tensor_count.status();
  auto kv_count = in.Read<uint64_t>("the metadata count");
  if (!kv_count.ok()) return kv_count.status();

  for (uint64_t i = 0; i < *kv_count; ++i) {
    auto key = in.ReadString(absl::StrCat("metadata key ", i));
    if (!key.ok()) return key.status();
    if (key->empty() || key->size() > kMaxKeyBytes) {
      return in.Invalid(
          absl::StrCat("metadata key ", i, " is empty or longer than ", kMaxKeyBytes, " bytes"));
    }
    auto type = in.Read<uint32_t>(absl::StrCat("the type of '", *key, "'"));
    if (!type.ok()) return type.status();
    if (!KnownValueType(*type)) {
      return in.Invalid(absl::StrCat("'", *key, "': unknown value type ", *type));
    }
    auto value = ReadValue(in, static_cast<Type>(*type), *key, 0);
    if (!value.ok()) return value.status();
    if (!contents.metadata.emplace(*key, *std::move(value)).second) {
      return in.Invalid(absl::StrCat("metadata key '", *key, "' appears twice"));
    }
  }
  if (auto it = contents.metadata.find("general.alignment"); it != contents.metadata.end()) {
    const GgufValue& a = it->second;
    const int64_t* n = std::get_if<int64_t>(&a.value);
    if (a.type != Type::kUint32 || n == nullptr || *n == 0 ||
        !std::has_single_bit(static_cast<uint64_t>(*n))) {
      return in.Invalid("general.alignment must be a uint32 power of two");
    }
    contents.alignment = static_cast<size_t>(*n);
  }

  // Tensor infos: offsets relative to the data section, which starts aligned after them.
  std::vector<uint64_t> relative;
  std::map<std::string_view, size_t> seen;
  for (uint64_t i = 0; i < *tensor_count; ++i) {
    GgufTensorInfo t;
    auto name = in.ReadString(absl::StrCat("the name of tensor ", i));
    if (!name.ok()) return name.status();
    t.name = *std::move(name);
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    auto n_dims = in.Read<uint32_t>(what);
    if (!n_dims.ok()) return n_dims.status();
    if (*n_dims < 1 || *n_dims > kMaxDims) {
      return in.Invalid(absl::StrCat(what, " has ", *n_dims, " dimensions (1 to ", kMaxDims, ")"));
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = in.Read<uint64_t>(what);
      if (!dim.ok()) return dim.status();
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(*dim), &numel)) {
        return in.Invalid(absl::StrCat(what, ": dimensions too large"));
      }
      t.dims.push_back(static_cast<int64_t>(*dim));
    }
    auto type = in.Read<uint32_t>(what);
    if (!type.ok()) return type.status();
    t.type = static_cast<GgmlType>(*type);
    const std::optional<GgmlBlock> block = GgmlBlockOf(t.type);
    if (!block.has_value()) {
      return absl::UnimplementedError(
          absl::StrCat(file_name, ": ", what, " has ggml type ", *type, ", which is unknown"));
    }
    if (t.dims[0] % block->elements != 0) {
      return in.Invalid(absl::StrCat(what, ": its first dimension ", t.dims[0], " is not whole ",
                                     GgmlTypeName(t.type), " blocks of ", block->elements));
    }
    int64_t bytes = 0;
    if (__builtin_mul_overflow(numel / block->elements, block->bytes, &bytes)) {
      return in.Invalid(absl::StrCat(what, ": dimensions too large"));
    }
    t.size = static_cast<size_t>(bytes);
    auto offset = in.Read<uint64_t>(what);
    if (!offset.ok()) return offset.status();
    if (*offset % contents.alignment != 0) {
      return in.Invalid(absl::StrCat(what, ": offset ", *offset, " is not a multiple of the ",
                                     contents.alignment, "-byte alignment"));
    }
    relative.push_back(*offset);
    contents.tensors.push_back(std::move(t));
  }
  for (size_t i = 0; i < contents.tensors.size(); ++i) {
    if (!seen.emplace(contents.tensors[i].name, i).second) {
      return in.Invalid(absl::StrCat("tensor '", contents.tensors[i].name, "' appears twice"));
    }
  }
  const size_t data_start =
      (in.position() + contents.alignment - 1) / contents.alignment * contents.alignment;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t i = 0; i < contents.tensors.size(); ++i) {
    GgufTensorInfo& t = contents.tensors[i];
    if (data_start > file.size() || relative[i] > file.size() - data_start ||
        t.size > file.size() - data_start - relative[i]) {
      return in.Truncated(absl::StrCat("the data of tensor '", t.name, "'"));
    }
    t.offset = data_start + relative[i];
    if (t.size > 0) ranges.emplace_back(t.offset, i);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const GgufTensorInfo& before = contents.tensors[ranges[i - 1].second];
    const GgufTensorInfo& after = contents.tensors[ranges[i].second];
    if (before.offset + before.size > after.offset) {
      return in.Invalid(absl::StrCat("tensors '", before.name, "' and '", after.name, "' overlap"));
    }
  }
  return contents;
}

absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Open(const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->mapped_ = *std::move(mapped);
  auto contents = ParseGguf(file->mapped_->bytes(), path);
  if (!contents.ok()) return contents.status();
  file->contents_ = *std::move(contents);
  for (size_t i = 0; i < file->contents_.tensors.size(); ++i) {
    file->index_[file->contents_.tensors[i].name] = i;
  }
  return std::shared_ptr<const GgufFile>(std::move(file));
}

const GgufTensorInfo* GgufFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &contents_.tensors[it->second];
}

const GgufValue* GgufFile::FindValue(std::string_view key) const {
  const auto it = contents_.metadata.find(key);
  return it == contents_.metadata.end() ? nullptr : &it->second;
}

namespace {

absl::StatusOr<const GgufValue*> Lookup(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.FindValue(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(file.path(), ": no metadata key '", std::string(key), "'"));
  }
  return v;
}

absl::Status WrongType(const GgufFile& file, std::string_view key, const GgufValue& v,
                       std::string_view wanted) {
  return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata '", std::string(key),
                                                 "' is ", ValueTypeName(v.type), ", not ",
                                                 std::string(wanted)));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::Integer(std::string_view key) const {
  auto v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if (const int64_t* n = std::get_if<int64_t>(&(*v)->value)) return *n;
  return WrongType(*this, key, **v, "an integer below 2^63");
}

absl::StatusOr<double> GgufFile::Float(std::string_view key) const {
  auto v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if (const double* x = std::get_if<double>(&(*v)->value)) return *x;
  if (const int64_t* n = std::get_if<int64_t>(&(*v)->value)) return static_cast<double>(*n);
  return WrongType(*this, key, **v, "a number");
}

absl::StatusOr<bool> GgufFile::Bool(std::string_view key) const {
  auto v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if (const bool* b = std::get_if<bool>(&(*v)->value)) return *b;
  return WrongType(*this, key, **v, "a bool");
}

absl::StatusOr<std::string> GgufFile::String(std::string_view key) const {
  auto v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if (const std::string* s = std::get_if<std::string>(&(*v)->value)) return *s;
  return WrongType(*this, key, **v, "a string");
}

}  // namespace gpeserve::model
