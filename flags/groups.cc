#include "flags/groups.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/policy/profile.h"

namespace gpeserve::flags {

void AddModelFlags(FlagSet& flags, ModelFlags* model, std::string dir_help, bool with_device) {
  flags.Add("model", "DIR", std::move(dir_help), &model->dir);
  flags.Add("dtype", model::kServingDtypeChoices, model::kServingDtypeHelp, &model->options.dtype);
  if (with_device) flags.Add("device", "cpu|cuda", "device", &model->options.device);
  flags.Add("threads", "N", "CPU threads for the model (0 = all cores)", &model->options.threads,
            {.min = 0});
  flags.Add("cpu_activations", model::kCpuActivationChoices, model::kCpuActivationsHelp,
            &model->options.cpu_activations);
}

void AddAdapterFlags(FlagSet& flags, ModelFlags* model) {
  flags.Add("adapter", "DIR",
            "PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) to run on "
            "top of the model (its prompt.json instruction is the default); on the built-in "
            "model also a built-in adapter's name: de-en",
            &model->adapter);
  flags.Add("merge_adapter",
            "fold --adapter into the weights at load (no per-step cost; rounding differs "
            "slightly from the unmerged sum)",
            &model->merge_adapter);
  flags.AddCheck([model] {
    if (model->merge_adapter && !model->adapter) {
      return absl::InvalidArgumentError("--merge_adapter needs --adapter");
    }
    return absl::OkStatus();
  });
}

void AddLoraFlags(FlagSet& flags, model::AdapterConfig* config) {
  flags.Add("lora_r", "R", "rank of the LoRA updates", &config->r, {.min = 1});
  flags.Add("lora_alpha", "A", "LoRA alpha: the updates are scaled by alpha / r",
            &config->lora_alpha);
  flags.Add("use_rslora", "scale the LoRA updates by alpha / sqrt(r) (rank-stabilized)",
            &config->use_rslora);
  flags.AddParsed("lora_targets", "NAMES",
                  "comma-separated modules LoRA changes: q_proj, k_proj, v_proj, o_proj, "
                  "gate_proj, up_proj, down_proj (Phi-3: qkv_proj, gate_up_proj), embed_tokens, "
                  "lm_head, or all-linear",
                  absl::StrJoin(config->target_list, ","), [config](std::string_view text) {
                    config->target_list = absl::StrSplit(
                        absl::string_view(text.data(), text.size()), ',', absl::SkipEmpty());
                    if (config->target_list.empty()) {
                      return absl::InvalidArgumentError("takes at least one module name");
                    }
                    return absl::OkStatus();
                  });
}

void AddKvCacheDtypeFlag(FlagSet& flags, engine::EngineConfig* config) {
  flags.AddChoice("kv_cache_dtype",
                  "the KV cache's elements (attention computes in fp32 on the CPU either way); "
                  "auto: on the CPU a bf16 or fp16 model's own type, fp32 for the others; on "
                  "CUDA the activation dtype",
                  &config->kv_cache_dtype,
                  {{"auto", engine::KvCacheDtype::kAuto},
                   {"fp32", engine::KvCacheDtype::kF32},
                   {"bf16", engine::KvCacheDtype::kBF16},
                   {"fp16", engine::KvCacheDtype::kF16}});
}

void AddKvCacheFlags(FlagSet& flags, engine::EngineConfig* config) {
  flags.Add("kv_cache_memory", "BYTES", "KV cache size when --kv_blocks is 0",
            &config->kv_cache_memory, {.min = 1});
  flags.Add("kv_blocks", "N", "KV cache blocks (0: from --kv_cache_memory)", &config->kv_blocks,
            {.min = 0});
  flags.Add("block_size", "N", "tokens per KV block", &config->block_size, {.min = 1});
  AddKvCacheDtypeFlag(flags, config);
  flags.AddChoice("prefix_cache",
                  "on: prompt-prefix blocks stay cached after their session ends, for later "
                  "sessions, until their blocks are needed; off: shared only while held",
                  &config->prefix_cache, {{"on", true}, {"off", false}});
}

void AddSchedulerFlags(FlagSet& flags, engine::EngineConfig* config) {
  flags.Add("max_batch_tokens", "N", "tokens in one forward step",
            &config->scheduler.max_batch_tokens, {.min = 1});
  flags.Add("max_sessions_per_step", "N", "sessions in one forward step",
            &config->scheduler.max_sessions_per_step, {.min = 1});
  flags.AddChoice("fuse_reads",
                  "on: a session's read and the write it allows run in one forward step; "
                  "off: one piece per session per step",
                  &config->fuse_reads, {{"on", true}, {"off", false}});
  flags.Add("long_read_tokens", "N",
            "a read with more tokens left than this (a long prompt) is paced",
            &config->scheduler.long_read_tokens, {.min = 1});
  flags.Add("long_read_slowdown", "F",
            "pace long reads so that other sessions' steps take at most F times as long on "
            "average (0: no pacing)",
            &config->long_read_slowdown, {.min = 0});
  flags.AddCheck([config] {
    if (config->long_read_slowdown > 0 && config->long_read_slowdown < 1) {
      return absl::InvalidArgumentError("--long_read_slowdown takes 0 (off) or a number >= 1");
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<session::SessionOptions> SessionFlags::Resolve(
    const std::string& model_type, const std::string& chat_template,
    const std::optional<std::string>& adapter_instruction) const {
  auto name = policy::ResolveProfileName(profile, model_type, chat_template);
  if (!name.ok()) return name.status();
  auto loaded = policy::LoadProfile(*name);
  if (!loaded.ok()) return loaded.status();
  session::SessionOptions resolved = options;
  resolved.profile = *std::move(loaded);
  if (adapter_instruction) resolved.profile.instruction = *adapter_instruction;
  if (instruction) resolved.profile.instruction = *instruction;
  if (phi) resolved.profile.phi = *phi;
  return resolved;
}

void AddWaitKFlag(FlagSet& flags, int* wait_k) {
  flags.Add("wait_k", "K", "source units read before the first write", wait_k, {.min = 1});
}

void AddSplitFlag(FlagSet& flags, policy::SplitMode* split) {
  flags.AddChoice("split", "source unit", split,
                  {{"word", policy::SplitMode::kWord}, {"token", policy::SplitMode::kToken}});
}

void AddParadigmFlag(FlagSet& flags, session::Paradigm* paradigm) {
  flags.AddChoice("paradigm", "streaming paradigm", paradigm,
                  {{"gpe", session::Paradigm::kGpe},
                   {"reencode", session::Paradigm::kReencode},
                   {"interleaved", session::Paradigm::kInterleaved}});
}

void AddCompatFlag(FlagSet& flags, policy::Compat* compat) {
  flags.AddChoice("compat",
                  "reference: the reference evaluation code's stop and delay rules and output "
                  "text, token for token (docs/GPE.md 8)",
                  compat,
                  {{"none", policy::Compat::kNone}, {"reference", policy::Compat::kReference}});
}

void AddSessionFlags(FlagSet& flags, SessionFlags* session) {
  flags.Add("profile", "NAME|FILE",
            "prompt profile: auto (the model's chat format, read from its chat template), "
            "qwen2.5, qwen3, llama3, gemma2, phi3, or a JSON file",
            &session->profile);
  flags.Add("instruction", "TEXT", "override the profile's instruction", &session->instruction);
  flags.Add("phi", "N", "first target position id (default: the profile's)", &session->phi,
            {.min = 0});
  AddWaitKFlag(flags, &session->options.policy.wait_k);
  AddSplitFlag(flags, &session->options.policy.split);
  AddParadigmFlag(flags, &session->options.paradigm);
  AddCompatFlag(flags, &session->options.policy.compat);
  flags.Add("max_new_tokens", "N", "target tokens per session at most",
            &session->options.policy.max_new_tokens, {.min = 1});
}

void AddLongFormFlags(FlagSet& flags, LongFormFlags* long_form) {
  flags.Add("long_form",
            "one long-form session over the whole stream: cut into segments, each translated as "
            "a sentence session (docs/GPE.md 9)",
            &long_form->options.enabled);
  std::string shown;
  for (const std::string& mark : long_form->options.segmenter.sentence_marks) {
    shown += (shown.empty() ? "" : " ") + mark;
  }
  flags.AddParsed("sentence_marks", "\"M ...\"",
                  "long-form: marks that end a segment when a word ends in one (space-separated)",
                  shown, [long_form](std::string_view text) -> absl::Status {
                    std::vector<std::string> marks = absl::StrSplit(
                        absl::string_view(text.data(), text.size()), ' ', absl::SkipEmpty());
                    if (marks.empty()) return absl::InvalidArgumentError("no mark given");
                    long_form->options.segmenter.sentence_marks = std::move(marks);
                    return absl::OkStatus();
                  });
  flags.Add("max_segment_words", "N", "long-form: a segment is cut after this many words",
            &long_form->options.segmenter.max_segment_words, {.min = 1});
  flags.Add("context_segments", "N",
            "long-form: earlier segments each segment reads as context (0: each alone)",
            &long_form->options.context_segments, {.min = 0, .max = 8});
  flags.AddChoice("cut",
                  "long-form: a boundary after each item of the data (segments align with the "
                  "references), or sentence marks and max_segment_words alone",
                  &long_form->cut_by_marks, {{"boundary", false}, {"marks", true}});
}

void AddSamplingFlags(FlagSet& flags, sampler::SamplingParams* sampling) {
  flags.Add("temperature", "T", "sampling temperature (0: greedy)", &sampling->temperature,
            {.min = 0});
  flags.Add("top_k", "K", "keep the k most likely tokens (0: all)", &sampling->top_k, {.min = 0});
  flags.Add("top_p", "P", "nucleus sampling mass (0 or 1: all)", &sampling->top_p,
            {.min = 0, .max = 1});
  flags.Add("seed", "N", "sampling seed (default: one the server picks)", &sampling->seed);
}

}  // namespace gpeserve::flags
