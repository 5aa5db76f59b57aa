// blas: the OPENBLAS_CORETYPE decision (pure), and what the loaded OpenBLAS reports.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/blas.h"

using ds::cpu::blas_coretype_upgrade;
using ds::cpu::CpuTier;

TEST_CASE("blas_coretype_upgrade picks the CPU's tier only when the loaded core is below it") {
  CHECK(blas_coretype_upgrade("Prescott", CpuTier::avx512) == "SkylakeX");  // 0.3.21 on Emerald Rapids
  CHECK(blas_coretype_upgrade("prescott", CpuTier::avx2) == "Haswell");
  CHECK(blas_coretype_upgrade("Nehalem", CpuTier::avx) == "SandyBridge");
  CHECK(blas_coretype_upgrade("Haswell", CpuTier::avx512) == "SkylakeX");
  CHECK(blas_coretype_upgrade("SkylakeX", CpuTier::avx512) == "");
  CHECK(blas_coretype_upgrade("Cooperlake", CpuTier::avx512) == "");
  CHECK(blas_coretype_upgrade("Zen", CpuTier::avx2) == "");
  CHECK(blas_coretype_upgrade("SkylakeX", CpuTier::avx2) == "");  // never downgrade
  CHECK(blas_coretype_upgrade("Prescott", CpuTier::sse) == "");
  CHECK(blas_coretype_upgrade("GraniteRapidsV9", CpuTier::avx512) == "");  // unknown: trust it
}

TEST_CASE("the loaded OpenBLAS reports a core and a thread count") {
  const std::string core = ds::cpu::blas_corename();
  std::printf("  OpenBLAS core %s, CPU tier %d, suggested OPENBLAS_CORETYPE '%s'\n", core.c_str(),
              static_cast<int>(ds::cpu::cpu_tier()),
              blas_coretype_upgrade(core, ds::cpu::cpu_tier()).c_str());
  CHECK(!core.empty());
  CHECK(ds::cpu::blas_threads() >= 1);
  CHECK(ds::cpu::blas_config().find("OpenBLAS") == 0);
}

TEST_CASE("blas_fix_coretype re-executes the program exactly when the core is misdetected") {
  // In a forked child with OPENBLAS_CORETYPE unset, call it with argv = {self, "--version"}: a
  // re-exec runs this test binary again, which prints doctest's version and exits 0.
  const bool expect_exec = !blas_coretype_upgrade(ds::cpu::blas_corename(), ds::cpu::cpu_tier()).empty();
  int out[2];
  REQUIRE(pipe(out) == 0);
  std::fflush(stdout);  // or the child would write our buffered output into its pipe
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    unsetenv("OPENBLAS_CORETYPE");
    char self[] = "kernels_tests", version[] = "--version";
    char* argv[] = {self, version, nullptr};
    const std::string warning = ds::cpu::blas_fix_coretype(argv);
    std::printf("no exec%s\n", warning.c_str());
    std::fflush(stdout);
    _exit(3);
  }
  close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child output: " << text);
  CHECK(WIFEXITED(status));
  if (expect_exec) {
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(text.find("doctest version") != std::string::npos);
  } else {
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(text == "no exec\n");
  }
  std::printf("  blas_fix_coretype: %s\n", expect_exec ? "re-executed with OPENBLAS_CORETYPE set" : "nothing to do");

  // A value set by the user is honoured: no exec, no message.
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before ? before : "";
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  CHECK(ds::cpu::blas_fix_coretype(nullptr) == "");
  if (before) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1); else unsetenv("OPENBLAS_CORETYPE");
}
