// dsrun's checkpoint file format (README.md in this folder): a fixed 24-byte preamble, a JSON
// header, then fp32 tensors, each with a CRC-32 in the header.
//
//   bytes 0-7    magic "DSCKPT\0\0"
//   bytes 8-11   format version (uint32, little endian), kFormatVersion
//   bytes 12-15  CRC-32 of the header bytes
//   bytes 16-23  header length H (uint64)
//   bytes 24-    the header: a JSON object; its "tensors" list gives each tensor's name, element count,
//                byte offset from the end of the header, and CRC-32
//   then         the tensors, float32 little endian
//
// Files are written to a temporary name (NAME.tmp.<hostname>.<pid>), fsync'ed and renamed, so a file
// is either whole or absent; a writer killed before the rename leaves the temporary behind, for
// remove_stale_temporaries.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::ckpt {

inline constexpr uint32_t kFormatVersion = 1;

// Anything wrong with a checkpoint file; the message starts with the file's path.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointFile {
  nlohmann::json header = nlohmann::json::object();  // without "tensors" (added on write, removed on read)
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
};

// v as an integer of type T. A value that is not a JSON integer (a float such as 1e300, text) is a
// json type_error: nlohmann's get<T> would convert a float outside T's range with undefined behaviour.
template <typename T>
T as_integer(const nlohmann::json& v) {
  if (!v.is_number_integer())
    throw nlohmann::json::type_error::create(302, "expected an integer, not " + v.dump(), &v);
  return v.get<T>();
}

// Writes `file` to `path` atomically (temporary file, fsync, rename, fsync of the directory).
void write_checkpoint_file(const std::string& path, const CheckpointFile& file);

// Reads and verifies a file (magic, version, header checksum and JSON, sizes, every tensor's
// checksum). Throws CheckpointError naming the file and what is wrong.
CheckpointFile read_checkpoint_file(const std::string& path);

// The same checks on a file's bytes already in memory; `path` names it in messages.
CheckpointFile parse_checkpoint_file(const std::string& bytes, const std::string& path);

// Writes `text` to `path` atomically, like write_checkpoint_file.
void write_text_atomically(const std::string& path, const std::string& text);

// The temporary name this process writes `path` under: "<path>.tmp.<hostname>.<pid>".
std::string temporary_name(const std::string& path);

// Deletes the temporaries in `dir` and its subfolders (the tags) that a writer on THIS host left
// when it died: the hostname in the name is this host's and no process with that pid runs here
// (this process's own pid counts as running). Another host's temporaries (a shared filesystem) are
// kept, as are older unnamed-host ones (NAME.tmp.<pid>). Returns the paths deleted.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace ds::ckpt
