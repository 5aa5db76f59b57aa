// FUZZ_CHECK(cond): an invariant of a fuzz target; when it fails, the target prints it and aborts,
// which libFuzzer records as a crash (and the replay test fails), in every build type.
#pragma once
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
