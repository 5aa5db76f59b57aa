// Unit tests for cli/core_list: `--bind_core_list` parsing (DeepSpeed's test_ds_arguments.py cases
// plus our stricter errors), the per-rank split of DeepSpeed's get_numactl_cmd, and the compressed
// text given to numactl -C.
#include <doctest/doctest.h>

#include <stdexcept>

#include "core_list.h"
#include "errors.h"

using namespace dsrun;

using Cores = std::vector<int>;

TEST_CASE("parse_core_list: DeepSpeed's valid list") {
  CHECK(parse_core_list("0,2-4,6,8-9") == Cores{0, 2, 3, 4, 6, 8, 9});
  CHECK(parse_core_list("5") == Cores{5});
  CHECK(parse_core_list("3-3") == Cores{3});
  CHECK(parse_core_list("0-3,04") == Cores{0, 1, 2, 3, 4});
}

TEST_CASE(
    "parse_core_list: DeepSpeed's invalid lists (overlapping or unordered items and descending ranges)") {
  CHECK_THROWS_WITH_AS(
      parse_core_list("0,2-6,5-9"),
      "--bind_core_list '0,2-6,5-9': '5-9' does not come after 6 (items must be ascending and not overlap)",
      InputError);
  CHECK_THROWS_WITH_AS(
      parse_core_list("8,2-6"),
      "--bind_core_list '8,2-6': '2-6' does not come after 8 (items must be ascending and not overlap)",
      InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("1,6-2"), "--bind_core_list '1,6-2': range '6-2' is descending",
                       InputError);
  CHECK_THROWS_AS(parse_core_list("1,1"), InputError);
}

TEST_CASE("parse_core_list: malformed items") {
  CHECK_THROWS_WITH_AS(parse_core_list(""), "--bind_core_list '': the list is empty", InputError);
  for (const char* bad : {"a", "1-", "-1", "1-2-3", "1,,2", "1,"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_core_list(bad), InputError);
  }
  CHECK_THROWS_WITH_AS(parse_core_list("a"), "--bind_core_list 'a': 'a' is not a core id N or a range A-B",
                       InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("0, 2"),
                       "--bind_core_list '0, 2': ' 2' is not a core id N or a range A-B", InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("0-4 "),
                       "--bind_core_list '0-4 ': '0-4 ' is not a core id N or a range A-B", InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("-1"), "--bind_core_list '-1': '-1' is not a core id N or a range A-B",
                       InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("0-99999999999"),
                       "--bind_core_list '0-99999999999': core id 99999999999 is above 65535", InputError);
  CHECK_THROWS_WITH_AS(parse_core_list("70000"), "--bind_core_list '70000': core id 70000 is above 65535",
                       InputError);
}

TEST_CASE("cores_for_rank: equal contiguous shares with leftovers unused") {
  const Cores eight{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(cores_for_rank(eight, 0, 2) == Cores{0, 1, 2, 3});
  CHECK(cores_for_rank(eight, 1, 2) == Cores{4, 5, 6, 7});
  CHECK(cores_for_rank(eight, 0, 1) == eight);
  CHECK(cores_for_rank(eight, 2, 3) == Cores{4, 5});  // 8 / 3 = 2 each; cores 6 and 7 unused

  const Cores listed = parse_core_list("0,2-4,6,8-9");
  CHECK(cores_for_rank(listed, 0, 3) == Cores{0, 2});
  CHECK(cores_for_rank(listed, 1, 3) == Cores{3, 4});
  CHECK(cores_for_rank(listed, 2, 3) == Cores{6, 8});  // core 9 unused
}

TEST_CASE("cores_for_rank: fewer cores than ranks is an input error and a bad rank a caller bug") {
  CHECK_THROWS_WITH_AS(cores_for_rank({0, 1, 2}, 0, 4),
                       "--bind_cores_to_rank: 3 cores (0-2) for 4 local ranks; each rank needs at least one core",
                       InputError);
  CHECK_THROWS_AS(cores_for_rank({0, 1}, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(cores_for_rank({0, 1}, -1, 2), std::invalid_argument);
  CHECK_THROWS_AS(cores_for_rank({0, 1}, 0, 0), std::invalid_argument);
}

TEST_CASE("format_core_list: ascending ids compressed to ranges") {
  CHECK(format_core_list({0, 1, 2, 5}) == "0-2,5");
  CHECK(format_core_list({}).empty());
  CHECK(format_core_list({3}) == "3");
  CHECK(format_core_list({0, 1}) == "0-1");
  CHECK(format_core_list({1, 3, 5}) == "1,3,5");
  CHECK(format_core_list(parse_core_list("0,2-4,6,8-9")) == "0,2-4,6,8-9");
}
