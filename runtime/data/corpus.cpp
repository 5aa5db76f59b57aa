// Loading corpora from the config's `data` block (see corpus.h).
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "data/token_file.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

constexpr int kByteVocab = 256;

// A config value as messages show it: strings in single quotes, anything else as JSON.
std::string show(const nlohmann::json& value) {
  return value.is_string() ? fmt::format("'{}'", value.get<std::string>()) : value.dump();
}

// "950", "127 k", "1.27 M", "3.40 G": three significant digits.
std::string format_count(size_t n) {
  if (n < 1000) return std::to_string(n);
  static constexpr const char* units[] = {"k", "M", "G", "T"};
  double v = static_cast<double>(n);
  size_t unit = 0;
  for (v /= 1000; v >= 999.5 && unit + 1 < std::size(units); v /= 1000) ++unit;
  return fmt::format("{:.{}f} {}", v, v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2, units[unit]);
}

// The regular files under `dir`, recursively, sorted by path.
std::vector<std::string> files_under(const std::string& dir, const std::string& key) {
  std::vector<std::string> files;
  try {
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path().string());
  } catch (const fs::filesystem_error& e) {
    throw ConfigError(fmt::format("{}: '{}': cannot list: {}", key, dir, e.code().message()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> glob_matches(const std::string& pattern, const std::string& key) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + (rc == 0 ? matches.gl_pathc : 0));
  ::globfree(&matches);
  if (rc != 0 && rc != GLOB_NOMATCH)
    throw ConfigError(
        fmt::format("{}: '{}': {}", key, pattern, rc == GLOB_NOSPACE ? "out of memory" : "cannot read a directory"));
  std::sort(paths.begin(), paths.end());
  return paths;
}

void append_text(const std::string& file, std::vector<uint16_t>& tokens, const std::string& key) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: {}: cannot read", key, file));
  std::vector<unsigned char> chunk(1 << 20);
  while (in) {
    in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size()));
    tokens.insert(tokens.end(), chunk.begin(), chunk.begin() + in.gcount());
  }
  if (in.bad()) throw ConfigError(fmt::format("{}: {}: read failed", key, file));
}

TokenFile read_token_file_for(const std::string& file, const std::string& key) {
  try {
    return read_token_file(file);
  } catch (const std::runtime_error& e) {
    throw ConfigError(fmt::format("{}: {}", key, e.what()));
  }
}

DataFormat parse_format(const nlohmann::json& data) {
  auto it = data.find("format");
  if (it == data.end()) return DataFormat::auto_detect;
  if (*it == "auto") return DataFormat::auto_detect;
  if (*it == "text") return DataFormat::text;
  if (*it == "tokens") return DataFormat::tokens;
  throw ConfigError(fmt::format("data.format: {} is not one of 'auto', 'text', 'tokens'", show(*it)));
}

double parse_val_fraction(const nlohmann::json& data) {
  auto it = data.find("val_fraction");
  if (it == data.end()) return 0.1;
  if (!it->is_number() || !(it->get<double>() >= 0.0 && it->get<double>() <= 0.5))
    throw ConfigError(fmt::format("data.val_fraction: {} is not a number in [0, 0.5]", show(*it)));
  return it->get<double>();
}

// The files data.path names, in order.
std::vector<std::string> data_files(const nlohmann::json& data) {
  auto it = data.find("path");
  if (it == data.end())
    throw ConfigError(
        "data.path: missing (a file, a directory or a glob of the training text or tokens, or a list of them)");
  if (it->is_string()) return expand_path(it->get<std::string>(), "data.path");
  if (!it->is_array() || it->empty() ||
      !std::all_of(it->begin(), it->end(), [](const auto& p) { return p.is_string(); }))
    throw ConfigError(fmt::format("data.path: {} is not a path or a non-empty list of paths", show(*it)));
  std::vector<std::string> files;
  for (size_t i = 0; i < it->size(); ++i) {
    auto more = expand_path((*it)[i].get<std::string>(), fmt::format("data.path[{}]", i));
    files.insert(files.end(), more.begin(), more.end());
  }
  return files;
}

}  // namespace

std::string Corpus::describe() const {
  const std::string vocabulary = tokenizer          ? fmt::format("BPE {}, vocabulary {}", tokenizer->path(), vocab)
                                 : vocab == kByteVocab ? "byte-level"
                                 : vocab == 0          ? "vocabulary size not recorded"
                                                       : fmt::format("vocabulary {}", vocab);
  return fmt::format("{} file{}, {} tokens ({}), {} train / {} validation", files, files == 1 ? "" : "s",
                     format_count(train.size() + val.size()), vocabulary, format_count(train.size()),
                     format_count(val.size()));
}

