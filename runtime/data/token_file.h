// Token files: llm.c's format, so its tokenizer scripts and ours read each other's files.
//   header: 256 little-endian int32
//     [0] = 20240520 (magic), [1] = 1 (version), [2] = N, the number of tokens (> 0),
//     [3] = vocabulary size (ours; llm.c leaves it 0 = unknown; byte-level files write 256),
//     [4..255] = 0
//   body:   N little-endian uint16 token ids
// A file is exactly 1024 + 2N bytes. Errors (std::runtime_error) name the file and the bad value.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 256 * sizeof(int32_t);
inline constexpr int kMaxVocab = 65536;  // token ids are uint16

struct TokenFile {
  std::vector<uint16_t> tokens;
  int vocab = 0;  // vocabulary size from header slot 3; 0 = not recorded
};

// Writes `tokens` (at least one, fewer than 2^31, each < vocab when vocab > 0) to a temporary file
// in path's directory, then renames it to `path`: readers never see a partial file.
void write_token_file(const std::string& path, std::span<const uint16_t> tokens, int vocab);

// Reads and checks a token file: magic, version, N > 0, size == 1024 + 2N, vocab in [0, 65536],
// every token < vocab when vocab > 0.
TokenFile read_token_file(const std::string& path);

// The same checks on a whole file's bytes in memory; `path` names it in messages.
TokenFile parse_token_file(std::string_view bytes, const std::string& path);

// Whether the file starts with the token-file magic (false for files shorter than 4 bytes).
bool has_token_magic(const std::string& path);

}  // namespace ds
