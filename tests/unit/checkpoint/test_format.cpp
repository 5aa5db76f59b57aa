// Checkpoint files: a round trip keeps every value and header key; every kind of damage (a flipped
// byte in a tensor or the header, truncation, another format version, no magic) is an error naming
// the file and the problem; writes leave no temporary file; the temporaries a dead writer of this
// host left are removed, those of live writers and of other hosts are kept.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

TEST_CASE("checkpoint file: temporaries left by dead writers of this host are removed and no others") {
  TempDir dir;
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof(host) - 1) == 0);
  const std::string mine = (dir.path / "latest").string();
  CHECK(ds::ckpt::temporary_name(mine) == mine + ".tmp." + host + "." + std::to_string(::getpid()));

  const pid_t child = ::fork();  // a writer that has died: its pid runs nothing now
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  fs::create_directories(dir.path / "global_step3");
  const fs::path tag = dir.path / "global_step3";
  const std::vector<fs::path> stale = {dir.path / ("latest.tmp." + std::string(host) + "." + dead),
                                       tag / ("rank_00000_optim_states.dsckpt.tmp." + std::string(host) + "." + dead)};
  const std::vector<fs::path> kept = {
      tag / ("model_states.dsckpt.tmp." + std::string(host) + "." + live),            // its writer runs
      tag / ("rank_00001_optim_states.dsckpt.tmp.other-host." + dead),                  // another host's
      tag / ("rank_00002_optim_states.dsckpt.tmp." + dead),                             // no host in the name
      tag / ("rank_00003_optim_states.dsckpt.tmp." + std::string(host) + ".x" + dead),  // not a pid
      tag / "rank_00000_optim_states.dsckpt", dir.path / "latest"};
  for (const auto& p : stale) std::ofstream(p) << "partial";
  for (const auto& p : kept) std::ofstream(p) << "x";

  std::vector<std::string> removed = ds::ckpt::remove_stale_temporaries(dir.path.string());
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected = {stale[0].string(), stale[1].string()};
  std::sort(expected.begin(), expected.end());
  CHECK(removed == expected);
  for (const auto& p : stale) CHECK_FALSE(fs::exists(p));
  for (const auto& p : kept) CHECK(fs::exists(p));
  CHECK(ds::ckpt::remove_stale_temporaries((dir.path / "none").string()).empty());  // no folder: nothing to do
}
