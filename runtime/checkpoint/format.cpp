// Reading and writing checkpoint files (see format.h).
#include "checkpoint/format.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace ds::ckpt {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'C', 'K', 'P', 'T', '\0', '\0'};
constexpr size_t kPreamble = 24;

uint32_t crc_of(const void* data, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(fmt::format("{}: cannot open to sync: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("{}: fsync failed: {}", path, std::strerror(errno)));
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Whether a process with this pid exists on this host (EPERM: it does, someone else's).
bool pid_running(long pid) {
  return pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Writes bytes to temporary_name(path), fsyncs, renames over path, fsyncs the directory.
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = temporary_name(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw CheckpointError(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  }
  fsync_path(tmp, O_RDONLY);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw CheckpointError(fmt::format("{}: cannot rename {} over it: {}", path, tmp, std::strerror(errno)));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T get(const std::string& in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(value));
  return value;
}

}  // namespace

void write_text_atomically(const std::string& path, const std::string& text) { write_atomically(path, text); }

std::string temporary_name(const std::string& path) { return fmt::format("{}.tmp.{}.{}", path, host_name(), ::getpid()); }

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string host = host_name();
  std::vector<std::string> removed;
  std::error_code error;
  std::vector<fs::path> folders = {dir};
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (entry.is_directory(error)) folders.push_back(entry.path());
  for (const fs::path& folder : folders) {
    for (const auto& entry : fs::directory_iterator(folder, error)) {
      const std::string name = entry.path().filename().string();
      const size_t tmp = name.rfind(".tmp.");
      if (tmp == std::string::npos) continue;
      const std::string writer = name.substr(tmp + 5);  // "<host>.<pid>"
      const size_t dot = writer.rfind('.');
      if (dot == std::string::npos || writer.substr(0, dot) != host) continue;
      const std::string digits = writer.substr(dot + 1);
      if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      if (pid_running(std::stol(digits))) continue;
      if (fs::remove(entry.path(), error)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

void write_checkpoint_file(const std::string& path, const CheckpointFile& file) {
  nlohmann::json header = file.header;
  header["tensors"] = nlohmann::json::array();
  size_t offset = 0;
  for (const auto& [name, values] : file.tensors) {
    header["tensors"].push_back({{"name", name}, {"elements", values.size()}, {"offset", offset},
                                 {"crc32", crc_of(values.data(), values.size() * sizeof(float))}});
    offset += values.size() * sizeof(float);
  }
  const std::string text = header.dump();
  std::string bytes(kMagic, sizeof(kMagic));
  put<uint32_t>(bytes, kFormatVersion);
  put<uint32_t>(bytes, crc_of(text.data(), text.size()));
  put<uint64_t>(bytes, text.size());
  bytes += text;
  bytes.reserve(bytes.size() + offset);
  for (const auto& entry : file.tensors)
    bytes.append(reinterpret_cast<const char*>(entry.second.data()), entry.second.size() * sizeof(float));
  write_atomically(path, bytes);
}

CheckpointFile read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_checkpoint_file(bytes, path);
}

CheckpointFile parse_checkpoint_file(const std::string& bytes, const std::string& path) {
  if (bytes.size() < kPreamble || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw CheckpointError(fmt::format("{}: not a dsrun checkpoint file (no DSCKPT magic)", path));
  const auto version = get<uint32_t>(bytes, 8);
  if (version != kFormatVersion)
    throw CheckpointError(fmt::format("{}: checkpoint format version {}; this dsworker reads version {}", path, version,
                                      kFormatVersion));
  const auto header_bytes = get<uint64_t>(bytes, 16);
  if (header_bytes > bytes.size() - kPreamble)
    throw CheckpointError(fmt::format("{}: truncated: {} bytes, but the header alone needs {}", path, bytes.size(),
                                      kPreamble + header_bytes));
  const char* header_text = bytes.data() + kPreamble;
  if (crc_of(header_text, header_bytes) != get<uint32_t>(bytes, 12))
    throw CheckpointError(fmt::format("{}: header checksum mismatch (the file is corrupt)", path));
  CheckpointFile file;
  try {
    file.header = nlohmann::json::parse(header_text, header_text + header_bytes);
    const size_t data = kPreamble + header_bytes;
    for (const auto& t : file.header.at("tensors")) {
      const std::string name = t.at("name").get<std::string>();
      const size_t elements = as_integer<size_t>(t.at("elements")), offset = as_integer<size_t>(t.at("offset"));
      if (offset > bytes.size() - data || elements > (bytes.size() - data - offset) / sizeof(float))
        throw CheckpointError(fmt::format("{}: truncated: {} bytes, tensor {} ends at byte {}", path, bytes.size(), name,
                                          data + offset + elements * sizeof(float)));
      std::vector<float> values(elements);
      if (elements > 0)  // an empty vector's data() may be null, which memcpy must not get
        std::memcpy(values.data(), bytes.data() + data + offset, elements * sizeof(float));
      if (crc_of(values.data(), elements * sizeof(float)) != as_integer<uint32_t>(t.at("crc32")))
        throw CheckpointError(fmt::format("{}: tensor {}: checksum mismatch (the file is corrupt)", path, name));
      file.tensors.emplace_back(name, std::move(values));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{}: malformed header: {}", path, e.what()));
  }
  file.header.erase("tensors");
  return file;
}

}  // namespace ds::ckpt
