// gpe bench-forward: decode-step and prefill time of a model on this machine, next to the
// memory roofline measured in the same run.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/model/make_model.h"
#include "engine/model/model.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `runs` calls of `fn` after one warm-up call.
template <typename Fn>
double MedianSeconds(int runs, Fn fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int BenchForwardCommand(int argc, char** argv, int first) {
  Args args("gpe bench-forward (--preset NAME | --model DIR) [options]",
            "Times a single-token decode step (with --context cached tokens) and a prefill of\n"
            "--prefill tokens, and compares the decode step with the memory roofline: the\n"
            "weight bytes one step reads divided by the copy bandwidth measured in this run.");
  args.AddString("preset", "NAME", "make a random-weight model of this preset (qwen2.5-0.5b, ...)");
  args.AddString("arch", "qwen2|llama|mistral", "architecture for --preset", "qwen2");
  args.AddString("model", "DIR", "an existing model folder instead of --preset");
  args.AddString("dtype", "fp32|bf16|fp16", "serving dtype", "bf16");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  args.AddString("context", "N", "cached tokens the decode step attends to", "128");
  args.AddString("prefill", "N", "tokens in the prefill", "512");
  args.AddString("runs", "N", "timed runs (median)", "10");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  int threads = 0, context = 0, prefill = 0, runs = 0;
  if (!absl::SimpleAtoi(*args.Get("threads"), &threads) ||
      !absl::SimpleAtoi(*args.Get("context"), &context) ||
      !absl::SimpleAtoi(*args.Get("prefill"), &prefill) ||
      !absl::SimpleAtoi(*args.Get("runs"), &runs) || context < 0 || prefill < 1 || runs < 1) {
    std::cerr << "gpe: --threads, --context, --prefill and --runs take whole numbers\n";
    return 2;
  }
  std::string dir;
  std::filesystem::path temp;
  if (auto model = args.Get("model")) {
    dir = *model;
  } else if (auto preset = args.Get("preset")) {
    temp = std::filesystem::temp_directory_path() / absl::StrCat("gpe-bench-", ::getpid());
    model::MakeModelOptions o;
    o.arch = *args.Get("arch");
    o.preset = *preset;
    o.dtype = *args.Get("dtype") == "fp32"   ? model::DType::kF32
              : *args.Get("dtype") == "fp16" ? model::DType::kF16
                                             : model::DType::kBF16;
    std::cerr << "gpe: writing a random " << *preset << " model to " << temp << "\n";
    if (absl::Status s = model::MakeModel(o, temp.string()); !s.ok()) {
      std::cerr << "gpe: " << s.message() << "\n";
      return 1;
    }
    dir = temp.string();
  } else {
    std::cerr << "gpe: give --preset NAME or --model DIR\n\n" << args.Help();
    return 2;
  }
  auto loaded = model::Model::Load(dir, {.dtype = *args.Get("dtype"), .threads = threads});
  if (!temp.empty()) std::filesystem::remove_all(temp);  // the mapping stays valid
  if (!loaded.ok()) {
    std::cerr << "gpe: " << loaded.status().message() << "\n";
    return 1;
  }
  const model::Model& m = **loaded;
  const model::ModelConfig& c = m.config();
  const auto elem = torch::elementSize(m.dtype());
  // A decode step reads every weight once, but only one row of an untied embedding.
  const int64_t embed_bytes = c.vocab_size * c.hidden_size * static_cast<int64_t>(elem);
  const int64_t decode_bytes =
      m.weight_bytes() - (c.tie_word_embeddings ? 0 : embed_bytes - c.hidden_size * elem);

  // Memory bandwidth with the same threads, on a buffer as large as the weights: copy (bytes
  // read + bytes written, as STREAM counts it) and read-only (a sum).
  const int64_t buffer_bytes = std::max<int64_t>(decode_bytes, int64_t{256} << 20);
  torch::Tensor src = torch::ones({buffer_bytes / 4}, torch::kFloat32);
  torch::Tensor dst = torch::empty_like(src);
  const double copy_s = MedianSeconds(5, [&] { dst.copy_(src); });
  const double bandwidth = 2.0 * buffer_bytes / copy_s;
  const double read_s = MedianSeconds(5, [&] { src.sum().item<float>(); });
  const double read_bandwidth = buffer_bytes / read_s;
  src = dst = torch::Tensor();

  // Decode: one token attending to `context` cached keys per layer.
  std::vector<torch::Tensor> past_k, past_v;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    past_k.push_back(torch::randn({context, c.num_kv_heads, c.head_dim}).to(m.dtype()));
    past_v.push_back(torch::randn({context, c.num_kv_heads, c.head_dim}).to(m.dtype()));
  }
  const torch::Tensor one = torch::tensor({int64_t{42}});
  const torch::Tensor pos = torch::tensor({int64_t{context}});
  const torch::Tensor rows = torch::tensor({int64_t{0}});
  bool ok = true;
  const double decode_s = MedianSeconds(runs, [&] {
    model::DenseAttention attn(past_k, past_v, torch::ones({1, context + 1}, torch::kBool));
    ok &= m.Forward(one, pos, rows, attn).ok();
  });
  // Prefill: `prefill` tokens, causal, logits for the last one.
  const torch::Tensor tokens = torch::randint(c.vocab_size, {prefill}, torch::kInt64);
  const double prefill_s = MedianSeconds(std::max(1, runs / 5), [&] {
    model::DenseAttention attn({}, {}, model::DenseAttention::CausalMask(prefill));
    ok &=
        m.Forward(tokens, torch::arange(prefill), torch::tensor({int64_t{prefill - 1}}), attn).ok();
  });
  if (!ok) {
    std::cerr << "gpe: a forward pass failed\n";
    return 1;
  }
  const double roofline_s = decode_bytes / bandwidth;
  const double read_roofline_s = decode_bytes / read_bandwidth;
  std::cout << absl::StrFormat(
      "model        %s %s, %d layers, hidden %d, vocab %d, dtype %s, %d threads\n"
      "weights      %.1f MB read per decode step\n"
      "copy         %.2f GB/s (read + written, measured now)\n"
      "read         %.2f GB/s (read-only sum, measured now)\n"
      "decode       %.2f ms per token (context %d): weights streamed at %.2f GB/s\n"
      "roofline     %.2f ms per token (copy bandwidth) => decode at %.0f%% of it\n"
      "             %.2f ms per token (read bandwidth) => decode at %.0f%% of it\n"
      "prefill      %.1f ms for %d tokens: %.0f tokens/s\n",
      c.architecture_name, args.Get("preset").value_or(dir), c.num_layers, c.hidden_size,
      c.vocab_size, *args.Get("dtype"), torch::get_num_threads(), decode_bytes / 1e6,
      bandwidth / 1e9, read_bandwidth / 1e9, decode_s * 1e3, context, decode_bytes / decode_s / 1e9,
      roofline_s * 1e3, 100.0 * roofline_s / decode_s, read_roofline_s * 1e3,
      100.0 * read_roofline_s / decode_s, prefill_s * 1e3, prefill, prefill / prefill_s);
  return 0;
}

}  // namespace gpeserve::cli
