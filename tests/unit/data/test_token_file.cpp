// Token files: the llm.c layout byte for byte, round trips, every kind of corruption refused with
// the file named, and writes that never leave a partial or temporary file behind.
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>

#include "data/token_file.h"
#include "data_test_util.h"

using ds::read_token_file;
using ds::write_token_file;
using ds::test::error_of;
using ds::test::TempDir;

namespace {

int32_t header_slot(const std::string& bytes, int slot) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * slot, 4);
  return v;
}

// Writes a valid 5-token file, lets `corrupt` change its bytes, and returns the reader's error.
template <typename F>
std::string corruption_error(const TempDir& dir, F corrupt) {
  const std::string path = dir / "t.bin";
  const std::vector<uint16_t> tokens{1, 2, 3, 4, 5};
  write_token_file(path, tokens, 256);
  std::string bytes = ds::test::read_bytes(path);
  corrupt(bytes);
  dir.write("t.bin", bytes);
  std::string message = error_of<std::runtime_error>([&] { read_token_file(path); });
  CHECK(message.find(path) != std::string::npos);
  return message;
}

void set_slot(std::string& bytes, int slot, int32_t value) { std::memcpy(bytes.data() + 4 * slot, &value, 4); }

}  // namespace

TEST_CASE("token file: the layout is llm.c's: 256 int32 header then uint16 tokens") {
  TempDir dir;
  const std::vector<uint16_t> tokens{0, 1, 65535, 300, 7};
  write_token_file(dir / "t.bin", tokens, 0);
  const std::string bytes = ds::test::read_bytes(dir / "t.bin");
  REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
  CHECK(header_slot(bytes, 0) == 20240520);
  CHECK(header_slot(bytes, 1) == 1);
  CHECK(header_slot(bytes, 2) == 5);
  for (int slot = 3; slot < 256; ++slot) CHECK(header_slot(bytes, slot) == 0);
  CHECK(std::memcmp(bytes.data() + 1024, "\x00\x00\x01\x00\xff\xff\x2c\x01\x07\x00", 10) == 0);
}

TEST_CASE("token file: a round trip keeps the tokens and the vocabulary size") {
  TempDir dir;
  const std::vector<uint16_t> tokens{50256, 0, 17, 50000, 3};
  write_token_file(dir / "t.bin", tokens, 50257);
  const ds::TokenFile file = read_token_file(dir / "t.bin");
  CHECK(file.tokens == tokens);
  CHECK(file.vocab == 50257);
  CHECK(header_slot(ds::test::read_bytes(dir / "t.bin"), 3) == 50257);
  CHECK(ds::has_token_magic(dir / "t.bin"));
  CHECK_FALSE(ds::has_token_magic(dir.write("text.txt", "hello world")));
  CHECK_FALSE(ds::has_token_magic(dir.write("short.txt", "\x98")));
}

TEST_CASE("token file: every corruption is refused naming the file") {
  TempDir dir;
  CHECK(corruption_error(dir, [](std::string& b) { set_slot(b, 0, 20240521); }).find("not a token file") !=
        std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { set_slot(b, 1, 2); }).find("version 2") != std::string::npos);
  std::string truncated = corruption_error(dir, [](std::string& b) { b.pop_back(); });
  CHECK(truncated.find("1033 bytes") != std::string::npos);
  CHECK(truncated.find("= 1034 bytes (truncated)") != std::string::npos);
  std::string extra = corruption_error(dir, [](std::string& b) { b.push_back('x'); });
  CHECK(extra.find("1035 bytes") != std::string::npos);
  CHECK(extra.find("= 1034 bytes (extra bytes at the end)") != std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { set_slot(b, 2, 0); }).find("says 0 tokens") != std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { b.resize(100); }).find("100 bytes, shorter than") !=
        std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { b = "abc"; }).find("3 bytes, shorter than") != std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { set_slot(b, 3, 70000); }).find("vocabulary size 70000") !=
        std::string::npos);
  CHECK(corruption_error(dir, [](std::string& b) { set_slot(b, 3, 4); }).find("token 4 at position 3") !=
        std::string::npos);
  CHECK(error_of<std::runtime_error>([&] { read_token_file(dir / "missing.bin"); }).find(dir / "missing.bin") !=
        std::string::npos);
}

TEST_CASE("token file: a write replaces the file whole and leaves no temporary file") {
  TempDir dir;
  write_token_file(dir / "t.bin", std::vector<uint16_t>(1000, 9), 256);
  write_token_file(dir / "t.bin", std::vector<uint16_t>{1, 2}, 256);
  CHECK(read_token_file(dir / "t.bin").tokens == std::vector<uint16_t>{1, 2});
  CHECK(dir.entries() == std::vector<std::string>{"t.bin"});
}

TEST_CASE("token file: writes that cannot be valid are refused and leave nothing") {
  TempDir dir;
  CHECK(error_of<std::runtime_error>([&] { write_token_file(dir / "t.bin", {}, 256); }).find("at least one token") !=
        std::string::npos);
  CHECK(error_of<std::runtime_error>([&] { write_token_file(dir / "t.bin", std::vector<uint16_t>{256}, 256); })
            .find("token 256 at position 0") != std::string::npos);
  CHECK(error_of<std::runtime_error>([&] { write_token_file(dir / "t.bin", std::vector<uint16_t>{1}, -1); })
            .find("vocabulary size -1") != std::string::npos);
  CHECK(error_of<std::runtime_error>([&] {
          write_token_file(dir / "no/such/dir/t.bin", std::vector<uint16_t>{1}, 256);
        }).find(dir / "no/such/dir/t.bin") != std::string::npos);
  CHECK(dir.entries().empty());
}
