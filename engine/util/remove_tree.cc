#include "engine/util/remove_tree.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {
namespace {

// The first entry that could not be removed (nftw's callback takes no user data).
thread_local std::string failed_entry;
thread_local int failed_errno = 0;

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) != 0 && errno != ENOENT) {
    failed_entry = path;
    failed_errno = errno;
    return 1;  // stops the walk
  }
  return 0;
}

absl::Status ErrnoError(int error, const std::string& entry) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("cannot remove ", entry, ": ", std::strerror(error)));
}

}  // namespace

absl::Status RemoveTree(const std::filesystem::path& tree) {
  const std::string path = tree.string();
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError(errno, path);
  }
  failed_entry.clear();
  failed_errno = 0;
  // Depth first (contents before their folder), not following symbolic links, not leaving the
  // file system.
  const int walked = ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (walked == 0) return absl::OkStatus();
  if (!failed_entry.empty()) {
    return ErrnoError(failed_errno, failed_entry);
  }
  return ErrnoError(errno, path);
}

}  // namespace gpeserve::model
