// Corpora from the `data` block: which files a path names and in what order (directories, globs,
// lists), text as bytes, token files as they are, the validation split, and every refusal naming
// the key and the value.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "data/corpus.h"
#include "data/token_file.h"
#include "data_test_util.h"

using ds::ConfigError;
using ds::load_corpus;
using ds::test::byte_tokens;
using ds::test::error_of;
using ds::test::TempDir;
using json = nlohmann::json;

namespace {

// All of the corpus (no validation split) read from `path`.
std::vector<uint16_t> all_tokens(const json& path) {
  return load_corpus({{"path", path}, {"val_fraction", 0}}).train;
}

std::string corpus_error(const json& data) {
  return error_of<ConfigError>([&] { load_corpus(data); });
}

}  // namespace

TEST_CASE("corpus: a directory is every file under it recursively in path order") {
  TempDir dir;
  dir.write("d/c.txt", "4");
  dir.write("d/b/y/x.txt", "3");
  dir.write("d/a/z.txt", "2");
  dir.write("d/a.txt", "1");
  CHECK(all_tokens(dir / "d") == byte_tokens("1234"));
  CHECK(load_corpus({{"path", dir / "d"}}).files == 4);
}

TEST_CASE("corpus: a glob is its matches in sorted order with directories expanded") {
  TempDir dir;
  dir.write("b.txt", "B");
  dir.write("a.txt", "A");
  dir.write("c.md", "C");
  dir.write("sub.txt/inner", "I");
  CHECK(all_tokens(dir / "*.txt") == byte_tokens("ABI"));
  CHECK(all_tokens(dir / "[bc]*") == byte_tokens("BC"));
}

TEST_CASE("corpus: a list of paths is read in the order given") {
  TempDir dir;
  const std::string one = dir.write("1.txt", "one "), two = dir.write("2.txt", "two ");
  dir.write("more/x", "x");
  CHECK(all_tokens(json::array({two, one, dir / "more"})) == byte_tokens("two one x"));
}

TEST_CASE("corpus: empty files are skipped and all-empty is an error naming data.path") {
  TempDir dir;
  dir.write("d/a", "");
  dir.write("d/b", "hi");
  dir.write("d/c", "");
  ds::Corpus corpus = load_corpus({{"path", dir / "d"}, {"val_fraction", 0}});
  CHECK(corpus.train == byte_tokens("hi"));
  CHECK(corpus.files == 1);
  dir.write("e/a", "");
  dir.write("e/b", "");
  CHECK(corpus_error({{"path", dir / "e"}}) == "data.path: '" + (dir / "e") + "': every file is empty (2 files)");
}

TEST_CASE("corpus: a missing path or one that matches nothing names data.path and the value") {
  TempDir dir;
  CHECK(corpus_error(json::object()).starts_with("data.path: missing"));
  CHECK(corpus_error({{"path", "/nope/*.txt"}}) == "data.path: '/nope/*.txt' matches no file");
  CHECK(corpus_error({{"path", dir / "absent.txt"}}) == "data.path: '" + (dir / "absent.txt") + "' matches no file");
  std::filesystem::create_directory(dir / "empty");
  CHECK(corpus_error({{"path", dir / "empty"}}) == "data.path: '" + (dir / "empty") + "' is a directory with no files");
  CHECK(corpus_error({{"path", json::array({dir.write("a", "a"), "/nope"})}}) ==
        "data.path[1]: '/nope' matches no file");
  CHECK(corpus_error({{"path", 3}}) == "data.path: 3 is not a path or a non-empty list of paths");
  CHECK(corpus_error({{"path", json::array()}}) == "data.path: [] is not a path or a non-empty list of paths");
}

TEST_CASE("corpus: the last val_fraction of the tokens is validation") {
  TempDir dir;
  std::string text(1000, 'a');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  dir.write("x/1", text.substr(0, 400));
  dir.write("x/2", text.substr(400));
  ds::Corpus corpus = load_corpus({{"path", dir / "x"}});  // default 0.1
  CHECK(corpus.train == byte_tokens(text.substr(0, 900)));
  CHECK(corpus.val == byte_tokens(text.substr(900)));
  CHECK(corpus.vocab == 256);
  CHECK(corpus.describe() == "2 files, 1.00 k tokens (byte-level), 900 train / 100 validation");
  for (auto [fraction, val] : {std::pair{0.0, 0}, {0.29, 290}, {0.5, 500}, {0.0005, 1}}) {
    CAPTURE(fraction);
    ds::Corpus c = load_corpus({{"path", dir / "x"}, {"val_fraction", fraction}});
    CHECK(c.val.size() == static_cast<size_t>(val));
    CHECK(c.train.size() == 1000 - static_cast<size_t>(val));
  }
}

