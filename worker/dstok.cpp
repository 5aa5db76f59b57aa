// dstok: text to a byte-level token file. `dstok INPUT... -o OUT.bin` reads the inputs (files,
// directories or globs, the rules of the config's data.path), concatenates their bytes in order and
// writes them as one token file (runtime/data/token_file.h) that data.path can name.
// Exit status: 0, 2 for bad arguments or inputs, 1 for anything else (writing the output).
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/errors.h"
#include "data/corpus.h"
#include "data/token_file.h"

namespace ds {
namespace {

int tokenize(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    for (auto& file : expand_path(input, "input")) {
      if (has_token_magic(file))
        throw ConfigError(fmt::format("input: '{}' is already a token file; dstok reads text", file));
      files.push_back(std::move(file));
    }
  }
  Tokens text = read_tokens(files, DataFormat::text, "input");
  if (text.tokens.empty())
    throw ConfigError(
        fmt::format("input: every file is empty ({} file{})", files.size(), files.size() == 1 ? "" : "s"));
  write_token_file(output, text.tokens, text.vocab);
  std::printf("dstok: %zu files, %zu tokens -> %s\n", text.files, text.tokens.size(), output.c_str());
  return 0;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string output;
  CLI::App app{"dstok: text files to one byte-level token file (llm.c's format) for the config's data.path", "dstok"};
  app.add_option("INPUT", inputs, "Text files, directories (read recursively) or globs, in order")->required();
  app.add_option("-o,--output", output, "The token file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return ds::tokenize(inputs, output);
  } catch (const ds::ConfigError& e) {
    std::fprintf(stderr, "dstok: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstok: error: %s\n", e.what());
    return 1;
  }
}
