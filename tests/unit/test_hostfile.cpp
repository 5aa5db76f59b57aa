// Unit tests for cli/hostfile: DeepSpeed's hostfile grammar (test_run.py's good and bad files), our
// stricter checks with their file:line messages, and the shared text helpers (trim, split,
// content_lines, read_text_file).
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "errors.h"
#include "hostfile.h"
#include "text.h"

using namespace dsrun;

namespace {

// "host=slots@line" per entry, space-separated: easy to compare and readable when a check fails.
std::string show(const std::vector<HostEntry>& hosts) {
  std::string text;
  for (const HostEntry& entry : hosts)
    text += (text.empty() ? "" : " ") + entry.host + "=" + std::to_string(entry.slots) + "@" +
            std::to_string(entry.line);
  return text;
}

std::vector<HostEntry> parse(std::string_view text) { return parse_hostfile(text, "hostfile"); }

// A file under the temp directory holding `text`, removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(std::string_view text) {
    static int count = 0;
    path = std::filesystem::temp_directory_path() /
           ("dsrun-hostfile-" + std::to_string(getpid()) + "-" + std::to_string(count++));
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("hostfile: DeepSpeed's good file with indentation and blank and comment lines") {
  const auto hosts = parse(R"(
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    )");
  CHECK(show(hosts) == "worker-1=2@2 worker-2=2@3 localhost=1@5 123.23.12.10=2@6");
}

TEST_CASE("hostfile: CRLF line ends and tabs as separators") {
  CHECK(show(parse("w0\tslots=2\r\nw1 \t slots=4\r\n\r\n\tw2 slots=1")) == "w0=2@1 w1=4@2 w2=1@4");
}

TEST_CASE("hostfile: trailing key=value tokens and trailing comments are accepted") {
  CHECK(show(parse("w0 slots=4 max_slots=8\n"
                   "w1 slots=2 # gpu box\n"
                   "w2 slots=1 max_slots=2 gpu=a100   #note slots=9\n"
                   "w3 slots=3 #")) == "w0=4@1 w1=2@2 w2=1@3 w3=3@4");
}

TEST_CASE("hostfile: leading zeros and slots=0 and unusual host tokens") {
  CHECK(show(parse("w0 slots=03\nw1 slots=0\nuser@w2 slots=1\n10.0.0.1 slots=2\nfe80::1 slots=1")) ==
        "w0=3@1 w1=0@2 user@w2=1@3 10.0.0.1=2@4 fe80::1=1@5");
}

TEST_CASE("hostfile: hosts keep file order and are not sorted") {
  CHECK(show(parse("zeta slots=1\nalpha slots=1\nmid slots=1")) == "zeta=1@1 alpha=1@2 mid=1@3");
}

TEST_CASE("hostfile: every bad line is an error naming file:line and text") {
  struct Case {
    const char* line;
    const char* why;
  };
  const Case cases[] = {
      {"w1 slots=abc", "slots must be a non-negative integer"},
      {"w1 slots=4abc", "slots must be a non-negative integer"},
      {"w1 slots=-1", "slots must be a non-negative integer"},
      {"w1 slots=", "slots must be a non-negative integer"},
      {"w1 slots=2#x", "slots must be a non-negative integer"},
      {"w1 slots=99999999999", "slots value 99999999999 is too large (at most 4096 per host)"},
      {"w1 slots=878364551", "slots value 878364551 is too large (at most 4096 per host)"},  // found by fuzzing
      {"w1 slots=4097", "slots value 4097 is too large (at most 4096 per host)"},
      {"w1 slots = 4", "expected slots=N after the host name, found 'slots'"},
      {"w1 max_slots=2", "expected slots=N after the host name, found 'max_slots=2'"},
      {"w1 foo slots=3", "expected slots=N after the host name, found 'foo'"},
      {"this is bad slots=1", "expected slots=N after the host name, found 'is'"},
      {"w1", "missing slots=N after the host name"},
      {"missingslots", "missing slots=N after the host name"},
      {"w1 # slots=2", "missing slots=N after the host name"},
      {"slots=2", "expected a host name first, found 'slots=2'"},
      {"w1 slots=2 slots=3", "slots is given more than once"},
      {"w1 slots=2 foo", "expected key=value after slots=N, found 'foo'"},
      {"w1 slots=2 =3", "expected key=value after slots=N, found '=3'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    const std::string text = std::string("w0 slots=1\n# a comment\n  ") + c.line + " \r\nw9 slots=1\n";
    const std::string expected = std::string("hostfile:3: '") + c.line + "': " + c.why;
    CHECK_THROWS_WITH_AS(parse(text), expected.c_str(), InputError);
  }
}

TEST_CASE("hostfile: the first bad line aborts the file (DeepSpeed's mix of good and bad)") {
  CHECK_THROWS_WITH_AS(parse("\nworker-1 slots=2\nthis is bad slots=1\nworker-2 slots=4\nmissingslots\n"),
                       "hostfile:3: 'this is bad slots=1': expected slots=N after the host name, found 'is'",
                       InputError);
}

TEST_CASE("hostfile: a duplicate host names both lines") {
  CHECK_THROWS_WITH_AS(parse("# hosts\nw1 slots=2\nw2 slots=1\n\nw1 slots=1\n"),
                       "hostfile:5: duplicate host 'w1' (first on line 2)", InputError);
}

TEST_CASE("hostfile: a file without hosts is an error") {
  for (const char* text : {"", "\n\n", "   \r\n\t\n", "# only\n  # comments\n#w1 slots=2\n"}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse(text), "hostfile: no hosts (the file is empty or only has comments)",
                         InputError);
  }
}

TEST_CASE("hostfile: the origin given prefixes messages") {
  CHECK_THROWS_WITH_AS(parse_hostfile("w1 slots=x", "/job/hostfile"),
                       "/job/hostfile:1: 'w1 slots=x': slots must be a non-negative integer", InputError);
}

TEST_CASE("read_hostfile: reads a file and names it in errors") {
  const TempFile file("w0 slots=2\nw1 slots=bad\n");
  CHECK_THROWS_WITH_AS(
      read_hostfile(file.path.string()),
      (file.path.string() + ":2: 'w1 slots=bad': slots must be a non-negative integer").c_str(), InputError);
  const TempFile good("w0 slots=2\n");
  CHECK(show(read_hostfile(good.path.string())) == "w0=2@1");
}

TEST_CASE("read_text_file: a missing file or a directory is an error naming the path and the reason") {
  CHECK_THROWS_WITH_AS(read_text_file("/nonexistent/dsrun/hostfile"),
                       "/nonexistent/dsrun/hostfile: cannot open: No such file or directory", InputError);
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH_AS(read_text_file(dir), (dir + ": cannot read: Is a directory").c_str(), InputError);
}

TEST_CASE("text helpers: trim and split and content_lines") {
  CHECK(trim(" \t a b \r\n") == "a b");
  CHECK(trim(" \t ").empty());
  CHECK(split("a,,b", ',') == std::vector<std::string_view>{"a", "", "b"});
  CHECK(split("", ',') == std::vector<std::string_view>{""});
  CHECK(split("a,", ',') == std::vector<std::string_view>{"a", ""});

  const auto lines = content_lines("a\r\n\n  # c\n b c \n#d");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].number == 1);
  CHECK(lines[0].text == "a");
  CHECK(lines[1].number == 4);
  CHECK(lines[1].text == "b c");
}

TEST_CASE("parse_positive_int: whole positive numbers only") {
  CHECK(parse_positive_int("12", "X") == 12);
  CHECK_THROWS_WITH_AS(parse_positive_int("0", "DSRUN_LOCAL_SLOTS"), "DSRUN_LOCAL_SLOTS '0' is not a positive integer",
                       InputError);
  CHECK_THROWS_AS(parse_positive_int("3x", "X"), InputError);
  CHECK_THROWS_AS(parse_positive_int("", "X"), InputError);
  CHECK_THROWS_AS(parse_positive_int("-2", "X"), InputError);
  CHECK_THROWS_AS(parse_positive_int("99999999999", "X"), InputError);
}

TEST_CASE("hostfile: up to 4096 slots per host") {
  CHECK(show(parse("big slots=4096\n")) == "big=4096@1");
}
