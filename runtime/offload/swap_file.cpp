// Swap files (see swap_file.h).
#include "offload/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::offload {

void FreeDirect::operator()(std::byte* p) const { std::free(p); }

DirectBuffer direct_buffer(size_t bytes) {
  DirectBuffer buffer(static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, align_up(bytes ? bytes : 1))));
  if (!buffer) throw std::bad_alloc();
  return buffer;
}

namespace {

std::string size_text(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30));
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
}

// An unnamed file in `dir`; file systems without O_TMPFILE get a named one, unlinked at once.
int open_unnamed(const std::string& dir, int flags) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  std::string name = dir + "/dsworker-swap-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC | flags);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

}  // namespace

SwapFile::SwapFile(const std::string& dir, uint64_t bytes, bool allow_buffered, const std::string& what)
    : dir_(dir), bytes_(bytes) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("{}: \"{}\": {}", what, dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(fmt::format("{}: \"{}\" is not a directory", what, dir));
  fd_ = open_unnamed(dir, O_DIRECT);
  if (fd_ < 0 && errno == EINVAL) {  // the file system has no O_DIRECT
    if (!allow_buffered)
      throw std::runtime_error(fmt::format("{}: \"{}\" is on a file system without O_DIRECT; put the swap files "
                                           "on a local disk, or allow buffered I/O with DS_OFFLOAD_BUFFERED_IO=1",
                                           what, dir));
    direct_ = false;
    fd_ = open_unnamed(dir, 0);
  }
  if (fd_ < 0)
    throw std::runtime_error(fmt::format("{}: cannot create a swap file in \"{}\": {}", what, dir,
                                         std::strerror(errno)));
  if (bytes == 0) return;
  const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (rc == 0) return;
  struct statvfs fs {};
  const uint64_t free = ::fstatvfs(fd_, &fs) == 0 ? static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize : 0;
  ::close(fd_);
  fd_ = -1;
  if (rc == ENOSPC)
    throw std::runtime_error(fmt::format("{}: \"{}\" has {} free, but the swap file needs {}", what, dir, size_text(free),
                                         size_text(bytes)));
  throw std::runtime_error(fmt::format("{}: cannot allocate {} in \"{}\": {}", what, size_text(bytes), dir,
                                       std::strerror(rc)));
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ds::offload
