// Device memory holding a copy of a host vector, for dsworker --selftest's checks (selftest.cpp,
// selftest_nccl.cpp): through kernels/cuda's launchers, so on a GPU or the emulated device alike.
#pragma once
#include <cstddef>
#include <vector>

#include "cuda/launch.h"

namespace ds {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    ptr_ = static_cast<T*>(cuda::device_alloc(bytes()));
    cuda::copy_to_device(ptr_, host.data(), bytes());
  }
  ~DeviceArray() {
    try {
      cuda::device_free(ptr_);
    } catch (...) {  // a device that failed earlier: that error is the one reported
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> to_host() const {
    cuda::synchronize();
    std::vector<T> host(n_);
    cuda::copy_to_host(host.data(), ptr_, bytes());
    return host;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  size_t n_;
  T* ptr_ = nullptr;
};

}  // namespace ds
