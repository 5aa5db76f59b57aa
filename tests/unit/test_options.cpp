// dsrun's command-line parsing: --max_restarts (both spellings, the default, and bad values as
// InputError, which main() turns into exit status 2) and --bind_core_list (parsed with the options).
#include <doctest/doctest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "errors.h"
#include "options.h"

using namespace dsrun;

namespace {

// parse_options on `dsrun ARGS...`; throws what it throws.
LaunchOptions parse_or_throw(std::initializer_list<std::string> args) {
  std::vector<std::string> words = {"dsrun"};
  words.insert(words.end(), args);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  LaunchOptions o;
  if (!parse_options(static_cast<int>(words.size()), argv.data(), o)) throw std::logic_error("--help or --version");
  return o;
}

LaunchOptions parse(std::initializer_list<std::string> args) {
  LaunchOptions o;
  REQUIRE_NOTHROW(o = parse_or_throw(args));
  return o;
}

std::string error_of(std::initializer_list<std::string> args) {
  try {
    parse_or_throw(args);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("options: --max_restarts defaults to 0 and takes both spellings") {
  CHECK(parse({"./t"}).max_restarts == 0);
  CHECK(parse({"--max_restarts", "2", "./t"}).max_restarts == 2);
  CHECK(parse({"--max-restarts", "5", "./t"}).max_restarts == 5);
  CHECK(parse({"--max_restarts=0", "./t"}).max_restarts == 0);
  auto o = parse({"--max_restarts", "1", "./t", "--max_restarts", "9"});  // PROGRAM's own arguments are untouched
  CHECK(o.max_restarts == 1);
  CHECK(o.program == std::vector<std::string>{"./t", "--max_restarts", "9"});
}

TEST_CASE("options: --max_restarts must be a non-negative integer") {
  for (std::string bad : {"-1", "abc", "1x", "1.5", "99999999999"}) {
    CAPTURE(bad);
    CHECK(error_of({"--max_restarts=" + bad, "./t"}) == "--max_restarts '" + bad + "' is not a non-negative integer");
  }
  CHECK(error_of({"--max_restarts", "-1", "./t"}) == "--max_restarts '-1' is not a non-negative integer");
  CHECK(error_of({"--max_restarts", "", "./t"}) == "--max_restarts '' is not a non-negative integer");
}

TEST_CASE("options: --bind_core_list is parsed with the options") {
  CHECK(parse({"--bind_cores_to_rank", "--bind_core_list", "0,2-3", "./t"}).bind_core_ids == std::vector<int>{0, 2, 3});
  CHECK(parse({"--bind_cores_to_rank", "./t"}).bind_core_ids.empty());  // not given: the host's physical cores
  CHECK(error_of({"--bind_cores_to_rank", "--bind_core_list", "4-2", "./t"}) ==
        "--bind_core_list '4-2': range '4-2' is descending");
  CHECK(error_of({"--bind_cores_to_rank", "--bind_core_list", "", "./t"}) == "--bind_core_list '': the list is empty");
  CHECK(error_of({"--bind_core_list", "0-3", "./t"}) == "--bind_core_list needs --bind_cores_to_rank");
}
