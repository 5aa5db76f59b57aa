// dstok: text to a token file. `dstok INPUT... -o OUT.bin [--tokenizer tokenizer.json]` reads the inputs
// (files, directories or globs, the rules of the config's data.path), takes their bytes, or their ids
// under a byte-level BPE tokenizer, in order, and writes one token file (runtime/data/token_file.h)
// that data.path can name.
// Exit status: 0, 2 for bad arguments or inputs, 1 for anything else (writing the output).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/errors.h"
#include "data/corpus.h"
#include "data/token_file.h"

namespace ds {
namespace {

int tokenize(const std::vector<std::string>& inputs, const std::string& output, const std::string& tokenizer_path) {
  std::optional<BpeTokenizer> tokenizer;
  if (!tokenizer_path.empty()) tokenizer = BpeTokenizer::load(tokenizer_path);
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    for (auto& file : expand_path(input, "input")) {
      if (has_token_magic(file))
        throw ConfigError(fmt::format("input: '{}' is already a token file; dstok reads text", file));
      files.push_back(std::move(file));
    }
  }
  Tokens text = read_tokens(files, DataFormat::text, "input", tokenizer ? &*tokenizer : nullptr);
  if (text.tokens.empty())
    throw ConfigError(
        fmt::format("input: every file is empty ({} file{})", files.size(), files.size() == 1 ? "" : "s"));
  write_token_file(output, text.tokens, text.vocab);
  std::printf("dstok: %zu files, %zu tokens (%s) -> %s\n", text.files, text.tokens.size(),
              tokenizer ? fmt::format("BPE, vocabulary {}", text.vocab).c_str() : "byte-level", output.c_str());
  return 0;
}

// The text of token files, to `output` (stdout when empty): each id's byte, or its tokenizer text.
int detokenize(const std::vector<std::string>& inputs, const std::string& output, const std::string& tokenizer_path) {
  std::optional<BpeTokenizer> tokenizer;
  if (!tokenizer_path.empty()) tokenizer = BpeTokenizer::load(tokenizer_path);
  std::string text;
  for (const auto& input : inputs) {
    for (const auto& file : expand_path(input, "input")) {
      const TokenFile tf = read_token_file(file);
      if (!tokenizer && tf.vocab != 256)
        throw ConfigError(fmt::format("input: {} holds vocabulary {}, not bytes; give its --tokenizer", file, tf.vocab));
      if (tokenizer) {
        const std::vector<uint32_t> ids(tf.tokens.begin(), tf.tokens.end());
        text += tokenizer->decode(ids);
      } else {
        text.append(tf.tokens.begin(), tf.tokens.end());
      }
    }
  }
  if (output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::ofstream out(output, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out.flush()) throw std::runtime_error(fmt::format("{}: cannot write", output));
  return 0;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string output, tokenizer;
  bool decode = false;
  CLI::App app{"dstok: text files to one token file (llm.c's format; bytes, or BPE ids) for the config's data.path",
               "dstok"};
  app.add_option("INPUT", inputs, "Text files, directories (read recursively) or globs, in order")->required();
  app.add_option("-o,--output", output, "The token file to write (with --decode: the text; default stdout)");
  app.add_flag("--decode", decode, "The other way: token files back to text");
  app.add_option("--tokenizer", tokenizer,
                 "A Hugging Face tokenizer.json (byte-level BPE, e.g. GPT-2's) to encode with; default: bytes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (decode) return ds::detokenize(inputs, output, tokenizer);
    if (output.empty()) throw ds::ConfigError("--output is required (the token file to write)");
    return ds::tokenize(inputs, output, tokenizer);
  } catch (const ds::ConfigError& e) {
    std::fprintf(stderr, "dstok: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstok: error: %s\n", e.what());
    return 1;
  }
}
