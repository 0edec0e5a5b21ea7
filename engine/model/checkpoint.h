// A model checkpoint as a user holds it, opened for loading: a Hugging Face folder (config.json,
// model.safetensors or the shards of model.safetensors.index.json) or one GGUF file (llama.cpp's
// format: the configuration in its metadata, the tensors under llama.cpp's names, F32, F16,
// BF16 or quantized in ggml's blocks). Either way the tensors are found through WeightLayout's
// specs and come back in Hugging Face's layout: shapes rows-first, GGUF's Llama q/k rows put
// back in Hugging Face's rotary order, Gemma's norms without the 1 llama.cpp adds. A multimodal
// Gemma 3 folder (Gemma3ForConditionalGeneration) serves its text model: the layout's names found
// under the language model's prefix, as either transformers vintage saves it.
//
// Thread-safety: immutable after Open; the mapped files live as long as the Checkpoint (the
// tensors Load returns may be views of them).
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/config.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "engine/model/weight_layout.h"

namespace gpeserve::model {

class Checkpoint {
 public:
  // Opens `path`: a GGUF file (a regular file), otherwise a folder. Errors name the file.
  static absl::StatusOr<std::shared_ptr<const Checkpoint>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  bool is_gguf() const { return gguf_ != nullptr; }
  // The GGUF file; null for a folder.
  const GgufFile* gguf() const { return gguf_.get(); }
  // From config.json (+ generation_config.json), or from the GGUF metadata.
  const ModelConfig& config() const { return config_; }
  // How the embedding is stored, which --dtype auto follows: a GGUF file's quantized types
  // count as F32 (they are dequantized to it).
  absl::StatusOr<DType> EmbeddingDType() const;
  // True for a GGUF file with a matrix in a quantized type (not F32, F16 or BF16).
  bool has_quantized_matrices() const { return has_quantized_matrices_; }
  // The GGUF type of the tensor `spec` (NotFound if absent; FailedPrecondition for a folder).
  absl::StatusOr<GgmlType> GgufType(const WeightSpec& spec) const;

  // The tensor `spec` with exactly its shape, in `dtype` on `device` (a view of the mapping
  // where nothing changes). int8 (a gpe quantize folder) is never converted to or from.
  absl::StatusOr<torch::Tensor> Load(const WeightSpec& spec, torch::ScalarType dtype,
                                     torch::Device device) const;
  // The float32 row scales of an int8 matrix (gpe quantize folders: "<name>_scale").
  absl::StatusOr<torch::Tensor> LoadScale(const WeightSpec& spec, torch::Device device) const;
  // A GGUF matrix's blocks as they are: uint8 [rows, bytes of a row] on the CPU (a view of the
  // mapping, or a copy where the Llama q/k rows are reordered).
  absl::StatusOr<torch::Tensor> LoadBlocks(const WeightSpec& spec) const;

 private:
  Checkpoint() = default;
  absl::StatusOr<torch::Tensor> LoadSafetensors(const std::string& name,
                                                const std::vector<int64_t>& shape,
                                                torch::ScalarType dtype,
                                                torch::Device device) const;
  absl::StatusOr<torch::Tensor> LoadGguf(const WeightSpec& spec, torch::ScalarType dtype,
                                         torch::Device device) const;
  // The tensor `spec` in the GGUF file, its shape checked.
  absl::StatusOr<const GgufTensorInfo*> FindGguf(const WeightSpec& spec) const;
  // Llama's q/k rows back in Hugging Face's order (a no-op for every other tensor).
  torch::Tensor UndoInterleave(const WeightSpec& spec, torch::Tensor t) const;
  // Where a folder holds the layout's tensor `name` ("model.*", "lm_head.*").
  std::string StoredName(const std::string& name) const;
  // A multimodal folder: which of the two layouts its files use.
  absl::Status FindLanguageModel();

  std::string path_;
  ModelConfig config_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;  // a folder's
  std::shared_ptr<const GgufFile> gguf_;                       // or a GGUF file
  bool has_quantized_matrices_ = false;
  // The stored names of the layout's "model." and "lm_head." (a multimodal folder's differ).
  std::string model_prefix_ = "model.", head_prefix_ = "lm_head.";
};

}  // namespace gpeserve::model
