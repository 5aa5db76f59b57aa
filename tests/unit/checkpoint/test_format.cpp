// Checkpoint files: a round trip keeps every value and header key; every kind of damage (a flipped
// byte in a tensor or the header, truncation, another format version, no magic) is an error naming
// the file and the problem; writes leave no temporary file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/format.h"

namespace fs = std::filesystem;
using ds::ckpt::CheckpointError;
using ds::ckpt::CheckpointFile;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ds_ckpt_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

CheckpointFile sample() {
  CheckpointFile f;
  f.header = {{"kind", "optim_states"}, {"rank", 1}, {"runs", {{0, 3}}}};
  f.tensors = {{"master", {1.5f, -2.0f, 3.25f}}, {"exp_avg", {0.0f, 1e-30f, -0.0f}}};
  return f;
}

std::string read_error(const std::string& path) {
  try {
    ds::ckpt::read_checkpoint_file(path);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

void patch(const std::string& path, std::streamoff at, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("checkpoint file: a round trip keeps the header and every value bit for bit") {
  TempDir dir;
  const std::string path = (dir.path / "x.dsckpt").string();
  ds::ckpt::write_checkpoint_file(path, sample());
  const CheckpointFile back = ds::ckpt::read_checkpoint_file(path);
  CHECK(back.header == sample().header);
  REQUIRE(back.tensors.size() == 2);
  CHECK(back.tensors[0].first == "master");
  CHECK(std::memcmp(back.tensors[1].second.data(), sample().tensors[1].second.data(), 3 * sizeof(float)) == 0);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);  // no temporary left
}

TEST_CASE("checkpoint file: damage is reported with the file and what is wrong") {
  TempDir dir;
  const std::string path = (dir.path / "x.dsckpt").string();
  ds::ckpt::write_checkpoint_file(path, sample());
  const auto size = static_cast<std::streamoff>(fs::file_size(path));

  patch(path, size - 1, "\x7f");  // the last byte of exp_avg
  CHECK(read_error(path) == path + ": tensor exp_avg: checksum mismatch (the file is corrupt)");

  ds::ckpt::write_checkpoint_file(path, sample());
  patch(path, 30, "#");  // inside the header
  CHECK(read_error(path) == path + ": header checksum mismatch (the file is corrupt)");

  ds::ckpt::write_checkpoint_file(path, sample());
  fs::resize_file(path, static_cast<uintmax_t>(size - 5));
  CHECK(read_error(path).starts_with(path + ": truncated: "));

  ds::ckpt::write_checkpoint_file(path, sample());
  patch(path, 8, std::string("\x02\0\0\0", 4));
  CHECK(read_error(path) == path + ": checkpoint format version 2; this dsworker reads version 1");

  patch(path, 0, "XX");
  CHECK(read_error(path) == path + ": not a dsrun checkpoint file (no DSCKPT magic)");
  CHECK(read_error((dir.path / "none").string()).starts_with((dir.path / "none").string() + ": cannot open"));
}
