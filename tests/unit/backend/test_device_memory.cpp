// The CUDA backend's device memory when the device is full (emulated CUDA, whose size
// DS_CUDA_EMULATED_MEMORY sets): the cached blocks not in use are freed and the allocation tried again, as
// PyTorch's allocator does; failing still, the error names the request and what the process holds there.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../scoped_env.h"
#include "backend/backend.h"
#include "cuda/launch.h"

using namespace ds;

TEST_CASE("cuda backend (emulated): a full device frees the cached blocks and tries again, else says what it holds") {
  REQUIRE(cuda::emulated());
  ScopedEnv memory("DS_CUDA_EMULATED_MEMORY", "1048576");  // a 1 MiB device
  backend::Cuda device(0);
  const ds_backend& t = *device.table();
  void* temporary = nullptr;
  REQUIRE(t.alloc(t.ctx, 600'000, &temporary) == DS_OK);
  t.free(t.ctx, temporary);  // back in the cache, still allocated on the device
  void* buffer = device.allocate(600'000);  // room only once the cached block is freed
  CHECK(buffer != nullptr);
  void* another = nullptr;
  CHECK(t.alloc(t.ctx, 600'000, &another) == DS_OUT_OF_MEMORY);  // nothing cached to free: full
  const std::string error = t.last_error(t.ctx);
  CHECK(error.find("cudaErrorMemoryAllocation: out of memory") != std::string::npos);
  CHECK(error.find("cuda:0 has no room for 586.2 KiB more") != std::string::npos);  // (rounded up in the cache)
  CHECK(error.find("tensors and buffers there hold 585.9 KiB") != std::string::npos);  // the buffer
  CHECK_THROWS_AS(device.allocate(600'000), cuda::OutOfMemory);  // the engine's buffers likewise
  device.release(buffer);
  REQUIRE(t.alloc(t.ctx, 600'000, &another) == DS_OK);
  t.free(t.ctx, another);
}

// bias_grad's operand of ones grows with the rows; its block is made as the cache's are.
TEST_CASE("cuda backend (emulated): bias_grad's ones find room as the other blocks do") {
  REQUIRE(cuda::emulated());
  ScopedEnv memory("DS_CUDA_EMULATED_MEMORY", "1048576");
  backend::Cuda device(0);
  const ds_backend& t = *device.table();
  constexpr int64_t rows = 100'000;  // 400 KB of dy, and as much of ones
  const std::vector<float> halves(rows, 0.5f);
  auto* dy = static_cast<float*>(device.allocate(rows * sizeof(float)));
  auto* dbias = static_cast<float*>(device.allocate(sizeof(float)));
  device.to_device(dy, halves.data(), rows * sizeof(float));
  device.zero(dbias, sizeof(float));
  void* temporary = nullptr;
  REQUIRE(t.alloc(t.ctx, 500'000, &temporary) == DS_OK);
  t.free(t.ctx, temporary);  // cached: the ones fit only once it is freed
  REQUIRE(t.bias_grad(t.ctx, dy, dbias, rows, 1) == DS_OK);
  float sum = 0;
  device.to_host(&sum, dbias, sizeof(float));
  CHECK(sum == 50'000.0f);
  device.release(dbias);
  device.release(dy);
}

TEST_CASE("cuda backend (emulated): DS_CUDA_EMULATED_MEMORY must be a number of bytes") {
  ScopedEnv memory("DS_CUDA_EMULATED_MEMORY", "1GB");
  CHECK_THROWS_WITH_AS(cuda::device_alloc(16), "DS_CUDA_EMULATED_MEMORY='1GB': expected a number of bytes",
                       std::runtime_error);
}
