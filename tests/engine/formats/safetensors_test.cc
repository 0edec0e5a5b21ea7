#include "engine/formats/safetensors.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file with an 8-byte header length prefix around `header`, then `data_bytes` zero bytes.
std::string Raw(const std::string& header, size_t data_bytes) {
  std::string file(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return file + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, WriteThenOpenRoundTrips) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<uint16_t> b = {0x3F80, 0x4000};  // bf16 1.0, 2.0
  const std::string path = ::testing::TempDir() + "/roundtrip.safetensors";
  ASSERT_TRUE(WriteSafetensors(
                  path, {{"a", DType::kF32, {2, 3}, a.data()}, {"b", DType::kBF16, {2}, b.data()}},
                  {{"format", "pt"}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* ta = (*file)->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(std::memcmp((*file)->Data(*ta), a.data(), 24), 0);
  const TensorInfo* tb = (*file)->Find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp((*file)->Data(*tb), b.data(), 4), 0);
  EXPECT_EQ((*file)->Find("c"), nullptr);
}

struct CorruptCase {
  std::string name;
  std::string file;
  absl::StatusCode code;
  std::string message_part;
};

TEST(SafetensorsTest, CorruptFilesGiveSpecificErrors) {
  const std::string ok_entry = R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::vector<CorruptCase> cases = {
      {"short", "abc", absl::StatusCode::kDataLoss, "truncated: 3 bytes"},
      {"header past end", Raw("{}", 0).substr(0, 8) + "{", absl::StatusCode::kDataLoss,
       "header length 2 runs past the end"},
      {"not json", Raw("{nope", 8), absl::StatusCode::kDataLoss, "header is not valid JSON"},
      {"not object", Raw("[1]", 0), absl::StatusCode::kDataLoss, "not a JSON object"},
      {"unknown dtype", Raw(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8),
       absl::StatusCode::kUnimplemented, "tensor 'w': dtype 'I64' is not supported"},
      {"out of range", Raw("{" + ok_entry + "}", 4), absl::StatusCode::kDataLoss,
       "tensor 'w': data_offsets [0, 8] out of range"},
      {"size mismatch", Raw(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
       absl::StatusCode::kDataLoss, "tensor 'w': 8 bytes for shape of 3 F32"},
      {"negative shape",
       Raw(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0),
       absl::StatusCode::kDataLoss, "tensor 'w': invalid shape"},
      {"missing field", Raw(R"({"w": {"dtype": "F32", "shape": [2]}})", 8),
       absl::StatusCode::kDataLoss, "expected {dtype, shape, data_offsets}"},
      {"overlap",
       Raw("{" + ok_entry + R"(, "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
           12),
       absl::StatusCode::kDataLoss, "overlap"},
  };
  for (const CorruptCase& c : cases) {
    auto parsed = ParseSafetensors(c.file, "m.safetensors");
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), c.code) << c.name << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find("m.safetensors: "), std::string::npos) << c.name;
    EXPECT_NE(parsed.status().message().find(c.message_part), std::string::npos)
        << c.name << ": " << parsed.status();
  }
  EXPECT_TRUE(ParseSafetensors(Raw("{" + ok_entry + "}", 8), "m").ok());
}

TEST(SafetensorsTest, RandomCorruptionNeverCrashes) {
  const std::vector<float> a(16, 1.0f);
  const std::string path = ::testing::TempDir() + "/fuzz.safetensors";
  ASSERT_TRUE(WriteSafetensors(
                  path, {{"a", DType::kF32, {4, 4}, a.data()}, {"b", DType::kF32, {16}, a.data()}})
                  .ok());
  const std::string original = ReadAll(path);
  std::mt19937 rng(5);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string file = original;
    for (int i = 0, n = 1 + rng() % 4; i < n; ++i) {
      file[rng() % file.size()] = static_cast<char>(rng() % 256);
    }
    if (rng() % 4 == 0) file.resize(rng() % file.size());
    auto parsed = ParseSafetensors(file, "fuzz");
    if (!parsed.ok()) continue;
    ++accepted;
    for (const TensorInfo& t : *parsed) {  // whatever is accepted lies inside the file
      EXPECT_LE(t.offset + t.size, file.size());
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside the data section keep the file valid
}

TEST(SafetensorsTest, OpenMissingFileNamesIt) {
  auto file = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/model.safetensors"), std::string::npos);
}

TEST(SafetensorsTest, ShapeStringListsDimensions) {
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({7}), "[7]");
  EXPECT_EQ(ShapeString({2, 0, 151936}), "[2, 0, 151936]");
}

}  // namespace
}  // namespace gpeserve::model
