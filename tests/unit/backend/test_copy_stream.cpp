// Device::to_host_async and its tickets on the emulated CUDA backend, whose copy stream runs a copy
// only when it is waited for (kernels/cuda/launch.h): a destination read too early holds NaNs, an op
// that overwrites a source the copy has not read yet changes what arrives, and each ticket waits
// for its own copies and those before, not the later ones. These are the mistakes a real GPU would
// show only now and then.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace {

// n floats i + base on the device.
float* device_values(ds::backend::Cuda& cuda, size_t n, float base) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = base + static_cast<float>(i);
  auto* p = static_cast<float*>(cuda.allocate(n * sizeof(float)));
  cuda.to_device(p, host.data(), n * sizeof(float));
  return p;
}

}  // namespace

TEST_CASE("to_host_async (emulated CUDA): the destination holds the values once waited for, NaNs before") {
  ds::backend::Cuda cuda(0);
  CHECK(cuda.copies_issued() == 0);  // nothing issued: nothing to wait for
  cuda.wait_copies(0);
  float* a = device_values(cuda, 5, 10.0f);
  float* b = device_values(cuda, 3, 20.0f);
  std::vector<float> ha(5, 0.0f), hb(3, 0.0f);
  cuda.to_host_async(ha.data(), a, ha.size() * sizeof(float));
  const uint64_t first = cuda.copies_issued();
  cuda.to_host_async(hb.data(), b, hb.size() * sizeof(float));
  const uint64_t second = cuda.copies_issued();
  CHECK(second > first);
  CHECK(std::isnan(ha[0]));  // not yet waited for
  cuda.wait_copies(first);
  CHECK(ha == std::vector<float>{10, 11, 12, 13, 14});
  CHECK(std::isnan(hb[2]));  // a later ticket's copy is not done by waiting for an earlier one
  cuda.wait_copies(second);
  CHECK(hb == std::vector<float>{20, 21, 22});
  cuda.wait_copies(first);  // done already: returns at once
  cuda.release(a);
  cuda.release(b);
}

TEST_CASE("to_host_async (emulated CUDA): an op overwriting the source must come after ops_after_copies") {
  ds::backend::Cuda cuda(0);
  float* src = device_values(cuda, 4, 1.0f);
  std::vector<float> host(4);
  SUBCASE("ordered: the copy has the values from before the op") {
    cuda.to_host_async(host.data(), src, host.size() * sizeof(float));
    cuda.ops_after_copies(cuda.copies_issued());
    cuda.zero(src, host.size() * sizeof(float));
    cuda.wait_copies(cuda.copies_issued());
    CHECK(host == std::vector<float>{1, 2, 3, 4});
  }
  SUBCASE("not ordered: the emulator's copy reads the source late, as a GPU's may") {
    cuda.to_host_async(host.data(), src, host.size() * sizeof(float));
    const uint64_t ticket = cuda.copies_issued();
    cuda.zero(src, host.size() * sizeof(float));
    cuda.wait_copies(ticket);
    CHECK(host == std::vector<float>{0, 0, 0, 0});
  }
  cuda.release(src);
}

TEST_CASE("to_host_async (emulated CUDA): a copy starts after the ops issued before it") {
  ds::backend::Cuda cuda(0);
  float* src = device_values(cuda, 3, 5.0f);
  cuda.zero(src, 3 * sizeof(float));  // an op before the copy
  std::vector<float> host(3, -1.0f);
  cuda.to_host_async(host.data(), src, host.size() * sizeof(float));
  cuda.synchronize();  // waits for every copy too
  CHECK(host == std::vector<float>{0, 0, 0});
  cuda.release(src);
}

TEST_CASE("to_host_async (emulated CUDA): releasing device memory waits for the copies, as cudaFree does") {
  ds::backend::Cuda cuda(0);
  float* src = device_values(cuda, 2, 7.0f);
  std::vector<float> host(2, -1.0f);
  cuda.to_host_async(host.data(), src, host.size() * sizeof(float));
  cuda.copies_issued();
  cuda.release(src);
  CHECK(host == std::vector<float>{7, 8});
}

