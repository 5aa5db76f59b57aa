// Device::pin_host on the emulated CUDA backend, which checks ranges as CUDA's cudaHostRegister does:
// by whole pages, so a buffer that shares a page with a pinned one is refused (the reason named), and
// a PageVector, which owns its pages, never is; unpinning what was not pinned is an error.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/page_vector.h"

TEST_CASE("pin_host (emulated CUDA): whole pages, a shared page refused, page vectors never") {
  ds::backend::Cuda cuda(0);
  std::string why;
  std::vector<char> block(3 * ds::page_bytes());  // two ranges inside one page of it
  char* page = block.data() + (ds::page_bytes() - reinterpret_cast<uintptr_t>(block.data()) % ds::page_bytes());
  CHECK(cuda.pin_host(page, 100, why));
  CHECK_FALSE(cuda.pin_host(page + 200, 100, why));
  CHECK(why.find("cudaErrorHostMemoryAlreadyRegistered") != std::string::npos);
  CHECK_THROWS_WITH_AS(cuda.unpin_host(page + 200), doctest::Contains("cudaErrorHostMemoryNotRegistered"),
                       std::runtime_error);
  cuda.unpin_host(page);
  CHECK(cuda.pin_host(page + 200, 100, why));  // free again
  cuda.unpin_host(page + 200);

  ds::PageVector<float> a(5), b(7), c(ds::page_bytes());  // small and large: each its own pages
  for (auto* v : {&a, &b, &c}) {
    CHECK(reinterpret_cast<uintptr_t>(v->data()) % ds::page_bytes() == 0);
    CHECK(cuda.pin_host(v->data(), v->size() * sizeof(float), why));
  }
  for (auto* v : {&a, &b, &c}) cuda.unpin_host(v->data());
}