TEST_CASE("corpus: describe() counts with three significant digits") {
  TempDir dir;
  dir.write("big.txt", std::string(1'270'000, 'x'));
  CHECK(load_corpus({{"path", dir / "big.txt"}}).describe() ==
        "1 file, 1.27 M tokens (byte-level), 1.14 M train / 127 k validation");
}

TEST_CASE("corpus: token files keep their tokens and vocabulary") {
  TempDir dir;
  std::filesystem::create_directory(dir / "t");
  ds::write_token_file(dir / "t/0.bin", std::vector<uint16_t>{50000, 1, 2}, 50257);
  ds::write_token_file(dir / "t/1.bin", std::vector<uint16_t>{3, 50256}, 50257);
  ds::Corpus corpus = load_corpus({{"path", dir / "t"}, {"val_fraction", 0.2}});
  CHECK(corpus.train == std::vector<uint16_t>{50000, 1, 2, 3});
  CHECK(corpus.val == std::vector<uint16_t>{50256});
  CHECK(corpus.vocab == 50257);
  CHECK(corpus.describe() == "2 files, 5 tokens (vocabulary 50257), 4 train / 1 validation");
  CHECK(load_corpus({{"path", dir / "t"}, {"format", "tokens"}}).vocab == 50257);
}

TEST_CASE("corpus: format auto reads a token file as tokens and format text as bytes") {
  TempDir dir;
  ds::write_token_file(dir / "t.bin", std::vector<uint16_t>{1}, 256);
  CHECK(all_tokens(dir / "t.bin") == std::vector<uint16_t>{1});
  CHECK(load_corpus({{"path", dir / "t.bin"}, {"format", "text"}, {"val_fraction", 0}}).train.size() == 1026);
}

TEST_CASE("corpus: mixed or mismatched inputs are refused") {
  TempDir dir;
  const std::string text = dir.write("a.txt", "some text");
  ds::write_token_file(dir / "b.bin", std::vector<uint16_t>{1, 2}, 256);
  ds::write_token_file(dir / "c.bin", std::vector<uint16_t>{1, 2}, 50257);
  const std::string mixed = corpus_error({{"path", dir / "*"}});
  CHECK(mixed.starts_with("data.path: mixes text and token files (" + text + " is text, " + (dir / "b.bin")));
  CHECK(corpus_error({{"path", {dir / "b.bin", text}}}).starts_with("data.path: mixes text and token files"));
  CHECK(corpus_error({{"path", dir / "*.bin"}}) ==
        "data.path: token files of different vocabulary sizes: " + (dir / "b.bin") + " records 256, " +
            (dir / "c.bin") + " records 50257");
  const std::string as_tokens = corpus_error({{"path", text}, {"format", "tokens"}});
  CHECK(as_tokens.starts_with("data.path: " + text + ": not a token file: starts with"));
  dir.write("d.bin", ds::test::read_bytes(dir / "b.bin") + "x");
  CHECK(corpus_error({{"path", dir / "d.bin"}}).starts_with("data.path: " + (dir / "d.bin") + ": 1029 bytes"));
}

TEST_CASE("corpus: unknown keys and bad values name the key") {
  TempDir dir;
  const std::string text = dir.write("a.txt", "text");
  CHECK(corpus_error({{"pth", text}}) == "data.pth: unknown key (data takes path, format, tokenizer, val_fraction, eval_interval and eval_samples)");
  CHECK(corpus_error({{"path", text}, {"seq_len", 64}}).starts_with("data.seq_len: unknown key"));
  CHECK(corpus_error({{"path", text}, {"format", "bin"}}) ==
        "data.format: 'bin' is not one of 'auto', 'text', 'tokens'");
  CHECK(corpus_error({{"path", text}, {"val_fraction", 0.6}}) == "data.val_fraction: 0.6 is not a number in [0, 0.5]");
  CHECK(corpus_error({{"path", text}, {"val_fraction", "0.1"}}) ==
        "data.val_fraction: '0.1' is not a number in [0, 0.5]");
  CHECK(corpus_error(json::array()) == "data: [] is not an object");
}

TEST_CASE("corpus: the eval keys default to one pass of 512 windows at the end and are checked") {
  const ds::EvalConfig none = ds::parse_eval_config(json::object());
  CHECK(none.interval == 0);
  CHECK(none.max_samples == 512);
  const ds::EvalConfig set = ds::parse_eval_config({{"path", "x"}, {"eval_interval", 50}, {"eval_samples", 64}});
  CHECK(set.interval == 50);
  CHECK(set.max_samples == 64);
  auto error = [](json data) { return error_of<ConfigError>([&] { ds::parse_eval_config(data); }); };
  CHECK(error({{"eval_interval", -1}}) == "data.eval_interval: -1 is not an integer >= 0");
  CHECK(error({{"eval_interval", 2.5}}) == "data.eval_interval: 2.5 is not an integer >= 0");
  CHECK(error({{"eval_samples", 0}}) == "data.eval_samples: 0 is not an integer >= 1");
}
