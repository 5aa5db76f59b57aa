// Corpora: the token stream the config's `data` block names, split into training and validation.
//   data.path          a file, a directory (its regular files, recursively) or a glob, or a list of
//                      them; files in order, each directory's and glob's sorted by path (byte order)
//   data.format        "auto" (default: files that start with the token-file magic are token files,
//                      others text), "text" or "tokens"
//   data.tokenizer     a Hugging Face tokenizer.json (byte-level BPE, bpe_tokenizer.h) the text files
//                      are encoded with; without it text is byte-level
//   data.val_fraction  the last fraction of all tokens that is validation, in [0, 0.5]; default 0.1
//   data.eval_interval optimizer steps between validation passes (dsworker); 0 (default): one pass
//                      after the last step only
//   data.eval_samples  validation windows per pass, spread over the ranks; default 512
// Text is byte-level (each byte a token, vocabulary 256), or each file is encoded with the tokenizer;
// files are concatenated with no separator; empty files are skipped. Every error is a ConfigError naming the key and the value (README.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"

namespace ds {

enum class DataFormat { auto_detect, text, tokens };

struct Corpus {
  std::vector<uint16_t> train, val;  // token ids: the first (1 - val_fraction) and the last val_fraction
  int vocab = 0;                     // 256 for byte-level; the tokenizer's; else the token files' recorded size (0 = not recorded)
  size_t files = 0;                  // non-empty files read
  std::shared_ptr<const BpeTokenizer> tokenizer;  // data.tokenizer, else null
  // e.g. "35 files, 1.27 M tokens (byte-level), 1.14 M train / 127 k validation"
  std::string describe() const;
};

// Reads the corpus a config's `data` block (a JSON object) names. Unknown keys are refused.
Corpus load_corpus(const nlohmann::json& data_block);

struct EvalConfig {
  int64_t interval = 0;       // optimizer steps between validation passes; 0: after the last step only
  int64_t max_samples = 512;  // validation windows per pass, all ranks together
};

// The validation schedule of a `data` block (its eval_* keys; the others are load_corpus's).
EvalConfig parse_eval_config(const nlohmann::json& data_block);

// The files `path` names: itself if a regular file; the regular files under it, recursively, sorted,
// if a directory; else the matches of it as a glob(3) pattern, sorted, directories among them
// expanded. `key` names the path in errors ("data.path", "data.path[1]", "input").
std::vector<std::string> expand_path(const std::string& path, const std::string& key);

struct Tokens {
  std::vector<uint16_t> tokens;
  int vocab = 0;     // as Corpus::vocab
  size_t files = 0;  // non-empty files read
};

// The tokens of `files`, concatenated in order, read as `format`, text encoded with `tokenizer` (else
// byte-level); empty files are skipped. Mixing text and token files, or token files of different
// vocabulary sizes, is an error; errors are ConfigErrors that start with `key` and name the file.
Tokens read_tokens(const std::vector<std::string>& files, DataFormat format, const std::string& key,
                   const BpeTokenizer* tokenizer = nullptr);

}  // namespace ds
