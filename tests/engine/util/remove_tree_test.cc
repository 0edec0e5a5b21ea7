// RemoveTree against what std::filesystem::remove_all does (which the project cannot call: see
// remove_tree.h): nested folders and files go, a symbolic link goes without what it points to,
// a missing path is fine, and an entry that cannot be removed is named in the error.
#include "engine/util/remove_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

TEST(RemoveTreeTest, RemovesFoldersFilesAndLinksNotTheirTargets) {
  const fs::path root =
      fs::path(::testing::TempDir()) / ("gpe_remove_tree_test_" + std::to_string(::getpid()));
  const fs::path tree = root / "tree", outside = root / "outside";
  fs::create_directories(tree / "a" / "b" / "c");
  fs::create_directories(outside);
  std::ofstream(tree / "top.txt") << "x";
  std::ofstream(tree / "a" / "b" / "c" / "deep.bin") << "y";
  std::ofstream(outside / "keep.txt") << "z";
  fs::create_directory_symlink(outside, tree / "a" / "link");
  fs::create_symlink(outside / "keep.txt", tree / "file_link");

  ASSERT_TRUE(RemoveTree(tree).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(outside / "keep.txt")) << "a link's target was removed";
  EXPECT_TRUE(RemoveTree(tree).ok()) << "a missing path is not an error";

  std::ofstream(root / "file.txt") << "w";
  EXPECT_TRUE(RemoveTree(root / "file.txt").ok());
  EXPECT_FALSE(fs::exists(root / "file.txt"));

  if (::geteuid() != 0) {  // root removes anything: the refusal is testable only without it
    fs::create_directories(root / "locked" / "inner");
    std::ofstream(root / "locked" / "inner" / "f") << "v";
    ::chmod((root / "locked" / "inner").c_str(), 0500);
    const absl::Status refused = RemoveTree(root / "locked");
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("inner"), std::string::npos) << refused;
    ::chmod((root / "locked" / "inner").c_str(), 0700);
  }
  EXPECT_TRUE(RemoveTree(root).ok());
  EXPECT_FALSE(fs::exists(root));
}

}  // namespace
}  // namespace gpeserve::model
