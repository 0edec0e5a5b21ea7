#include "engine/formats/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace gpeserve::model {
namespace {

// GGUF bytes written field by field, as the spec lays them out.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    s_.append(raw, sizeof(T));
    return *this;
  }
  Bytes& U32(uint32_t v) { return Put(v); }
  Bytes& U64(uint64_t v) { return Put(v); }
  Bytes& Str(const std::string& v) {
    U64(v.size());
    s_ += v;
    return *this;
  }
  // A key and its value type.
  Bytes& Key(const std::string& key, GgufValue::Type type) {
    return Str(key).U32(static_cast<uint32_t>(type));
  }
  Bytes& PadTo(size_t alignment) {
    s_.append((alignment - s_.size() % alignment) % alignment, '\0');
    return *this;
  }
  Bytes& Raw(const std::string& raw) {
    s_ += raw;
    return *this;
  }
  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }

 private:
  std::string s_;
};

using Type = GgufValue::Type;

// The header and metadata of a file with every value type and a 64-byte alignment; `extra`
// adds metadata entries after them (counted in `extra_count`).
Bytes Header(uint32_t version, uint64_t tensors, const std::string& extra = "",
             uint64_t extra_count = 0) {
  Bytes b;
  b.U32(0x46554747).U32(version).U64(tensors).U64(15 + extra_count);
  b.Key("general.architecture", Type::kString).Str("llama");
  b.Key("general.alignment", Type::kUint32).U32(64);
  b.Key("u8", Type::kUint8).Put<uint8_t>(200);
  b.Key("i8", Type::kInt8).Put<int8_t>(-100);
  b.Key("u16", Type::kUint16).Put<uint16_t>(60000);
  b.Key("i16", Type::kInt16).Put<int16_t>(-30000);
  b.Key("i32", Type::kInt32).Put<int32_t>(-2000000000);
  b.Key("u64", Type::kUint64).U64(18000000000000000000ull);
  b.Key("i64", Type::kInt64).Put<int64_t>(-9000000000000000000ll);
  b.Key("f32", Type::kFloat32).Put<float>(1e-5f);
  b.Key("f64", Type::kFloat64).Put<double>(0.1);
  b.Key("yes", Type::kBool).Put<uint8_t>(1);
  b.Key("tokens", Type::kArray).U32(static_cast<uint32_t>(Type::kString)).U64(3);
  b.Str("a").Str("").Str("<|im_end|>");
  b.Key("scores", Type::kArray).U32(static_cast<uint32_t>(Type::kFloat32)).U64(2);
  b.Put<float>(-1.5f).Put<float>(2.0f);
  b.Key("nested", Type::kArray).U32(static_cast<uint32_t>(Type::kArray)).U64(2);
  b.U32(static_cast<uint32_t>(Type::kInt32)).U64(1).Put<int32_t>(7);
  b.U32(static_cast<uint32_t>(Type::kUint8)).U64(0);
  b.Raw(extra);
  return b;
}

// A tensor info.
void Tensor(Bytes& b, const std::string& name, std::vector<uint64_t> dims, GgmlType type,
            uint64_t offset) {
  b.Str(name).U32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) b.U64(d);
  b.U32(static_cast<uint32_t>(type)).U64(offset);
}

// A whole valid file: tensor "w" F32 [2, 4] (ggml dims {4, 2}) at 0, "q" Q8_0 {32, 1} at 64; it
// ends where q's data ends.
std::string ValidFile(uint32_t version) {
  Bytes b = Header(version, 2);
  Tensor(b, "w", {4, 2}, GgmlType::kF32, 0);
  Tensor(b, "q", {32, 1}, GgmlType::kQ8_0, 64);
  b.PadTo(64);
  for (int i = 0; i < 8; ++i) b.Put<float>(static_cast<float>(i));
  b.PadTo(64);
  b.Raw(std::string(34, '\x01'));
  return b.str();
}