std::vector<std::string> expand_path(const std::string& path, const std::string& key) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::is_regular_file(status)) return {path};
  if (fs::is_directory(status)) {
    auto files = files_under(path, key);
    if (files.empty()) throw ConfigError(fmt::format("{}: '{}' is a directory with no files", key, path));
    return files;
  }
  if (fs::exists(status)) throw ConfigError(fmt::format("{}: '{}' is not a regular file or a directory", key, path));
  std::vector<std::string> files;
  for (const auto& match : glob_matches(path, key)) {
    if (fs::is_regular_file(match, error)) {
      files.push_back(match);
    } else if (fs::is_directory(match, error)) {
      auto more = files_under(match, key);
      files.insert(files.end(), more.begin(), more.end());
    }
  }
  if (files.empty()) throw ConfigError(fmt::format("{}: '{}' matches no file", key, path));
  return files;
}

Tokens read_tokens(const std::vector<std::string>& files, DataFormat format, const std::string& key,
                   const BpeTokenizer* tokenizer) {
  Tokens out;
  std::string a_text_file, a_token_file;  // the first of each kind, for the mixing error
  auto refuse_mixing = [&] {
    throw ConfigError(fmt::format("{}: mixes text and token files ({} is text, {} is a token file); "
                                  "convert the text with dstok, or set data.format",
                                  key, a_text_file, a_token_file));
  };
  for (const auto& file : files) {
    std::error_code error;
    const uintmax_t size = fs::file_size(file, error);
    if (error) throw ConfigError(fmt::format("{}: {}: cannot read: {}", key, file, error.message()));
    if (size == 0) continue;
    ++out.files;
    if (format == DataFormat::tokens || (format == DataFormat::auto_detect && has_token_magic(file))) {
      TokenFile tf = read_token_file_for(file, key);
      if (a_token_file.empty()) {
        a_token_file = file;
        if (!a_text_file.empty()) refuse_mixing();
        out.vocab = tf.vocab;
      } else if (tf.vocab != out.vocab) {
        throw ConfigError(fmt::format("{}: token files of different vocabulary sizes: {} records {}, {} records {}",
                                      key, a_token_file, out.vocab, file, tf.vocab));
      }
      if (out.tokens.empty())
        out.tokens = std::move(tf.tokens);
      else
        out.tokens.insert(out.tokens.end(), tf.tokens.begin(), tf.tokens.end());
    } else {
      if (a_text_file.empty()) a_text_file = file;
      if (!a_token_file.empty()) refuse_mixing();
      if (tokenizer) {
        out.vocab = tokenizer->vocab_size();
        std::vector<uint16_t> bytes;
        append_text(file, bytes, key);
        const std::string text(bytes.begin(), bytes.end());
        for (uint32_t id : tokenizer->encode(text, fmt::format("{}: {}", key, file)))
          out.tokens.push_back(static_cast<uint16_t>(id));
      } else {
        out.vocab = kByteVocab;
        append_text(file, out.tokens, key);
      }
    }
  }
  return out;
}

Corpus load_corpus(const nlohmann::json& data) {
  if (!data.is_object()) throw ConfigError(fmt::format("data: {} is not an object", show(data)));
  for (const auto& [key, value] : data.items())
    if (key != "path" && key != "format" && key != "tokenizer" && key != "val_fraction" && key != "eval_interval" &&
        key != "eval_samples")
      throw ConfigError(fmt::format(
          "data.{}: unknown key (data takes path, format, tokenizer, val_fraction, eval_interval and eval_samples)",
          key));
  const DataFormat format = parse_format(data);
  const double val_fraction = parse_val_fraction(data);
  const std::vector<std::string> files = data_files(data);

  std::shared_ptr<const BpeTokenizer> tokenizer;
  if (auto it = data.find("tokenizer"); it != data.end()) {
    if (!it->is_string()) throw ConfigError(fmt::format("data.tokenizer: {} is not a path", show(*it)));
    try {
      tokenizer = std::make_shared<const BpeTokenizer>(BpeTokenizer::load(it->get<std::string>()));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("data.tokenizer: {}", e.what()));
    }
  }
  Tokens all = read_tokens(files, format, "data.path", tokenizer.get());
  if (all.tokens.empty())
    throw ConfigError(fmt::format("data.path: {}: every file is empty ({} file{})", show(data.at("path")), files.size(),
                                  files.size() == 1 ? "" : "s"));
  const size_t n_val = static_cast<size_t>(std::llround(static_cast<double>(all.tokens.size()) * val_fraction));
  Corpus corpus;
  corpus.val.assign(all.tokens.end() - static_cast<std::ptrdiff_t>(n_val), all.tokens.end());
  all.tokens.resize(all.tokens.size() - n_val);
  corpus.train = std::move(all.tokens);
  corpus.vocab = all.vocab;
  corpus.files = all.files;
  corpus.tokenizer = std::move(tokenizer);
  return corpus;
}

EvalConfig parse_eval_config(const nlohmann::json& data) {
  EvalConfig eval;
  auto integer = [&](const char* key, int64_t fallback, int64_t least) {
    auto it = data.find(key);
    if (it == data.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < least)
      throw ConfigError(fmt::format("data.{}: {} is not an integer >= {}", key, show(*it), least));
    return it->get<int64_t>();
  };
  eval.interval = integer("eval_interval", eval.interval, 0);
  eval.max_samples = integer("eval_samples", eval.max_samples, 1);
  return eval;
}

}  // namespace ds
