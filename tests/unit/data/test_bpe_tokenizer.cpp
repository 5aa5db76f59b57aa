// The byte-level BPE tokenizer on a small hand-made tokenizer.json: merges in rank order, GPT-2's
// word split and space stand-in (U+0120), added tokens, decoding, and the errors for files it does
// not support. (Ids against the `tokenizers` package: tests/integration/test_tokenizer.py.)
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "data/bpe_tokenizer.h"

namespace {

nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(R"({
    "added_tokens": [{"id": 7, "content": "<|endoftext|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
              "vocab": {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120a": 6, "<|endoftext|>": 7},
              "merges": [["a", "b"], ["ab", "c"], ["\u0120", "a"]]}
  })");
}

std::string write(const nlohmann::json& spec) {
  // One file per process: ctest runs this binary's test cases in parallel.
  const std::string path = "/tmp/ds_test_bpe_tokenizer." + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << spec.dump();
  return path;
}

std::string load_error(const nlohmann::json& spec) {
  try {
    ds::BpeTokenizer::load(write(spec));
  } catch (const ds::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

using Ids = std::vector<uint32_t>;

}  // namespace

TEST_CASE("bpe: merges in rank order, words split as GPT-2, added tokens kept whole") {
  const auto t = ds::BpeTokenizer::load(write(small_tokenizer()));
  CHECK(t.vocab_size() == 8);
  CHECK(t.encode("abc a b") == Ids{5, 6, 3, 1});  // "abc" | " a" | " b"
  CHECK(t.encode("ab<|endoftext|>abc") == Ids{4, 7, 5});
  CHECK(t.encode("<|endoftext|><|endoftext|>") == Ids{7, 7});
  CHECK(t.encode("") == Ids{});
  for (const std::string text : {"abc a b", " a  b  ", "cab<|endoftext|> ba"}) {
    CAPTURE(text);
    CHECK(t.decode(t.encode(text)) == text);
  }
}

TEST_CASE("bpe: add_prefix_space and merges written as strings") {
  auto spec = small_tokenizer();
  spec["pre_tokenizer"]["add_prefix_space"] = true;
  spec["model"]["merges"] = {"a b", "ab c", "\u0120 a"};
  const auto t = ds::BpeTokenizer::load(write(spec));
  CHECK(t.encode("a") == Ids{6});       // " a"
  CHECK(t.encode(" a") == Ids{6});      // already starts with a space
  CHECK(t.decode(Ids{6, 3, 1}) == " a b");
}

TEST_CASE("bpe: what it does not support is an error naming the key") {
  auto spec = small_tokenizer();
  spec["model"]["type"] = "WordPiece";
  CHECK(load_error(spec).find(": model.type: \"WordPiece\" is not \"BPE\"") != std::string::npos);
  spec = small_tokenizer();
  spec["model"]["merges"].push_back({"c", "c"});
  CHECK(load_error(spec).find(": model.merges: [\"c\",\"c\"] names a token missing from the vocabulary") !=
        std::string::npos);
  spec = small_tokenizer();
  spec["normalizer"] = {{"type", "NFC"}};
  CHECK(load_error(spec).find(": normalizer: not supported") != std::string::npos);
  spec = small_tokenizer();
  spec["model"]["dropout"] = 0.1;
  CHECK(load_error(spec).find(": model.dropout: 0.1 is not supported") != std::string::npos);
  const auto t = ds::BpeTokenizer::load(write(small_tokenizer()));
  CHECK_THROWS_WITH_AS(t.encode("abz"), doctest::Contains("the byte 0x7a has no token"), ds::ConfigError);
  CHECK_THROWS_WITH_AS(t.encode("ab\xff"), doctest::Contains("text: invalid UTF-8 at byte 2"), ds::ConfigError);
  CHECK_THROWS_WITH_AS(t.decode(Ids{9}), doctest::Contains("token id 9 is not in the vocabulary"), ds::ConfigError);
  std::remove(write(small_tokenizer()).c_str());
}
