// RemoveTree: deletes a file or a folder with everything in it, like std::filesystem::remove_all
// but through POSIX nftw(). The project does not call std::filesystem::remove_all: PyPI's
// libtorch (seen with torch 2.11) exports its own copy of that function, the dynamic loader binds
// our calls to it, and there it jumps to address 0 (scripts/cuda-check found it on a GPU
// machine). Plain C++.
//
// Thread-safety: as the file system; concurrent removals of one tree race as they would anyway.
#pragma once

#include <filesystem>

#include "absl/status/status.h"

namespace gpeserve::model {

// Removes `path` (a file, a symbolic link itself, or a folder and its contents, not following
// links). A missing path is OK. Errors name the entry that could not be removed.
absl::Status RemoveTree(const std::filesystem::path& path);

}  // namespace gpeserve::model
