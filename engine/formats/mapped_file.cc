#include "engine/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* base = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": cannot mmap: ", std::strerror(errno)));
    }
    file->base_ = static_cast<const char*>(base);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
}

}  // namespace gpeserve::model
