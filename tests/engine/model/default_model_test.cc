#include "engine/model/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/attention.h"
#include "engine/util/remove_tree.h"
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

// `load()` run with TMPDIR set to `tmp` (created), then TMPDIR as it was.
template <typename Load>
auto WithTmpdir(const fs::path& tmp, Load load) {
  fs::create_directories(tmp);
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto loaded = load();
  old_tmpdir ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  return loaded;
}

// The binary carries exactly the committed models/default/ files (a stale embedding or a
// missing file fails here, not in a user's server).
TEST(DefaultModelTest, EmbeddedFilesAreTheCommittedOnes) {
  const fs::path dir = fs::path(GPESERVE_SOURCE_DIR) / "models" / "default";
  const std::vector<EmbeddedFile> files = DefaultModelFiles();
  ASSERT_EQ(files.size(), 8u);  // the model's five, the de-en adapter's three
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
  auto built_in = WithTmpdir(tmp, [] { return LoadDefaultModel({.threads = 2}); });
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
  EXPECT_TRUE(RemoveTree(out).ok());
}

// The built-in de-en adapter loads as its written folder does, carries the instruction it was
// trained with, changes the model's output, and leaves no temporary folder behind; another name
// is NotFound.
TEST(DefaultModelTest, BuiltInAdapterLoadsLikeItsWrittenFolder) {
  const fs::path out =
      fs::path(::testing::TempDir()) / ("gpe_default_adapter_test_" + std::to_string(::getpid()));
  ASSERT_TRUE(WriteDefaultModel(out.string()).ok());
  auto model = Model::Load(out.string(), {.threads = 2});
  ASSERT_TRUE(model.ok()) << model.status();
  auto from_folder = LoadAdapter((out / "de-en").string(), **model, "de-en");
  ASSERT_TRUE(from_folder.ok()) << from_folder.status();
  const fs::path tmp = out / "tmp";
  auto built_in = WithTmpdir(tmp, [&] { return LoadDefaultAdapter("de-en", **model); });
  ASSERT_TRUE(built_in.ok()) << built_in.status();
  EXPECT_TRUE(fs::is_empty(tmp)) << "LoadDefaultAdapter left files in " << tmp;
  EXPECT_EQ((*built_in)->name, "de-en");
  ASSERT_TRUE((*built_in)->config.instruction.has_value());
  EXPECT_EQ(*(*built_in)->config.instruction,
            "Translate the following German paragraph to English");
  EXPECT_EQ((*built_in)->parameters, (*from_folder)->parameters);

  auto ids = (*model)->tokenizer()->Encode("Der Hund sieht die Katze.", {});
  ASSERT_TRUE(ids.ok());
  const int64_t n = static_cast<int64_t>(ids->size());
  const torch::Tensor tokens = torch::tensor(std::vector<int64_t>(ids->begin(), ids->end()));
  auto run = [&](const Adapter* adapter) {
    DenseAttention attention({}, {}, DenseAttention::CausalMask(n));
    std::vector<AdapterSpan> spans;
    if (adapter != nullptr) spans.push_back({adapter, 0, n});
    auto logits = (*model)->Forward(tokens, torch::arange(n), torch::arange(n), attention, spans);
    EXPECT_TRUE(logits.ok()) << logits.status();
    return logits.ok() ? *logits : torch::Tensor();
  };
  const torch::Tensor x = run(built_in->get()), y = run(from_folder->get()), base = run(nullptr);
  EXPECT_TRUE(torch::equal(x, y));
  EXPECT_GT((x - base).abs().max().item<float>(), 1e-2);

  auto unknown = LoadDefaultAdapter("fr-en", **model);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("de-en"), std::string::npos) << unknown.status();
  EXPECT_TRUE(RemoveTree(out).ok());
}

}  // namespace
}  // namespace gpeserve::model
