// The flags several binaries share, each group bound to the configuration struct it fills, so
// that a flag has one name, one help text and one default (the struct's) everywhere:
//   model     --model --dtype --device --threads        gpeserve, gpe eval/logits/bench*
//   adapter   --adapter --merge_adapter                  gpe eval/logits
//   LoRA      --lora_r --lora_alpha --use_rslora --lora_targets  gpe make-adapter/train
//   KV cache  --block_size --kv_blocks --kv_cache_memory gpeserve, gpe eval
//   scheduler --max_batch_tokens --max_sessions_per_step --long_read_tokens
//             --long_read_slowdown                       gpeserve, gpe eval, gpe bench
//   session   --profile --instruction --phi --wait_k --split --paradigm --compat
//             --max_new_tokens                           gpe eval
//   sampling  --temperature --top_k --top_p --seed       gpe-client
// A binary that wants another default sets the struct's field before adding the group.
//
// Thread-safety: as FlagSet (used once in main).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/formats/adapter_config.h"
#include "engine/model/options.h"
#include "engine/sampler/sampler.h"
#include "engine/session/segmented_session.h"
#include "engine/session/stream_session.h"
#include "flags/flags.h"

namespace gpeserve::flags {

// The model a command loads.
struct ModelFlags {
  std::optional<std::string> dir;  // unset: the built-in default model
  model::ModelOptions options;
  // AddAdapterFlags: a PEFT LoRA adapter folder run on top of the model; merged into its
  // weights at load when merge_adapter.
  std::optional<std::string> adapter;
  bool merge_adapter = false;
};
inline constexpr char kModelDirHelp[] =
    "Hugging Face model folder, or a GGUF file (default: the built-in English-to-German model)";
// --model (with `dir_help`), --dtype, --device (unless !with_device), --threads.
void AddModelFlags(FlagSet& flags, ModelFlags* model, std::string dir_help = kModelDirHelp,
                   bool with_device = true);
// --adapter DIR, --merge_adapter.
void AddAdapterFlags(FlagSet& flags, ModelFlags* model);
// The shape of a LoRA adapter to make or train: --lora_r, --lora_alpha, --use_rslora,
// --lora_targets.
void AddLoraFlags(FlagSet& flags, model::AdapterConfig* config);

// --block_size, --kv_blocks, --kv_cache_memory, --prefix_cache, --kv_cache_dtype.
void AddKvCacheFlags(FlagSet& flags, engine::EngineConfig* config);
// --kv_cache_dtype alone (where the blocks follow from other flags).
void AddKvCacheDtypeFlag(FlagSet& flags, engine::EngineConfig* config);
// --max_batch_tokens, --max_sessions_per_step, --long_read_tokens, --long_read_slowdown.
void AddSchedulerFlags(FlagSet& flags, engine::EngineConfig* config);

// What a session runs: its prompt profile and its policy.
struct SessionFlags {
  std::string profile = "auto";            // a built-in profile's name, a JSON file, or auto
  std::optional<std::string> instruction;  // unset: the profile's
  std::optional<int64_t> phi;              // unset: the profile's
  session::SessionOptions options;         // policy and paradigm; the profile is Resolve's
  // The options with the profile loaded (auto: the one the model's `chat_template` follows, or
  // without one its config.json `model_type`'s; policy::ResolveProfileName) and the instruction
  // and phi applied. The instruction: --instruction, else `adapter_instruction` (the adapter's
  // prompt.json), else the profile's.
  absl::StatusOr<session::SessionOptions> Resolve(
      const std::string& model_type, const std::string& chat_template,
      const std::optional<std::string>& adapter_instruction = std::nullopt) const;
};
// --profile, --instruction, --phi, --wait_k, --split, --paradigm (gpe, reencode, interleaved),
// --compat, --max_new_tokens.
void AddSessionFlags(FlagSet& flags, SessionFlags* session);
// The single flags of that group, for binaries that take only some of them.
void AddWaitKFlag(FlagSet& flags, int* wait_k);
void AddSplitFlag(FlagSet& flags, policy::SplitMode* split);
void AddParadigmFlag(FlagSet& flags, session::Paradigm* paradigm);
void AddCompatFlag(FlagSet& flags, policy::Compat* compat);

// A long-form session (docs/GPE.md 9) as gpe eval and gpe-client stream/eval run one.
struct LongFormFlags {
  session::LongFormOptions options;  // enabled by --long_form
  // How the data set's items are cut into segments: the client sends a boundary after each
  // item (kBoundary), or the stream is cut by sentence marks and max_segment_words alone.
  bool cut_by_marks = false;
};
// --long_form, --sentence_marks, --max_segment_words, --context_segments, --cut (boundary|marks).
void AddLongFormFlags(FlagSet& flags, LongFormFlags* long_form);

// --temperature, --top_k, --top_p, --seed (bounds only; the engine validates the whole at Open).
void AddSamplingFlags(FlagSet& flags, sampler::SamplingParams* sampling);

}  // namespace gpeserve::flags
