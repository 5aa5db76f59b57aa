// The dsrun <-> agent frames: every message survives a round trip byte for byte, in any
// fragmentation, and malformed input is rejected with a LaunchError instead of garbage.
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "protocol.h"

using namespace dsrun;
namespace proto = dsrun::protocol;

namespace {

std::string every_byte() {
  std::string s;
  for (int c = 0; c < 256; ++c) s.push_back(static_cast<char>(c));
  return s;
}

proto::NodePlan sample_plan() {
  proto::NodePlan p;
  p.host = "user@node-b";
  p.cwd = "/work dir/with 'quotes'";
  p.argv = {"python3", "train.py", "--name", "a b;c$(rm -rf /)"};
  p.env = {{"NCCL_DEBUG", "INFO"}, {"ODD", every_byte()}, {"EMPTY", ""}};
  p.ranks = {{4, 0, {{"RANK", "4"}}}, {5, 1, {{"RANK", "5"}, {"X", "line1\nline2"}}}};
  p.log_dir = "/tmp/logs";
  p.kill_grace_ms = 1234;
  p.bind_cores = true;
  p.cores = {0, 2, 4};
  p.pass_local_rank = true;
  return p;
}

proto::Message round_trip(const proto::Message& m, size_t piece) {
  std::string bytes = proto::encode(m);
  proto::Decoder d;
  std::optional<proto::Message> out;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    CHECK_FALSE(out.has_value());
    d.feed(bytes.data() + i, std::min(piece, bytes.size() - i));
    if (!out) out = d.next();
  }
  REQUIRE(out.has_value());
  CHECK_FALSE(d.next().has_value());
  return *out;
}

}  // namespace

TEST_CASE("protocol: a node plan round-trips with every byte value in its strings") {
  for (size_t piece : {size_t{1}, size_t{7}, size_t{1} << 20}) {
    auto m = round_trip(sample_plan(), piece);
    auto& p = std::get<proto::NodePlan>(m);
    auto q = sample_plan();
    CHECK(p.host == q.host);
    CHECK(p.cwd == q.cwd);
    CHECK(p.argv == q.argv);
    REQUIRE(p.env.size() == 3);
    CHECK(p.env[1].value == every_byte());
    REQUIRE(p.ranks.size() == 2);
    CHECK(p.ranks[1].rank == 5);
    CHECK(p.ranks[1].local_rank == 1);
    CHECK(p.ranks[1].env[1].value == "line1\nline2");
    CHECK(p.log_dir == q.log_dir);
    CHECK(p.kill_grace_ms == 1234);
    CHECK(p.bind_cores);
    CHECK(p.cores == q.cores);
    CHECK(p.pass_local_rank);
  }
}

TEST_CASE("protocol: agent messages round-trip") {
  CHECK(std::get<proto::Hello>(round_trip(proto::Hello{proto::kVersion, 42}, 3)).pid == 42);
  CHECK(std::get<proto::Started>(round_trip(proto::Started{7, 99}, 3)).pid == 99);
  auto out = std::get<proto::Output>(round_trip(proto::Output{3, 2, every_byte()}, 5));
  CHECK(out.rank == 3);
  CHECK(out.stream == 2);
  CHECK(out.line == every_byte());
  auto ex = std::get<proto::Exited>(round_trip(proto::Exited{2, 0, 9}, 1));
  CHECK(ex.rank == 2);
  CHECK(ex.signal == 9);
  auto stop = std::get<proto::Stop>(round_trip(proto::Stop{2, 0}, 2));
  CHECK(stop.signal == 2);
  CHECK(stop.grace_ms == 0);
  CHECK(std::get<proto::Error>(round_trip(proto::Error{"node-b: boom"}, 4)).message == "node-b: boom");
  CHECK(std::holds_alternative<proto::Done>(round_trip(proto::Done{}, 1)));
  auto progress = std::get<proto::Progress>(round_trip(proto::Progress{{{1, 5200, "allreduce of 8 F32", 4100}, {3, 0, "", 0}}}, 3));
  REQUIRE(progress.ranks.size() == 2);
  CHECK(progress.ranks[0].rank == 1);
  CHECK(progress.ranks[0].silent_ms == 5200);
  CHECK(progress.ranks[0].activity == "allreduce of 8 F32");
  CHECK(progress.ranks[0].activity_ms == 4100);
  CHECK(progress.ranks[1].activity.empty());
  CHECK(std::get<proto::Progress>(round_trip(proto::Progress{}, 1)).ranks.empty());
}

TEST_CASE("protocol: several frames in one read come out in order") {
  std::string bytes = proto::encode(proto::Started{0, 10}) + proto::encode(proto::Output{0, 1, "hi"}) +
                      proto::encode(proto::Exited{0, 3, 0});
  proto::Decoder d;
  d.feed(bytes.data(), bytes.size());
  CHECK(std::holds_alternative<proto::Started>(*d.next()));
  CHECK(std::get<proto::Output>(*d.next()).line == "hi");
  CHECK(std::get<proto::Exited>(*d.next()).code == 3);
  CHECK_FALSE(d.next().has_value());
}

TEST_CASE("protocol: malformed frames are errors") {
  proto::Decoder text;
  std::string banner = "Welcome to node-b!\n";  // a login shell printing to stdout
  text.feed(banner.data(), banner.size());
  CHECK_THROWS_AS(text.next(), LaunchError);

  std::string frame = proto::encode(proto::Output{1, 1, "abc"});
  frame[4] = 99;  // unknown type
  proto::Decoder unknown;
  unknown.feed(frame.data(), frame.size());
  CHECK_THROWS_WITH_AS(unknown.next(), "protocol: unknown message type 99", LaunchError);

  std::string plan = proto::encode(sample_plan());
  plan[8] = 7;  // version field (after length and type): 0x07000000 + 1
  proto::Decoder version;
  version.feed(plan.data(), plan.size());
  CHECK_THROWS_AS(version.next(), LaunchError);
}
