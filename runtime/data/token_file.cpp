// Reading and writing token files (format in token_file.h).
#include "data/token_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ds {
namespace {

static_assert(std::endian::native == std::endian::little, "token files are read and written as little-endian memory");

using Header = std::array<int32_t, kTokenFileHeaderBytes / sizeof(int32_t)>;

// errno 0 after a failed read: the file ended early (it shrank while being read).
[[noreturn]] void fail_errno(const std::string& path, const char* what) {
  throw std::runtime_error(
      fmt::format("{}: cannot {}: {}", path, what, errno != 0 ? std::strerror(errno) : "unexpected end of file"));
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path, "write");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void check_vocab(const std::string& path, int64_t vocab) {
  if (vocab < 0 || vocab > kMaxVocab)
    throw std::runtime_error(fmt::format("{}: vocabulary size {} is not in [0, {}]", path, vocab, kMaxVocab));
}

// Every token < vocab (when vocab is known).
void check_tokens(const std::string& path, std::span<const uint16_t> tokens, int vocab) {
  if (vocab == 0) return;
  auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint16_t t) { return t >= vocab; });
  if (bad != tokens.end())
    throw std::runtime_error(fmt::format("{}: token {} at position {} is outside the vocabulary of {}", path, *bad,
                                         bad - tokens.begin(), vocab));
}

// Checks the header of a file of `size` bytes (only its first `size` bytes are read when shorter
// than a header) and returns its token count N.
int64_t checked_token_count(const std::string& path, const Header& header, uintmax_t size) {
  if (size >= sizeof(int32_t) && header[0] != kTokenFileMagic)
    throw std::runtime_error(fmt::format("{}: not a token file: starts with {} where the magic {} should be", path,
                                         header[0], kTokenFileMagic));
  if (size < kTokenFileHeaderBytes)
    throw std::runtime_error(
        fmt::format("{}: {} bytes, shorter than a token file's {}-byte header", path, size, kTokenFileHeaderBytes));
  if (header[1] != kTokenFileVersion)
    throw std::runtime_error(
        fmt::format("{}: token file version {}; only version {} is supported", path, header[1], kTokenFileVersion));
  const int64_t n = header[2];
  if (n <= 0)
    throw std::runtime_error(fmt::format("{}: the header says {} tokens; a token file holds at least one", path, n));
  const uintmax_t expected = kTokenFileHeaderBytes + 2 * static_cast<uintmax_t>(n);
  if (size != expected)
    throw std::runtime_error(fmt::format("{}: {} bytes, but a token file of {} tokens has {} + 2 x {} = {} bytes ({})",
                                         path, size, n, kTokenFileHeaderBytes, n, expected,
                                         size < expected ? "truncated" : "extra bytes at the end"));
  check_vocab(path, header[3]);
  return n;
}

}  // namespace

void write_token_file(const std::string& path, std::span<const uint16_t> tokens, int vocab) {
  if (tokens.empty()) throw std::runtime_error(fmt::format("{}: a token file needs at least one token", path));
  if (tokens.size() > INT32_MAX)
    throw std::runtime_error(
        fmt::format("{}: {} tokens, more than a token file holds ({})", path, tokens.size(), INT32_MAX));
  check_vocab(path, vocab);
  check_tokens(path, tokens, vocab);
  Header header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = vocab;

  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail_errno(temp, "create");
  try {
    write_all(fd, header.data(), sizeof(header), temp);
    write_all(fd, tokens.data(), tokens.size_bytes(), temp);
    if (::fsync(fd) != 0) fail_errno(temp, "sync");
    if (::close(std::exchange(fd, -1)) != 0) fail_errno(temp, "close");
    if (::rename(temp.c_str(), path.c_str()) != 0) fail_errno(path, fmt::format("rename {} to it", temp).c_str());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
}

TokenFile read_token_file(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) throw std::runtime_error(fmt::format("{}: cannot read: {}", path, error.message()));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_errno(path, "read");
  Header header{};
  const auto header_bytes = static_cast<std::streamsize>(std::min<uintmax_t>(size, sizeof(header)));
  if (!in.read(reinterpret_cast<char*>(header.data()), header_bytes)) fail_errno(path, "read");
  const int64_t n = checked_token_count(path, header, size);

  TokenFile file;
  file.vocab = header[3];
  file.tokens.resize(static_cast<size_t>(n));
  if (!in.read(reinterpret_cast<char*>(file.tokens.data()), static_cast<std::streamsize>(2 * n)))
    fail_errno(path, "read");
  check_tokens(path, file.tokens, file.vocab);
  return file;
}

TokenFile parse_token_file(std::string_view bytes, const std::string& path) {
  Header header{};
  std::memcpy(header.data(), bytes.data(), std::min(bytes.size(), sizeof(header)));
  const int64_t n = checked_token_count(path, header, bytes.size());
  TokenFile file;
  file.vocab = header[3];
  file.tokens.resize(static_cast<size_t>(n));
  std::memcpy(file.tokens.data(), bytes.data() + kTokenFileHeaderBytes, static_cast<size_t>(2 * n));
  check_tokens(path, file.tokens, file.vocab);
  return file;
}

bool has_token_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof(magic)) && magic == kTokenFileMagic;
}

}  // namespace ds
