// Test helper: captures what this process writes to stderr (fd 2) while it is alive.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

class CaptureStderr {
 public:
  CaptureStderr() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    std::FILE* f = std::tmpfile();
    file_ = f;
    ::dup2(::fileno(f), 2);
  }
  ~CaptureStderr() { restore(); }
  // Everything written so far (stops capturing).
  std::string text() {
    restore();
    std::rewind(file_);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, file_)) > 0;) out.append(buf, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};
