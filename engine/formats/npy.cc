#include "engine/formats/npy.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {

absl::Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                             const float* data) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    absl::StrAppend(&dims, d, ",");
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();  // (n,) keeps its comma; (a, b) does not need one
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace gpeserve::model
