#include "engine/formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // as the reference implementation

absl::Status Corrupt(std::string_view file, std::string_view message) {
  return absl::DataLossError(absl::StrCat(std::string(file), ": ", std::string(message)));
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I8") return DType::kI8;
  return absl::UnimplementedError(
      absl::StrCat("dtype '", std::string(name), "' is not supported (F32, BF16, F16, I8)"));
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI8:
      return "I8";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI8:
      return 1;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<TensorInfo>> ParseSafetensors(std::string_view file,
                                                         std::string_view file_name) {
  if (file.size() < 8) {
    return Corrupt(file_name, absl::StrCat("truncated: ", file.size(),
                                           " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(file[i]);
  if (header_len > kMaxHeaderBytes || header_len > file.size() - 8) {
    return Corrupt(file_name, absl::StrCat("header length ", header_len, " runs past the end ",
                                           "of the file (", file.size(), " bytes)"));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.substr(8, header_len));
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(file_name, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) return Corrupt(file_name, "header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = file.size() - data_start;
  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return Corrupt(file_name, absl::StrCat(where, ": expected {dtype, shape, data_offsets}"));
    }
    TensorInfo info;
    info.name = name;
    auto dtype = ParseDType(entry["dtype"].get<std::string>());
    if (!dtype.ok()) {
      return absl::Status(dtype.status().code(),
                          absl::StrCat(std::string(file_name), ": ", where, ": ",
                                       std::string(dtype.status().message())));
    }
    info.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40)) {
        return Corrupt(file_name, absl::StrCat(where, ": invalid shape"));
      }
      info.shape.push_back(d.get<int64_t>());
      numel *= static_cast<uint64_t>(d.get<int64_t>());
      if (numel > (uint64_t{1} << 40))
        return Corrupt(file_name, absl::StrCat(where, ": too large"));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return Corrupt(file_name, absl::StrCat(where, ": data_offsets must be non-negative"));
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return Corrupt(file_name,
                     absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                  "] out of range (data section is ", data_size, " bytes)"));
    }
    if (end - begin != numel * DTypeSize(info.dtype)) {
      return Corrupt(file_name, absl::StrCat(where, ": ", end - begin, " bytes for shape of ",
                                             numel, " ", DTypeName(info.dtype), " elements"));
    }
    info.offset = data_start + begin;
    info.size = end - begin;
    tensors.push_back(std::move(info));
  }
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    if (prev.size > 0 && by_offset[i]->size > 0 && prev.offset + prev.size > by_offset[i]->offset) {
      return Corrupt(file_name, absl::StrCat("tensors '", prev.name, "' and '", by_offset[i]->name,
                                             "' overlap"));
    }
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return tensors;
}

absl::StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapped_ = *std::move(mapped);
  auto tensors = ParseSafetensors(file->mapped_->bytes(), path);
  if (!tensors.ok()) return tensors.status();
  file->tensors_ = *std::move(tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const size_t bytes = static_cast<size_t>(numel) * DTypeSize(t.dtype);
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data section
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  char length[8];
  uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out.write(length, 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    out.write(static_cast<const char*>(t.data),
              static_cast<std::streamsize>(numel * DTypeSize(t.dtype)));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace gpeserve::model