TEST(GgufTest, ReadsEveryValueTypeAndTheTensorsOfVersions2And3) {
  for (uint32_t version : {2u, 3u}) {
    const std::string file = ValidFile(version);
    auto parsed = ParseGguf(file, "t.gguf");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const GgufContents& c = *parsed;
    EXPECT_EQ(c.version, version);
    EXPECT_EQ(c.alignment, 64u);
    ASSERT_EQ(c.metadata.size(), 15u);
    auto get = [&](const char* key) -> const GgufValue& { return c.metadata.at(key); };
    EXPECT_EQ(std::get<std::string>(get("general.architecture").value), "llama");
    EXPECT_EQ(std::get<int64_t>(get("u8").value), 200);
    EXPECT_EQ(std::get<int64_t>(get("i8").value), -100);
    EXPECT_EQ(std::get<int64_t>(get("u16").value), 60000);
    EXPECT_EQ(std::get<int64_t>(get("i16").value), -30000);
    EXPECT_EQ(std::get<int64_t>(get("i32").value), -2000000000);
    EXPECT_EQ(std::get<uint64_t>(get("u64").value), 18000000000000000000ull);
    EXPECT_EQ(std::get<int64_t>(get("i64").value), -9000000000000000000ll);
    EXPECT_EQ(std::get<double>(get("f32").value), static_cast<double>(1e-5f));
    EXPECT_TRUE(get("f32").is_float());
    EXPECT_EQ(std::get<double>(get("f64").value), 0.1);
    EXPECT_TRUE(std::get<bool>(get("yes").value));
    const auto& tokens = std::get<std::vector<GgufValue>>(get("tokens").value);
    EXPECT_EQ(get("tokens").element_type, Type::kString);
    ASSERT_EQ(tokens.size(), 3u);
    EXPECT_EQ(std::get<std::string>(tokens[2].value), "<|im_end|>");
    EXPECT_EQ(std::get<std::string>(tokens[1].value), "");
    const auto& scores = std::get<std::vector<GgufValue>>(get("scores").value);
    EXPECT_EQ(std::get<double>(scores[0].value), -1.5);
    const auto& nested = std::get<std::vector<GgufValue>>(get("nested").value);
    ASSERT_EQ(nested.size(), 2u);
    EXPECT_EQ(std::get<int64_t>(std::get<std::vector<GgufValue>>(nested[0].value)[0].value), 7);
    EXPECT_TRUE(std::get<std::vector<GgufValue>>(nested[1].value).empty());

    ASSERT_EQ(c.tensors.size(), 2u);
    const GgufTensorInfo& w = c.tensors[0];
    EXPECT_EQ(w.name, "w");
    EXPECT_EQ(w.shape(), (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(w.size, 32u);
    EXPECT_EQ(w.offset % 64, 0u);
    float values[8];
    std::memcpy(values, file.data() + w.offset, sizeof(values));
    EXPECT_EQ(values[5], 5.0f);
    const GgufTensorInfo& q = c.tensors[1];
    EXPECT_EQ(q.type, GgmlType::kQ8_0);
    EXPECT_EQ(q.size, 34u);
    EXPECT_EQ(q.offset, w.offset + 64);
    EXPECT_EQ(q.offset + q.size, file.size());
  }
}

// Every proper prefix of a valid file is a truncated file: an error, never a crash or a read
// past the end (the fuzz target checks the same on arbitrary bytes).
TEST(GgufTest, EveryTruncationIsDataLoss) {
  const std::string file = ValidFile(3);
  for (size_t n = 0; n < file.size(); ++n) {
    auto parsed = ParseGguf(std::string_view(file).substr(0, n), "cut.gguf");
    ASSERT_FALSE(parsed.ok()) << n;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << n << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find("cut.gguf"), std::string::npos);
  }
}

void ExpectError(const std::string& file, absl::StatusCode code, const std::string& part) {
  auto parsed = ParseGguf(file, "bad.gguf");
  ASSERT_FALSE(parsed.ok()) << part;
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_NE(parsed.status().message().find(part), std::string::npos) << parsed.status();
}

TEST(GgufTest, PreciseErrors) {
  const auto inv = absl::StatusCode::kInvalidArgument;
  const auto unimpl = absl::StatusCode::kUnimplemented;
  std::string file = ValidFile(3);
  file[0] = 'X';
  ExpectError(file, inv, "not a GGUF file");
  ExpectError(Bytes().U32(0x46554747).U32(1).U64(0).U64(0).str(), unimpl, "version 1");
  ExpectError(Bytes().U32(0x46554747).U32(4).U64(0).U64(0).str(), unimpl, "version 4");
  ExpectError(Bytes().U32(0x46554747).U32(0x03000000).U64(0).U64(0).str(), unimpl, "big-endian");
  {
    Bytes b = Header(3, 0, Bytes().Key("x", static_cast<Type>(13)).str(), 1);
    ExpectError(b.str(), inv, "'x': unknown value type 13");
  }
  {
    Bytes b = Header(3, 0, Bytes().Key("b", Type::kBool).Put<uint8_t>(2).str(), 1);
    ExpectError(b.str(), inv, "'b': a bool must be 0 or 1");
  }
  {
    Bytes b = Header(3, 0, Bytes().Key("u8", Type::kUint8).Put<uint8_t>(1).str(), 1);
    ExpectError(b.str(), inv, "'u8' appears twice");
  }
  {
    Bytes only;
    only.U32(0x46554747).U32(3).U64(0).U64(1).Key("general.alignment", Type::kUint32).U32(48);
    ExpectError(only.str(), inv, "power of two");
  }
  auto with_tensor = [](const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                        uint64_t offset) {
    Bytes b = Header(3, 1);
    b.Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) b.U64(d);
    b.U32(type).U64(offset);
    b.PadTo(64).Raw(std::string(4096, '\0'));
    return b.str();
  };
  ExpectError(with_tensor("t", {4}, 5, 0), unimpl, "tensor 't' has ggml type 5");
  ExpectError(with_tensor("t", {}, 0, 0), inv, "has 0 dimensions");
  ExpectError(with_tensor("t", {1, 1, 1, 1, 1}, 0, 0), inv, "has 5 dimensions");
  ExpectError(with_tensor("t", {33}, 8, 0), inv, "not whole Q8_0 blocks of 32");
  ExpectError(with_tensor("t", {4}, 0, 32), inv, "not a multiple of the 64-byte alignment");
  ExpectError(with_tensor("t", {1ull << 62, 8}, 0, 0), inv, "dimensions too large");
  ExpectError(with_tensor("t", {4096}, 0, 0), absl::StatusCode::kDataLoss, "data of tensor 't'");
  {
    Bytes b = Header(3, 2);
    Tensor(b, "a", {32}, GgmlType::kF32, 0);
    Tensor(b, "b", {32}, GgmlType::kF32, 64);  // a holds 128 bytes
    b.PadTo(64).Raw(std::string(256, '\0'));
    ExpectError(b.str(), inv, "tensors 'a' and 'b' overlap");
  }
  {
    Bytes b = Header(3, 2);
    Tensor(b, "a", {4}, GgmlType::kF32, 0);
    Tensor(b, "a", {4}, GgmlType::kF32, 64);
    b.PadTo(64).Raw(std::string(128, '\0'));
    ExpectError(b.str(), inv, "tensor 'a' appears twice");
  }
  {
    // An array longer than the bytes left: refused before anything is allocated for it.
    Bytes b = Header(3, 0, Bytes().Key("big", Type::kArray).U32(0).U64(1ull << 60).str(), 1);
    ExpectError(b.str(), absl::StatusCode::kDataLoss, "the array 'big'");
  }
}

TEST(GgufTest, OpenMapsTheFileAndReadsTypedMetadata) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     ("gpe_gguf_test_" + std::to_string(::getpid()) + ".gguf");
  { std::ofstream(path, std::ios::binary) << ValidFile(3); }
  auto file = GgufFile::Open(path.string());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  ASSERT_NE(f.Find("q"), nullptr);
  EXPECT_EQ(f.Find("missing"), nullptr);
  EXPECT_EQ(static_cast<const float*>(f.Data(*f.Find("w")))[3], 3.0f);
  EXPECT_EQ(*f.Integer("u16"), 60000);
  EXPECT_EQ(*f.Float("i32"), -2000000000.0);  // an integer where a float is asked: accepted
  EXPECT_TRUE(*f.Bool("yes"));
  EXPECT_EQ(*f.String("general.architecture"), "llama");
  EXPECT_EQ(f.Integer("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.Integer("general.architecture").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Integer("u64").status().code(), absl::StatusCode::kInvalidArgument);  // >= 2^63
  std::filesystem::remove(path);
  EXPECT_EQ(GgufFile::Open(path.string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpeserve::model
