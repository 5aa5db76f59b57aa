// Byte-level BPE tokenizers in Hugging Face's tokenizer.json format (GPT-2's kind): the text is split
// into words by GPT-2's pattern, each word's UTF-8 bytes are written as GPT-2's printable stand-in
// characters, and the merges are applied in rank order; added tokens (e.g. "<|endoftext|>") are
// matched first and keep their ids. Ids equal the `tokenizers` package's (tests compare them on
// several corpora); decode(encode(text)) == text for any UTF-8 text.
// Supported: model BPE without dropout, unknown tokens, subword prefixes or suffixes; pre-tokenizer
// and decoder ByteLevel; no normalizer. Anything else in the file is a ConfigError naming the key.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds {

class BpeTokenizer {
 public:
  // Reads `path` (tokenizer.json); errors are ConfigErrors naming the file and the key.
  static BpeTokenizer load(const std::string& path);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // The ids of `text` (UTF-8; invalid UTF-8 is a ConfigError naming `what` and the byte offset).
  std::vector<uint32_t> encode(std::string_view text, const std::string& what = "text") const;
  // The text of `ids`; an id outside the vocabulary is a ConfigError.
  std::string decode(std::span<const uint32_t> ids) const;
  // One more than the largest id (the model's vocabulary and the added tokens).
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  const std::string& path() const { return path_; }

 private:
  BpeTokenizer() = default;
  void encode_word(std::string_view bytes, std::vector<uint32_t>& out) const;
  void encode_plain(std::string_view text, size_t offset, const std::string& what, std::vector<uint32_t>& out) const;

  std::string path_;
  bool add_prefix_space_ = false;
  std::vector<std::string> tokens_;                      // id -> the token's text (stand-in characters)
  std::unordered_map<std::string, uint32_t> ids_;        // token text -> id
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> merges_;  // pair -> (rank, merged id)
  std::vector<std::pair<std::string, uint32_t>> added_;  // added tokens, longest first
  std::string byte_chars_[256];                          // byte -> its stand-in character (UTF-8)
  std::unordered_map<std::string, uint8_t> char_bytes_;  // stand-in character -> byte
  struct Pattern;
  std::unique_ptr<Pattern> pattern_;                     // GPT-2's pre-tokenizer pattern (PCRE2)
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;  // word -> ids
};

}  // namespace ds
