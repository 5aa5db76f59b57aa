// Host buffers that own whole pages: a PageVector's storage starts on a page boundary and is rounded
// up to whole pages, so no other allocation shares its pages. A device page-locks host memory by
// pages (cudaHostRegister), so such buffers can each be pinned without touching another's.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace ds {

inline size_t page_bytes() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

template <class T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    const size_t page = page_bytes(), bytes = (n * sizeof(T) + page - 1) / page * page;
    void* p = std::aligned_alloc(page, bytes > 0 ? bytes : page);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const PageAllocator<U>&) const noexcept { return true; }
};

template <class T>
using PageVector = std::vector<T, PageAllocator<T>>;

// Empties a vector and gives its storage back (`v = {}` assigns an empty initializer list, which keeps
// the capacity: the memory stays allocated).
template <class V>
void free_storage(V& v) {
  V().swap(v);
}

}  // namespace ds
