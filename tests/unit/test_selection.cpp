// Unit tests for cli/selection: DeepSpeed's tests/unit/launcher/test_run.py cases (parse_resource_filter,
// parse_inclusion_exclusion, num_nodes/num_gpus), the merge quirk, hostfile order, and our stricter
// errors (unknown hosts and slots, bad specs, counts, empty selections).
#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "errors.h"
#include "selection.h"

using namespace dsrun;

namespace {

// "host:s1,s2 host:..." in selection order: easy to compare and readable when a check fails.
std::string show(const Selection& selection) {
  std::string text;
  for (const NodeSlots& node : selection) {
    text += (text.empty() ? "" : " ") + node.host + ":";
    for (size_t i = 0; i < node.slots.size(); ++i) text += (i ? "," : "") + std::to_string(node.slots[i]);
  }
  return text;
}

// The pool a hostfile with these `host slots=N` lines gives.
Selection pool_of(std::vector<std::pair<std::string, int>> hosts) {
  std::vector<HostEntry> entries;
  for (auto& [host, slots] : hosts) entries.push_back({host, slots, static_cast<int>(entries.size()) + 1});
  return pool_from_hostfile(entries);
}

const Selection one_node = pool_of({{"worker-0", 4}});
const Selection two_nodes = pool_of({{"worker-0", 4}, {"worker-1", 4}});

std::string include(const Selection& pool, const std::string& spec) {
  return show(select_resources(pool, {.include = spec}));
}
std::string exclude(const Selection& pool, const std::string& spec) {
  return show(select_resources(pool, {.exclude = spec}));
}

}  // namespace

TEST_CASE("pool_from_hostfile: slots 0..N-1 per host in file order") {
  CHECK(show(pool_of({{"b", 2}, {"a", 0}, {"c", 3}})) == "b:0,1 a: c:0,1,2");
}

TEST_CASE("selection: no include/exclude returns the pool unchanged with 0-slot hosts included") {
  CHECK(show(select_resources(two_nodes, {})) == "worker-0:0,1,2,3 worker-1:0,1,2,3");
  CHECK(show(select_resources(pool_of({{"w0", 2}, {"w1", 0}}), {})) == "w0:0,1 w1:");
}

TEST_CASE("selection: DeepSpeed test_parser_local") {
  CHECK(exclude(one_node, "worker-0:1") == "worker-0:0,2,3");
  CHECK(exclude(one_node, "worker-0:1,2") == "worker-0:0,3");
  CHECK(include(one_node, "worker-0:1") == "worker-0:1");
  CHECK(include(one_node, "worker-0:1,1") == "worker-0:1");
  CHECK(include(one_node, "worker-0:1@worker-0:0,1") == "worker-0:0,1");
  CHECK(include(one_node, "worker-0") == "worker-0:0,1,2,3");
  // DeepSpeed returns {} for these two; we refuse an empty selection.
  CHECK_THROWS_WITH_AS(exclude(one_node, "worker-0"),
                       "selection is empty: no slots left after --exclude 'worker-0'", InputError);
  CHECK_THROWS_WITH_AS(exclude(one_node, "worker-0:0,1,2,3"),
                       "selection is empty: no slots left after --exclude 'worker-0:0,1,2,3'", InputError);
}

TEST_CASE("selection: DeepSpeed test_parser_multinode") {
  CHECK(include(two_nodes, "worker-1:0,3") == "worker-1:0,3");
  CHECK(exclude(two_nodes, "worker-1") == "worker-0:0,1,2,3");
  CHECK(exclude(two_nodes, "worker-0:0,1@worker-1:3") == "worker-0:2,3 worker-1:0,1,2");
}

TEST_CASE("selection: DeepSpeed test_parse_inclusion_exclusion (a bare host means all its slots)") {
  CHECK(include(two_nodes, "worker-0") == "worker-0:0,1,2,3");
  CHECK(include(two_nodes, "worker-0@worker-1:0,2") == "worker-0:0,1,2,3 worker-1:0,2");
  CHECK(include(two_nodes, "worker-1:0,2") == "worker-1:0,2");
  CHECK(exclude(two_nodes, "worker-0:1") == "worker-0:0,2,3 worker-1:0,1,2,3");
}

TEST_CASE("selection: the result is in hostfile order whatever the spec order") {
  const Selection pool = pool_of({{"c", 2}, {"a", 2}, {"b", 2}});
  CHECK(include(pool, "b@c:1@a:0") == "c:1 a:0 b:0,1");
  CHECK(exclude(pool, "b:0@c") == "a:0,1 b:1");
}

