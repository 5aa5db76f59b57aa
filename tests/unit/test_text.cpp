// Unit tests for cli/text's shell helpers: --launcher_args split as a shell would (what pdsh gets),
// and single quoting for the remote command pdsh hands to a shell.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "errors.h"
#include "text.h"

using namespace dsrun;
using Words = std::vector<std::string>;

TEST_CASE("split_shell_words: whitespace separates and quotes group") {
  CHECK(split_shell_words("", "x").empty());
  CHECK(split_shell_words("  -u 30\t-x  node-b ", "x") == Words{"-u", "30", "-x", "node-b"});
  CHECK(split_shell_words("-l 'my user' \"a b\"c", "x") == Words{"-l", "my user", "a bc"});
  CHECK(split_shell_words("'$HOME' \"\\$HOME\" \"\\q\" a\\ b ''", "x") == Words{"$HOME", "$HOME", "\\q", "a b", ""});
}

TEST_CASE("split_shell_words: an unterminated quote names the option") {
  CHECK_THROWS_WITH_AS(split_shell_words("-l 'x", "--launcher_args"), "--launcher_args: unterminated ' quote",
                       InputError);
  CHECK_THROWS_WITH_AS(split_shell_words("\"x", "--launcher_args"), "--launcher_args: unterminated \" quote",
                       InputError);
}

TEST_CASE("single_quote: any text survives a POSIX shell") {
  CHECK(single_quote("/opt/ds run/dsrun") == "'/opt/ds run/dsrun'");
  CHECK(single_quote("it's") == "'it'\\''s'");
  CHECK(single_quote("") == "''");
}
