// The CUDA path against the CPU's: every test family's logits (with a LoRA adapter's updates
// too) computed on the GPU in fp32 equal the CPU's up to summation order, and in bf16 stay
// within bf16's rounding. Label cuda: skipped (not failed) where no GPU is visible, so that a
// CUDA build on a machine without one still passes.
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "engine/model/adapter.h"
#include "engine/model/attention.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

// Causal logits of `tokens` at positions 0.., on the model's device, as fp32 on the CPU.
torch::Tensor Logits(const Model& m, const std::vector<int64_t>& tokens,
                     const Adapter* adapter = nullptr) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  DenseAttention attention({}, {}, DenseAttention::CausalMask(n));
  std::vector<AdapterSpan> spans;
  if (adapter != nullptr) spans.push_back({adapter, 0, n});
  auto logits =
      m.Forward(torch::tensor(tokens), torch::arange(n), torch::arange(n), attention, spans);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? logits->to(torch::kCPU, torch::kFloat32) : torch::Tensor();
}

// max |a - b| / max |b|.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

TEST(CudaTest, LogitsEqualTheCpusForEveryFamily) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const fs::path root =
      fs::path(::testing::TempDir()) / ("gpe_cuda_test_" + std::to_string(::getpid()));
  std::vector<int64_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 250);
  for (const MakeModelOptions& family : testing::TestFamilies()) {
    const std::string dir = testing::WriteTinyChatModel(5, (root / family.arch).string(), family);
    auto cpu = Model::Load(dir, {.dtype = "fp32", .device = "cpu", .threads = 2});
    auto gpu = Model::Load(dir, {.dtype = "fp32", .device = "cuda"});
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << family.arch;
    const torch::Tensor want = Logits(**cpu, tokens);
    const torch::Tensor got = Logits(**gpu, tokens);
    const double fp32_error = RelativeError(got, want);
    EXPECT_LT(fp32_error, 1e-4) << family.arch << " fp32";

    // Gemma 2 is refused in fp16 on CUDA; bf16 serves every family.
    auto half = Model::Load(dir, {.dtype = "bf16", .device = "cuda"});
    ASSERT_TRUE(half.ok()) << family.arch << ": " << half.status();
    const double bf16_error = RelativeError(Logits(**half, tokens), want);
    // The test models' weights are large (init_std 0.3), so bf16's rounding of every product
    // compounds: 3 % to 10 % measured on an H200.
    EXPECT_LT(bf16_error, 0.15) << family.arch << " bf16";

    // A LoRA adapter on every projection (rank 8, rslora): its updates on
    // the GPU as on the CPU.
    AdapterConfig lora;
    lora.r = 8;
    lora.lora_alpha = 16;
    lora.use_rslora = true;
    lora.target_list = {"all-linear"};
    auto tensors = RandomAdapterTensors(**cpu, lora, 7, 0.3);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    const std::string adapter_dir = (root / (family.arch + "-lora")).string();
    ASSERT_TRUE(WriteAdapterFolder(adapter_dir, lora, *tensors).ok());
    auto cpu_adapter = LoadAdapter(adapter_dir, **cpu, "a");
    auto gpu_adapter = LoadAdapter(adapter_dir, **gpu, "a");
    ASSERT_TRUE(cpu_adapter.ok() && gpu_adapter.ok()) << family.arch;
    const torch::Tensor want_lora = Logits(**cpu, tokens, cpu_adapter->get());
    const double lora_error = RelativeError(Logits(**gpu, tokens, gpu_adapter->get()), want_lora);
    EXPECT_LT(lora_error, 1e-4) << family.arch << " fp32 + LoRA";
    EXPECT_GT(RelativeError(want_lora, want), 1e-3) << "the adapter changes nothing";
    std::printf(
        "%-8s relative error vs CPU fp32: cuda fp32 %.2e, cuda bf16 %.2e, "
        "cuda fp32 + LoRA %.2e\n",
        family.arch.c_str(), fp32_error, bf16_error, lora_error);
    std::fflush(stdout);
  }
  EXPECT_TRUE(model::RemoveTree(root).ok());
}

}  // namespace
}  // namespace gpeserve::model
