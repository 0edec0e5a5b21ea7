// gpe bench-forward: decode-step and prefill time of a model in each serving dtype on this
// machine, next to the memory roofline measured in the same run, with the ratios the CPU
// kernels are judged by (docs/model.md): each dtype's decode speed against fp32's, a decode
// step of several rows against one row, all threads against fewer, prefill against fp32's.
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/make_model.h"
#include "engine/model/linear.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "flags/flags.h"

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

// Bytes one decode step reads: every weight once, but only one row of an untied embedding.
int64_t DecodeBytes(const model::Model& m) {
  const model::ModelConfig& c = m.config();
  const model::Matrix& embed = m.weights().embed;
  const int64_t embed_bytes = embed.data.numel() * embed.data.element_size() +
                              (embed.scale.defined() ? embed.scale.numel() * 4 : 0);
  const int64_t row_bytes = embed.data.size(1) * embed.data.element_size();
  return m.weight_bytes() - (c.tie_word_embeddings ? 0 : embed_bytes - row_bytes);
}

struct Timings {
  std::map<int, double> decode_s;  // by rows
  double decode_fewer_threads_s = 0;
  double prefill_s = 0;
  int64_t decode_bytes = 0;
  std::string kernel_path;
};

}  // namespace

int BenchForwardCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe bench-forward (--preset NAME | --model DIR) [options]",
      "Times decode steps of --rows rows (each attending to --context cached tokens) and\n"
      "a prefill of --prefill tokens in every dtype of --dtypes, and compares them with\n"
      "the memory roofline (the bytes a decode step reads over the bandwidth measured in\n"
      "this run), with fp32, with one row and with --fewer_threads threads. A --preset\n"
      "model is written once with bf16 weights, so every dtype serves the same values.");
  model::MakeModelOptions make;
  make.dtype = model::DType::kBF16;
  std::optional<std::string> preset, model_dir;
  flags.Add("preset", "NAME", "make a random-weight model of this preset (qwen2.5-0.5b, ...)",
            &preset);
  flags.Add("arch", "qwen2|llama|mistral|gemma2|qwen3|phi3",
            "architecture for --preset (default: the preset's)", &make.arch);
  flags.Add("model", "DIR", "an existing model folder instead of --preset", &model_dir);
  std::vector<std::string> dtypes = {"fp32", "bf16", "fp16", "int8"};
  flags.AddParsed(
      "dtypes", "LIST", "serving dtypes to compare (fp32 first: the baseline)",
      absl::StrJoin(dtypes, ","), [&dtypes](std::string_view text) {
        std::vector<std::string> parsed =
            absl::StrSplit(absl::string_view(text.data(), text.size()), ',');
        for (const std::string& d : parsed) {
          if (!model::ParseServingDtype(d).ok()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "takes serving dtypes separated by commas (", model::kServingDtypeChoices, ")"));
          }
        }
        dtypes = std::move(parsed);
        return absl::OkStatus();
      });
  std::vector<int> rows = {1, 8};
  flags.AddParsed("rows", "LIST", "rows per decode step (the first is the baseline)",
                  absl::StrJoin(rows, ","),
                  [&rows](std::string_view text) { return ParsePositiveList(text, &rows); });
  int threads = 0, fewer_threads = 1, context = 128, prefill = 512, runs = 10;
  flags.Add("threads", "N", "CPU threads (0 = all cores)", &threads, {.min = 0});
  flags.Add("fewer_threads", "N", "also time 1-row decode with N threads (0 = skip)",
            &fewer_threads, {.min = 0});
  flags.Add("context", "N", "cached tokens each decode row attends to", &context, {.min = 0});
  flags.Add("prefill", "N", "tokens in the prefill", &prefill, {.min = 1});
  flags.Add("runs", "N", "timed runs (median)", &runs, {.min = 1});
  std::string cpu_activations = "fp32";
  flags.Add("cpu_activations", model::kCpuActivationChoices, model::kCpuActivationsHelp,
            &cpu_activations);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  std::string dir;
  std::filesystem::path temp;
  if (model_dir) {
    dir = *model_dir;
  } else if (preset) {
    temp = std::filesystem::temp_directory_path() / absl::StrCat("gpe-bench-", ::getpid());
    make.preset = *preset;
    std::cerr << "gpe: writing a random " << *preset << " model to " << temp << "\n";
    if (absl::Status s = model::MakeModel(make, temp.string()); !s.ok()) {
      std::cerr << "gpe: " << s.message() << "\n";
      return 1;
    }
    dir = temp.string();
  } else {
    std::cerr << "gpe: give --preset NAME or --model DIR\n\n" << flags.Help();
    return 2;
  }
  struct RemoveTemp {
    std::filesystem::path path;
    ~RemoveTemp() {
      if (!path.empty()) model::RemoveTree(path).IgnoreError();
    }
  } remove_temp{temp};

  std::map<std::string, Timings> results;
  double copy_bandwidth = 0, read_bandwidth = 0, gemm_flops = 0;
  int64_t step_params = 0;  // multiply-adds per row of a decode step
  int all_threads = 0;
  model::ModelConfig config;
  for (const std::string& dtype : dtypes) {
    auto loaded = model::Model::Load(
        dir, {.dtype = dtype, .threads = threads, .cpu_activations = cpu_activations});
    if (!loaded.ok()) {
      std::cerr << "gpe: " << dtype << ": " << loaded.status().message() << "\n";
      return 1;
    }
    const model::Model& m = **loaded;
    const model::ModelConfig& c = m.config();
    config = c;
    all_threads = torch::get_num_threads();
    Timings& t = results[dtype];
    t.kernel_path = m.kernel_path();
    t.decode_bytes = DecodeBytes(m);
    std::cerr << "gpe: " << dtype << ": " << t.kernel_path << "\n";

    if (copy_bandwidth == 0) {
      // Memory bandwidth with the same threads, on a buffer at least as large as the weights:
      // copy (bytes read + bytes written, as STREAM counts it) and read-only (a sum).
      const int64_t buffer_bytes = std::max<int64_t>(t.decode_bytes, int64_t{256} << 20);
      torch::Tensor src = torch::ones({buffer_bytes / 4}, torch::kFloat32);
      torch::Tensor dst = torch::empty_like(src);
      copy_bandwidth = 2.0 * buffer_bytes / MedianSeconds(5, [&] { dst.copy_(src); });
      read_bandwidth = buffer_bytes / MedianSeconds(5, [&] { src.sum().item<float>(); });
      // Compute: the fp32 GEMM of prefill steps (model::Linear beyond the kernel's rows) on a
      // prefill-sized product of this model's shapes.
      const torch::Tensor a = torch::randn({512, c.hidden_size});
      const model::Matrix b{torch::randn({c.intermediate_size, c.hidden_size}), {}};
      gemm_flops = 2.0 * 512 * c.hidden_size * c.intermediate_size /
                   MedianSeconds(3, [&] { model::Linear(a, b, {}); });
      // Multiply-adds of one row: every matrix, the LM head included, not the embedding.
      step_params = c.vocab_size * c.hidden_size;
      for (const model::LayerWeights& l : m.weights().layers) {
        for (const model::Matrix* w :
             {&l.q_w, &l.k_w, &l.v_w, &l.o_w, &l.gate_w, &l.up_w, &l.down_w}) {
          step_params += w->data.size(0) * w->in();
        }
      }
    }

    std::vector<torch::Tensor> past_k, past_v;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      past_k.push_back(torch::randn({context, c.num_kv_heads, c.head_dim}).to(m.dtype()));
      past_v.push_back(torch::randn({context, c.num_kv_heads, c.head_dim}).to(m.dtype()));
    }
    bool ok = true;
    // A decode step of r rows: r new tokens after `context` cached ones, every row's logits.
    auto decode = [&](int r) {
      const torch::Tensor allowed = torch::cat(
          {torch::ones({r, context}, torch::kBool), model::DenseAttention::CausalMask(r)}, 1);
      const torch::Tensor tokens = torch::randint(c.vocab_size, {r}, torch::kInt64);
      const torch::Tensor pos = torch::arange(context, context + r, torch::kInt64);
      const torch::Tensor logit_rows = torch::arange(r, torch::kInt64);
      return MedianSeconds(runs, [&] {
        model::DenseAttention attn(past_k, past_v, allowed);
        ok &= m.Forward(tokens, pos, logit_rows, attn).ok();
      });
    };
    for (int r : rows) t.decode_s[r] = decode(r);
    if (fewer_threads > 0 && fewer_threads < all_threads) {
      torch::set_num_threads(fewer_threads);
      t.decode_fewer_threads_s = decode(rows[0]);
      torch::set_num_threads(all_threads);
    }
    // Prefill: `prefill` tokens, causal, logits for the last one.
    const torch::Tensor tokens = torch::randint(c.vocab_size, {prefill}, torch::kInt64);
    t.prefill_s = MedianSeconds(std::max(1, runs / 5), [&] {
      model::DenseAttention attn({}, {}, model::DenseAttention::CausalMask(prefill));
      ok &= m.Forward(tokens, torch::arange(prefill), torch::tensor({int64_t{prefill - 1}}), attn)
                .ok();
    });
    if (!ok) {
      std::cerr << "gpe: a forward pass failed\n";
      return 1;
    }
  }

  const std::string& base = dtypes[0];
  const int r0 = rows[0];
  std::cout << absl::StrFormat(
      "model     %s %s, %d layers, hidden %d, vocab %d; %d threads; CPU %s\n"
      "memory    copy %.2f GB/s (read + written), read %.2f GB/s (read-only sum), measured now\n"
      "compute   %.1f GFLOP/s (the prefill GEMM, fp32, 512 rows, measured now): %.1f GFLOP a row\n"
      "decode    %d cached tokens per row; ratios against %s and against %d row%s\n",
      config.architecture_name, preset.value_or(dir), config.num_layers, config.hidden_size,
      config.vocab_size, all_threads, CpuName(), copy_bandwidth / 1e9, read_bandwidth / 1e9,
      gemm_flops / 1e9, 2.0 * step_params / 1e9, context, base, r0, r0 == 1 ? "" : "s");
  // A step of r rows takes at least the longer of reading the weights and computing r rows.
  for (int r : rows) {
    std::cout << absl::StrFormat("floor     %d row%s: compute %.1f ms at the GEMM's rate", r,
                                 r == 1 ? " " : "s", 2.0 * r * step_params / gemm_flops * 1e3);
    for (const std::string& dtype : dtypes) {
      std::cout << absl::StrFormat("; %s max(read, compute) %.1f ms", dtype,
                                   std::max(results[dtype].decode_bytes / read_bandwidth,
                                            2.0 * r * step_params / gemm_flops) *
                                       1e3);
    }
    std::cout << "\n";
  }
  std::cout << "\n";
  std::string header = absl::StrFormat("%-6s %9s %10s %9s %8s", "dtype", "MB/step",
                                       absl::StrCat("ms/", r0, "row"), "GB/s", "%read");
  absl::StrAppend(&header, absl::StrFormat(" %8s", absl::StrCat("x", base)));
  for (size_t i = 1; i < rows.size(); ++i) {
    absl::StrAppend(&header, absl::StrFormat(" %10s %9s", absl::StrCat("ms/", rows[i], "rows"),
                                             absl::StrCat(rows[i], "r/", r0, "r")));
  }
  if (fewer_threads > 0 && fewer_threads < all_threads) {
    absl::StrAppend(&header, absl::StrFormat(" %9s %8s", absl::StrCat("ms@", fewer_threads, "t"),
                                             absl::StrCat(all_threads, "t/", fewer_threads, "t")));
  }
  absl::StrAppend(&header, absl::StrFormat(" %10s %8s", "prefill/s", absl::StrCat("x", base)));
  std::cout << header << "\n";
  for (const std::string& dtype : dtypes) {
    const Timings& t = results[dtype];
    const Timings& b = results[base];
    const double one = t.decode_s.at(r0);
    std::string line =
        absl::StrFormat("%-6s %9.1f %10.2f %9.2f %7.0f%% %7.2fx", dtype, t.decode_bytes / 1e6,
                        one * 1e3, t.decode_bytes / one / 1e9,
                        100.0 * (t.decode_bytes / read_bandwidth) / one, b.decode_s.at(r0) / one);
    for (size_t i = 1; i < rows.size(); ++i) {
      const double s = t.decode_s.at(rows[i]);
      absl::StrAppend(&line, absl::StrFormat(" %10.2f %8.2fx", s * 1e3, s / one));
    }
    if (t.decode_fewer_threads_s > 0) {
      absl::StrAppend(&line, absl::StrFormat(" %9.2f %7.2fx", t.decode_fewer_threads_s * 1e3,
                                             t.decode_fewer_threads_s / one));
    }
    absl::StrAppend(
        &line, absl::StrFormat(" %10.0f %7.2fx", prefill / t.prefill_s, b.prefill_s / t.prefill_s));
    std::cout << line << "\n";
  }
  std::cout << "\nGB/s: weight bytes a step reads over its time; %read: the read roofline's "
               "time over the step's;\nx"
            << base << ": speed relative to " << base << " (higher is faster); Nr/" << r0
            << "r: time of a step of N rows over one of " << r0 << " (lower is better)"
            << (fewer_threads > 0 && fewer_threads < all_threads ? ";" : ".\n");
  if (fewer_threads > 0 && fewer_threads < all_threads) {
    std::cout << "\n"
              << all_threads << "t/" << fewer_threads << "t: the speedup of " << all_threads
              << " threads over " << fewer_threads << " (higher is better).\n";
  }
  return 0;
}

}  // namespace gpeserve::cli
