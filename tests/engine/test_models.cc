#include "tests/engine/test_models.h"

#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::testing {
namespace {

// A crash in a test binary prints its stack (symbol names where the binary was linked with
// -rdynamic, as scripts/cuda-check links them) before the default action: the unwound frames,
// then the faulting instruction and the words on the stack, for when unwinding stops at once
// (a jump to an address with no unwind information).
void PrintStackAndDie(int signal, siginfo_t* info, void* context) {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  static const char header[] = "\n*** fatal signal in a test; stack:\n";
  (void)!::write(STDERR_FILENO, header, sizeof(header) - 1);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  char line[96];
  const int len =
      std::snprintf(line, sizeof(line), "*** fault address %p, instruction:\n", info->si_addr);
  (void)!::write(STDERR_FILENO, line, static_cast<size_t>(len));
  void* rip = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  ::backtrace_symbols_fd(&rip, 1, STDERR_FILENO);
  static const char words[] = "*** words on the stack:\n";
  (void)!::write(STDERR_FILENO, words, sizeof(words) - 1);
  ::backtrace_symbols_fd(reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]), 24,
                         STDERR_FILENO);
#endif
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

[[maybe_unused]] const bool kStackOnCrash = [] {
  struct sigaction action = {};
  action.sa_sigaction = PrintStackAndDie;
  action.sa_flags = SA_SIGINFO;
  ::sigaction(SIGSEGV, &action, nullptr);
  ::sigaction(SIGBUS, &action, nullptr);
  return true;
}();

}  // namespace

std::string TestDevice() {
  const char* device = std::getenv("GPESERVE_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

std::vector<model::MakeModelOptions> TestFamilies() {
  return {
      {.arch = "qwen2"},
      {.arch = "llama"},
      {.arch = "mistral", .sliding_window = 6},
      {.arch = "gemma2",
       .sliding_window = 8,
       .attn_logit_softcapping = 1.0,
       .final_logit_softcapping = 3.0},
      {.arch = "qwen3", .sliding_window = 7, .max_window_layers = 1},
      // Layers 0 and 2 local (windowed, base 1e4), 1 global (base 1e6, linear scaling).
      {.arch = "gemma3",
       .num_layers = 3,
       .rope_scaling = "linear",
       .sliding_window = 5,
       .sliding_window_pattern = 2,
       .final_logit_softcapping = 3.0},
      {.arch = "phi3",
       .rope_scaling = "longrope",
       .sliding_window = 9,
       .partial_rotary_factor = 0.5,
       .original_max_position_embeddings = 24},
  };
}

std::string WriteTinyChatModel(uint64_t seed, const std::string& dir_name,
                               model::MakeModelOptions family) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_name);
  fs::create_directories(dir / "tok");
  std::ofstream((dir / "tok" / "tokenizer.json").string())
      << tokenizer::testing::ByteLevelJson(
             {}, {},
             nlohmann::json::array({tokenizer::testing::Added(256, "<|im_start|>", true),
                                    tokenizer::testing::Added(257, "<|im_end|>", true)}))
             .dump();
  std::ofstream((dir / "tok" / "tokenizer_config.json").string())
      << R"({"eos_token": "<|im_end|>"})";
  model::MakeModelOptions o = std::move(family);
  if (o.arch.empty()) o.arch = "qwen2";
  o.tokenizer_dir = (dir / "tok").string();
  o.seed = seed;
  o.init_std = 0.3;
  const std::string out = (dir / (o.arch + std::to_string(seed))).string();
  const absl::Status made = model::MakeModel(o, out);
  EXPECT_TRUE(made.ok()) << made;
  return out;
}

std::shared_ptr<const model::Model> TinyChatModel(uint64_t seed, model::MakeModelOptions family) {
  namespace fs = std::filesystem;
  // One folder per process: test binaries run in parallel, and rewriting a safetensors file
  // that another process has memory-mapped would crash it (SIGBUS).
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_tiny_chat_models_" + std::to_string(::getpid()));
  const std::string out = WriteTinyChatModel(seed, dir.string(), std::move(family));
  auto m = model::Model::Load(out, {.device = TestDevice(), .threads = 2});
  EXPECT_TRUE(m.ok()) << m.status();
  // The loaded model keeps its mapping of the removed file.
  EXPECT_TRUE(model::RemoveTree(dir).ok());
  return m.ok() ? *m : nullptr;
}

}  // namespace gpeserve::testing
