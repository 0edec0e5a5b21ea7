#include "engine/kv/kv_pool.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpeserve::kv {
namespace {

const torch::Device kCpu(torch::kCPU);

// Slots as the pool wants them: an int64 tensor on the pool's device.
torch::Tensor SlotTensor(const std::vector<int64_t>& slots) {
  return torch::tensor(slots, torch::dtype(torch::kInt64));
}

// The naive reference: one flat float array per layer for K and for V, indexed by hand as
// [slot][head][dim], written and read element by element (no torch indexing involved).
class ReferencePool {
 public:
  ReferencePool(int64_t slots, const KvShape& shape)
      : shape_(shape),
        k_(shape.layers, std::vector<float>(slots * shape.kv_heads * shape.head_dim)),
        v_(k_) {}

  void Write(int64_t layer, const std::vector<int64_t>& slots, const torch::Tensor& k,
             const torch::Tensor& v) {
    const auto k_acc = k.accessor<float, 3>();
    const auto v_acc = v.accessor<float, 3>();
    for (size_t i = 0; i < slots.size(); ++i) {
      for (int64_t h = 0; h < shape_.kv_heads; ++h) {
        for (int64_t d = 0; d < shape_.head_dim; ++d) {
          k_[layer][Index(slots[i], h, d)] = k_acc[i][h][d];
          v_[layer][Index(slots[i], h, d)] = v_acc[i][h][d];
        }
      }
    }
  }

  float K(int64_t layer, int64_t slot, int64_t h, int64_t d) const {
    return k_[layer][Index(slot, h, d)];
  }
  float V(int64_t layer, int64_t slot, int64_t h, int64_t d) const {
    return v_[layer][Index(slot, h, d)];
  }

 private:
  int64_t Index(int64_t slot, int64_t h, int64_t d) const {
    return (slot * shape_.kv_heads + h) * shape_.head_dim + d;
  }

  KvShape shape_;
  std::vector<std::vector<float>> k_, v_;
};

TEST(KvPoolTest, BlockBytesCountsKAndVOfEveryLayer) {
  // Worked by hand: K and V (2) x layers x block_size x kv_heads x head_dim x element size.
  const KvShape shape{.layers = 2, .kv_heads = 4, .head_dim = 8};
  // 2 x 2 x 16 x 4 x 8 = 2048 elements.
  EXPECT_EQ(KvPool::BlockBytes(16, shape, torch::kFloat32), 8192);
  EXPECT_EQ(KvPool::BlockBytes(16, shape, torch::kFloat16), 4096);
  EXPECT_EQ(KvPool::BlockBytes(16, shape, torch::kBFloat16), 4096);
  EXPECT_EQ(KvPool::BlockBytes(1, {.layers = 1, .kv_heads = 1, .head_dim = 1}, torch::kFloat64),
            16);
}

TEST(KvPoolTest, BlockBytesEqualsTheAllocatedBytesPerBlock) {
  // The engine sizes the pool by dividing a memory budget by BlockBytes, so the two must agree
  // with what Create really allocates, for every dtype the engine serves in.
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    for (const KvShape shape : {KvShape{.layers = 1, .kv_heads = 1, .head_dim = 4},
                                KvShape{.layers = 3, .kv_heads = 2, .head_dim = 16}}) {
      for (const int block_size : {1, 4, 16}) {
        const int num_blocks = 5;
        auto pool = KvPool::Create({.block_size = block_size, .num_blocks = num_blocks}, shape,
                                   dtype, kCpu);
        ASSERT_TRUE(pool.ok()) << pool.status();
        EXPECT_EQ(pool->bytes(), num_blocks * KvPool::BlockBytes(block_size, shape, dtype));

        // And the tensors behind bytes() have the documented layout: num_blocks * block_size
        // slots of [kv_heads, head_dim] per layer, in the requested dtype.
        std::vector<int64_t> all(num_blocks * block_size);
        std::iota(all.begin(), all.end(), 0);
        for (int64_t layer = 0; layer < shape.layers; ++layer) {
          const torch::Tensor k = pool->GatherK(layer, SlotTensor(all));
          const torch::Tensor v = pool->GatherV(layer, SlotTensor(all));
          EXPECT_EQ(k.sizes(), (std::vector<int64_t>{num_blocks * block_size, shape.kv_heads,
                                                     shape.head_dim}));
          EXPECT_EQ(v.sizes(), k.sizes());
          EXPECT_EQ(k.scalar_type(), dtype);
          EXPECT_EQ(v.scalar_type(), dtype);
        }
      }
    }
  }
}