TEST_CASE("to_device_async (emulated CUDA): ops see the values after ops_after_copies; widen turns bf16 into fp32") {
  ds::backend::Cuda cuda(0);
  const std::vector<uint16_t> host{0x3f80, 0xc000, 0x3e20};  // bf16 1, -2, 0.15625
  auto* half = static_cast<uint16_t*>(cuda.allocate(host.size() * sizeof(uint16_t)));
  auto* wide = static_cast<float*>(cuda.allocate(host.size() * sizeof(float)));
  cuda.to_device_async(half, host.data(), host.size() * sizeof(uint16_t));
  const uint64_t ticket = cuda.copies_issued();
  std::vector<float> out(host.size());
  SUBCASE("ordered") {
    cuda.ops_after_copies(ticket);
    cuda.widen(ds::amp::Half::BF16, half, wide, host.size());
    cuda.to_host(out.data(), wide, out.size() * sizeof(float));
    CHECK(out == std::vector<float>{1.0f, -2.0f, 0.15625f});
  }
  SUBCASE("not ordered: the op reads the emulator's NaNs") {
    cuda.widen(ds::amp::Half::BF16, half, wide, host.size());
    cuda.to_host(out.data(), wide, out.size() * sizeof(float));
    CHECK(std::isnan(out[0]));
    cuda.wait_copies(ticket);
  }
  cuda.release(half);
  cuda.release(wide);
}

TEST_CASE("narrow (emulated CUDA): fp32 to bf16 and fp16 bits, rounded to nearest even, and back by widen") {
  ds::backend::Cuda cuda(0);
  const std::vector<float> values{1.0f, -2.0f, 0.15625f, 1.0f + 0x1p-8f, 3.0e5f};
  auto* wide = static_cast<float*>(cuda.allocate(values.size() * sizeof(float)));
  auto* half = static_cast<uint16_t*>(cuda.allocate(values.size() * sizeof(uint16_t)));
  cuda.to_device(wide, values.data(), values.size() * sizeof(float));
  std::vector<uint16_t> bits(values.size());
  cuda.narrow(ds::amp::Half::BF16, wide, half, values.size());
  cuda.to_host(bits.data(), half, bits.size() * sizeof(uint16_t));
  CHECK(bits == std::vector<uint16_t>{0x3f80, 0xc000, 0x3e20, 0x3f80, 0x4892});  // 1 + 2^-8: a tie, to even
  cuda.narrow(ds::amp::Half::F16, wide, half, values.size());
  cuda.to_host(bits.data(), half, bits.size() * sizeof(uint16_t));
  CHECK(bits == std::vector<uint16_t>{0x3c00, 0xc000, 0x3100, 0x3c04, 0x7c00});  // 3e5: beyond fp16, infinite
  std::vector<float> back(values.size());
  cuda.widen(ds::amp::Half::F16, half, wide, values.size());
  cuda.to_host(back.data(), wide, back.size() * sizeof(float));
  CHECK(back[2] == 0.15625f);
  CHECK(std::isinf(back[4]));
  cuda.release(half);
  cuda.release(wide);
}

TEST_CASE("to_device_after (emulated CUDA): uploads on a stream of their own, with tickets of their own") {
  ds::backend::Cuda cuda(0);
  float* src = device_values(cuda, 3, 5.0f);
  float* dst = static_cast<float*>(cuda.allocate(4 * sizeof(float)));
  std::vector<float> down(3, 0.0f), up{1, 2, 3, 4}, back(4, 0.0f);
  cuda.to_host_async(down.data(), src, down.size() * sizeof(float));  // queued on the copy stream
  const uint64_t mark = cuda.ops_issued();
  CHECK(mark > 0);
  cuda.to_device_after(mark, dst, up.data(), up.size() * sizeof(float));
  const uint64_t upload = cuda.uploads_issued();
  CHECK(upload != cuda.copies_issued());
  cuda.ops_after_copies(upload);  // the ops wait for the upload only
  cuda.to_host(back.data(), dst, back.size() * sizeof(float));
  CHECK(back == up);
  CHECK(std::isnan(down[0]));  // the download queued before it is not held to, nor does it hold the upload back
  cuda.wait_copies(cuda.copies_issued());
  CHECK(down == std::vector<float>{5, 6, 7});
  // Until waited for, the upload's destination holds NaNs; waiting for its ticket is enough.
  up = {7, 8, 9, 10};
  cuda.to_device_after(cuda.ops_issued(), dst, up.data(), up.size() * sizeof(float));
  const uint64_t second = cuda.uploads_issued();
  cuda.to_host(back.data(), dst, back.size() * sizeof(float));
  CHECK(std::isnan(back[0]));  // read before it was waited for
  cuda.wait_copies(second);
  cuda.to_host(back.data(), dst, back.size() * sizeof(float));
  CHECK(back == up);
  cuda.wait_copies(upload);  // done already
  cuda.release(src);
  cuda.release(dst);
}
