#include "engine/model/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/attention.h"
#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The binary carries exactly the committed models/default/ files (a stale embedding or a
// missing file fails here, not in a user's server).
TEST(DefaultModelTest, EmbeddedFilesAreTheCommittedOnes) {
  const fs::path dir = fs::path(GPESERVE_SOURCE_DIR) / "models" / "default";
  const std::vector<EmbeddedFile> files = DefaultModelFiles();
  ASSERT_EQ(files.size(), 5u);
  for (const EmbeddedFile& file : files) {
    ASSERT_TRUE(fs::exists(dir / file.name)) << file.name;
    EXPECT_EQ(file.bytes.size(), fs::file_size(dir / file.name)) << file.name;
    EXPECT_TRUE(file.bytes == ReadAll(dir / file.name)) << file.name << " differs";
  }
}

// LoadDefaultModel gives the model that a written-out folder gives, with its tokenizer, and
// leaves no temporary folder behind.
TEST(DefaultModelTest, LoadsLikeItsWrittenFolder) {
  const fs::path out =
      fs::path(::testing::TempDir()) / ("gpe_default_model_test_" + std::to_string(::getpid()));
  ASSERT_TRUE(WriteDefaultModel(out.string()).ok());
  auto from_folder = Model::Load(out.string(), {.threads = 2});
  ASSERT_TRUE(from_folder.ok()) << from_folder.status();
  // It is committed in bf16 (half the bytes in every binary).
  EXPECT_EQ((*from_folder)->config().torch_dtype, "bfloat16");
  // A private TMPDIR: whatever LoadDefaultModel leaves behind would be found there.
  const fs::path tmp = out / "tmp";
  fs::create_directories(tmp);
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto built_in = LoadDefaultModel({.threads = 2});
  old_tmpdir ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  ASSERT_TRUE(built_in.ok()) << built_in.status();
  EXPECT_TRUE(fs::is_empty(tmp)) << "LoadDefaultModel left files in " << tmp;
  ASSERT_NE((*built_in)->tokenizer(), nullptr);
  EXPECT_EQ((*built_in)->config().num_layers, (*from_folder)->config().num_layers);
  auto ids = (*built_in)->tokenizer()->Encode("Der Hund sieht die Katze.", {});
  ASSERT_TRUE(ids.ok());
  const int64_t n = static_cast<int64_t>(ids->size());
  const torch::Tensor tokens = torch::tensor(std::vector<int64_t>(ids->begin(), ids->end()));
  DenseAttention a({}, {}, DenseAttention::CausalMask(n)), b({}, {}, DenseAttention::CausalMask(n));
  auto x = (*built_in)->Forward(tokens, torch::arange(n), torch::arange(n), a);
  auto y = (*from_folder)->Forward(tokens, torch::arange(n), torch::arange(n), b);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_TRUE(torch::equal(*x, *y));
  fs::remove_all(out);
}

}  // namespace
}  // namespace gpeserve::model