TEST_CASE("selection: slot lists are merged and deduplicated and sorted") {
  CHECK(include(one_node, "worker-0:3,1") == "worker-0:1,3");
  CHECK(include(one_node, "worker-0:3@worker-0:0,3") == "worker-0:0,3");
  CHECK(exclude(one_node, "worker-0:2@worker-0:0,2") == "worker-0:1,3");
}

TEST_CASE("selection: merge quirk - a bare name adds nothing when the name also has slots") {
  CHECK(include(two_nodes, "worker-0:1@worker-0") == include(two_nodes, "worker-0:1"));
  CHECK(include(two_nodes, "worker-0@worker-0:1") == "worker-0:1");
  CHECK(exclude(two_nodes, "worker-0:1@worker-0") == exclude(two_nodes, "worker-0:1"));
  CHECK(exclude(two_nodes, "worker-0@worker-0:1") == "worker-0:0,2,3 worker-1:0,1,2,3");
}

TEST_CASE("selection: whitespace around slot numbers is allowed but host names are taken literally") {
  CHECK(include(one_node, "worker-0: 1 ,\t2") == "worker-0:1,2");
  CHECK_THROWS_WITH_AS(include(one_node, " worker-0"), "--include: host ' worker-0' is not in the hostfile",
                       InputError);
}

TEST_CASE("selection: unknown hosts are errors for include and exclude (DeepSpeed test_parser_errors)") {
  CHECK_THROWS_WITH_AS(include(two_nodes, "jeff"), "--include: host 'jeff' is not in the hostfile",
                       InputError);
  CHECK_THROWS_WITH_AS(exclude(two_nodes, "jeff"), "--exclude: host 'jeff' is not in the hostfile",
                       InputError);
  CHECK_THROWS_WITH_AS(exclude(two_nodes, "worker-1@worker-0:1@5"),
                       "--exclude: host '5' is not in the hostfile", InputError);
}

TEST_CASE("selection: slots outside the pool are errors for include and exclude") {
  for (const char* spec : {"worker-0:4", "worker-0:99", "worker-0:0,4"}) {
    CAPTURE(spec);
    CHECK_THROWS_AS(include(one_node, spec), InputError);
    CHECK_THROWS_AS(exclude(one_node, spec), InputError);
  }
  CHECK_THROWS_WITH_AS(include(two_nodes, "worker-1:4"),
                       "--include: host 'worker-1' has no slot 4 (it has 0-3)", InputError);
  CHECK_THROWS_WITH_AS(exclude(two_nodes, "worker-1:4"),
                       "--exclude: host 'worker-1' has no slot 4 (it has 0-3)", InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:-1"),
                       "--include: host 'worker-0' has no slot -1 (it has 0-3)", InputError);
  CHECK_THROWS_WITH_AS(include(pool_of({{"w0", 0}, {"w1", 1}}), "w0:0"),
                       "--include: host 'w0' has no slot 0 (it has none)", InputError);
  CHECK_THROWS_WITH_AS(include(Selection{{"w", {0, 2, 3}}}, "w:1"),
                       "--include: host 'w' has no slot 1 (it has 0,2-3)", InputError);
}

TEST_CASE("selection: malformed specs name the spec and the bad item") {
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:1:2"),
                       "--include 'worker-0:1:2': 'worker-0:1:2' has more than one ':'", InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:x"), "--include 'worker-0:x': slot 'x' is not a number",
                       InputError);
  CHECK_THROWS_WITH_AS(exclude(one_node, "worker-0:"), "--exclude 'worker-0:': slot '' is not a number",
                       InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:1,,2"),
                       "--include 'worker-0:1,,2': slot '' is not a number", InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:1x"), "--include 'worker-0:1x': slot '1x' is not a number",
                       InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0:99999999999"),
                       "--include 'worker-0:99999999999': slot '99999999999' is out of range", InputError);
  CHECK_THROWS_WITH_AS(include(one_node, "worker-0@"), "--include 'worker-0@': '' has no host name",
                       InputError);
  CHECK_THROWS_WITH_AS(exclude(one_node, ":1"), "--exclude ':1': ':1' has no host name", InputError);
}

TEST_CASE("selection: hosts left without slots are dropped once include or exclude is given") {
  const Selection pool = pool_of({{"w0", 2}, {"w1", 0}});
  CHECK(include(pool, "w0@w1") == "w0:0,1");
  CHECK(exclude(pool, "w0:0") == "w0:1");
  CHECK_THROWS_WITH_AS(include(pool, "w1"), "selection is empty: no slots left after --include 'w1'",
                       InputError);
}