TEST(KvPoolTest, WritesLandInTheirSlotsOnly) {
  const KvShape shape{.layers = 3, .kv_heads = 2, .head_dim = 5};
  const KvCacheConfig config{.block_size = 4, .num_blocks = 6};
  const int64_t slots = config.block_size * config.num_blocks;
  auto pool = KvPool::Create(config, shape, torch::kFloat32, kCpu);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->device(), kCpu);
  ReferencePool reference(slots, shape);

  std::mt19937 rng(7);
  std::vector<int64_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  auto write = [&](int64_t layer, const std::vector<int64_t>& where) {
    const auto n = static_cast<int64_t>(where.size());
    const torch::Tensor k = torch::randn({n, shape.kv_heads, shape.head_dim});
    const torch::Tensor v = torch::randn({n, shape.kv_heads, shape.head_dim});
    pool->Write(layer, SlotTensor(where), k, v);
    reference.Write(layer, where, k, v);
  };
  // Every slot of every layer starts with a known value, so "only" is checked against values
  // the test chose rather than against whatever the pool was initialized with.
  for (int64_t layer = 0; layer < shape.layers; ++layer) write(layer, all);
  // Then writes of random, distinct slots in random order (as a batch of tokens scattered over
  // blocks), to random layers.
  for (int round = 0; round < 40; ++round) {
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<int64_t> where(all.begin(),
                                     all.begin() + std::uniform_int_distribution<>(1, 9)(rng));
    write(std::uniform_int_distribution<int64_t>(0, shape.layers - 1)(rng), where);
  }

  // Gathers in an arbitrary order, with repeats, return exactly the reference's contents.
  std::vector<int64_t> gather;
  for (int i = 0; i < 3 * slots; ++i) {
    gather.push_back(std::uniform_int_distribution<int64_t>(0, slots - 1)(rng));
  }
  for (int64_t layer = 0; layer < shape.layers; ++layer) {
    const torch::Tensor k = pool->GatherK(layer, SlotTensor(gather)).contiguous();
    const torch::Tensor v = pool->GatherV(layer, SlotTensor(gather)).contiguous();
    ASSERT_EQ(k.sizes(), (std::vector<int64_t>{3 * slots, shape.kv_heads, shape.head_dim}));
    ASSERT_EQ(v.sizes(), k.sizes());
    const auto k_acc = k.accessor<float, 3>();
    const auto v_acc = v.accessor<float, 3>();
    for (size_t i = 0; i < gather.size(); ++i) {
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        for (int64_t d = 0; d < shape.head_dim; ++d) {
          ASSERT_EQ(k_acc[i][h][d], reference.K(layer, gather[i], h, d))
              << "layer " << layer << " slot " << gather[i] << " head " << h << " dim " << d;
          ASSERT_EQ(v_acc[i][h][d], reference.V(layer, gather[i], h, d))
              << "layer " << layer << " slot " << gather[i] << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(KvPoolTest, GatherOfNoSlotsIsEmpty) {
  const KvShape shape{.layers = 1, .kv_heads = 3, .head_dim = 2};
  auto pool = KvPool::Create({.block_size = 2, .num_blocks = 2}, shape, torch::kFloat32, kCpu);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const torch::Tensor k = pool->GatherK(0, SlotTensor({}));
  EXPECT_EQ(k.sizes(), (std::vector<int64_t>{0, 3, 2}));
  EXPECT_EQ(pool->GatherV(0, SlotTensor({})).sizes(), k.sizes());
}

TEST(KvPoolTest, WritesAreStoredInThePoolDtype) {
  // The model computes K and V in float32; a half-precision pool stores them rounded to its
  // dtype, and gathers return that dtype (what attention then reads).
  const KvShape shape{.layers = 1, .kv_heads = 1, .head_dim = 3};
  for (const torch::ScalarType dtype : {torch::kFloat16, torch::kBFloat16}) {
    auto pool = KvPool::Create({.block_size = 2, .num_blocks = 2}, shape, dtype, kCpu);
    ASSERT_TRUE(pool.ok()) << pool.status();
    // 1.5 and -2.25 are exact in both dtypes; 0.1 is not and must come back rounded.
    const torch::Tensor k = torch::tensor({1.5f, -2.25f, 0.1f}).reshape({1, 1, 3});
    const torch::Tensor v = -k;
    pool->Write(0, SlotTensor({3}), k, v);
    const torch::Tensor got_k = pool->GatherK(0, SlotTensor({3}));
    const torch::Tensor got_v = pool->GatherV(0, SlotTensor({3}));
    EXPECT_EQ(got_k.scalar_type(), dtype);
    EXPECT_EQ(got_v.scalar_type(), dtype);
    EXPECT_EQ(got_k[0][0][0].item<float>(), 1.5f);
    EXPECT_EQ(got_v[0][0][1].item<float>(), 2.25f);
    EXPECT_TRUE(torch::equal(got_k, k.to(dtype)));
    EXPECT_TRUE(torch::equal(got_v, v.to(dtype)));
    EXPECT_NE(got_k[0][0][2].item<float>(), 0.1f);
  }
}

TEST(KvPoolTest, SizeOverflowIsResourceExhausted) {
  // 2^30 slots x 2^20 heads x 2^20 dims overflows 64 bits: libtorch refuses before it asks
  // for any memory, so this is safe on every machine (and under sanitizers).
  const KvShape shape{.layers = 2, .kv_heads = int64_t{1} << 20, .head_dim = int64_t{1} << 20};
  auto pool =
      KvPool::Create({.block_size = 1 << 10, .num_blocks = 1 << 20}, shape, torch::kFloat32, kCpu);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(pool.status().message(),
                               "cannot allocate the KV cache (1048576 blocks of 1024 tokens): "))
      << pool.status();
}

TEST(KvPoolTest, AllocationBeyondTheAddressSpaceIsResourceExhausted) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' allocators abort on an impossible size instead of failing it.
  GTEST_SKIP() << "sanitizer allocators abort on oversized requests";
#endif
  // 2^30 slots x 2^14 x 2^14 float32 = 2^60 bytes per tensor: more than any x86-64 or arm64
  // address space, so the allocator fails at once (no memory is touched, even with
  // overcommit). The first layer's K fails, so nothing is held when Create returns.
  const KvShape shape{.layers = 2, .kv_heads = int64_t{1} << 14, .head_dim = int64_t{1} << 14};
  auto pool =
      KvPool::Create({.block_size = 1 << 10, .num_blocks = 1 << 20}, shape, torch::kFloat32, kCpu);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(pool.status().message(),
                               "cannot allocate the KV cache (1048576 blocks of 1024 tokens): "))
      << pool.status();
}

}  // namespace
}  // namespace gpeserve::kv
