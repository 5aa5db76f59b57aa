// Entry point of launcher_unit_tests: doctest supplies main() and the command-line options
// (`-tc=<test case>`, `-s`, ...). The test cases live in the other test_*.cpp files.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