TEST_CASE("selection: include and exclude are mutually exclusive (DeepSpeed test_parser_mutual_exclusive)") {
  CHECK_THROWS_WITH_AS(select_resources(two_nodes, {.include = "worker-0", .exclude = "worker-1"}),
                       "--include 'worker-0' and --exclude 'worker-1': the two are mutually exclusive",
                       InputError);
}

TEST_CASE(
    "selection: num_nodes/num_gpus cannot be combined with include/exclude (DeepSpeed "
    "test_num_plus_parser)") {
  const SelectionRequest requests[] = {
      {.include = "worker-0", .num_nodes = 1},
      {.include = "worker-0", .num_nodes = 1, .num_gpus = 1},
      {.include = "worker-0", .num_gpus = 1},
      {.exclude = "worker-0", .num_nodes = 1},
      {.exclude = "worker-0", .num_nodes = 1, .num_gpus = 1},
      {.exclude = "worker-0", .num_gpus = 1},
      {.include = "worker-0", .num_nodes = 0},  // DeepSpeed's check fires for 0 too
  };
  for (const SelectionRequest& request : requests) {
    CAPTURE(request.num_nodes);
    CAPTURE(request.num_gpus);
    CHECK_THROWS_WITH_AS(select_resources(two_nodes, request),
                         "--num_nodes/--num_gpus cannot be combined with --include/--exclude", InputError);
  }
}

TEST_CASE("selection: num_nodes keeps the first N hosts and num_gpus slots 0..N-1 on each") {
  const Selection pool = pool_of({{"w0", 4}, {"w1", 2}, {"w2", 8}});
  CHECK(show(select_resources(pool, {.num_nodes = 1})) == "w0:0,1,2,3");
  CHECK(show(select_resources(pool, {.num_nodes = 2})) == "w0:0,1,2,3 w1:0,1");
  CHECK(show(select_resources(pool, {.num_nodes = 3})) == "w0:0,1,2,3 w1:0,1 w2:0,1,2,3,4,5,6,7");
  CHECK(show(select_resources(pool, {.num_gpus = 2})) == "w0:0,1 w1:0,1 w2:0,1");
  CHECK(show(select_resources(pool, {.num_gpus = 1})) == "w0:0 w1:0 w2:0");
  // num_nodes applies first, so w1's 2 slots do not matter here.
  CHECK(show(select_resources(pool, {.num_nodes = 1, .num_gpus = 3})) == "w0:0,1,2");
}

TEST_CASE("selection: num_nodes/num_gpus errors") {
  const Selection pool = pool_of({{"w0", 4}, {"w1", 2}});
  CHECK_THROWS_WITH_AS(select_resources(pool, {.num_nodes = 0}), "--num_nodes 0: must be at least 1",
                       InputError);
  CHECK_THROWS_WITH_AS(select_resources(pool, {.num_nodes = -2}), "--num_nodes -2: must be at least 1",
                       InputError);
  CHECK_THROWS_WITH_AS(select_resources(pool, {.num_gpus = 0}), "--num_gpus 0: must be at least 1",
                       InputError);
  CHECK_THROWS_WITH_AS(select_resources(pool, {.num_nodes = 3}),
                       "--num_nodes 3 is more than the number of hosts with slots (2)", InputError);
  CHECK_THROWS_WITH_AS(select_resources(pool, {.num_gpus = 3}), "--num_gpus 3: host 'w1' has slots=2",
                       InputError);
}

TEST_CASE("selection: an empty result is an error naming the flags that emptied it") {
  CHECK_THROWS_WITH_AS(select_resources(pool_of({{"w0", 2}}), {.exclude = "w0:0,1"}),
                       "selection is empty: no slots left after --exclude 'w0:0,1'", InputError);
  CHECK_THROWS_WITH_AS(select_resources(pool_of({{"w0", 0}, {"w1", 0}}), {}),
                       "selection is empty: every host has slots=0", InputError);
}

TEST_CASE("select_resources: num_nodes and num_gpus skip hosts with slots=0") {
  const Selection pool = {{"a", {}}, {"b", {0, 1}}, {"c", {0, 1, 2}}};
  SelectionRequest first_two;
  first_two.num_nodes = 2;
  CHECK(show(select_resources(pool, first_two)) == show({{"b", {0, 1}}, {"c", {0, 1, 2}}}));
  SelectionRequest one_gpu;
  one_gpu.num_gpus = 1;
  CHECK(show(select_resources(pool, one_gpu)) == show({{"b", {0}}, {"c", {0}}}));
}
