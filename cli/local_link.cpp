// The local transport: the node agent is this same executable (`dsrun agent`), started as a
// child process in its own process group, talking over three pipes.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "agent_link.h"
#include "errors.h"
#include "process.h"

namespace dsrun {
namespace {

class LocalLink : public AgentLink {
 public:
  using AgentLink::AgentLink;
  ~LocalLink() override {
    close();
    join();
  }

 protected:
  std::string open() override {
    Pipe in = make_pipe(), out = make_pipe(), err = make_pipe();  // closed again if anything below fails
    std::string self = self_executable();
    pid_ = ::fork();
    if (pid_ < 0) throw LaunchError(fmt::format("fork: {}", std::strerror(errno)));
    if (pid_ == 0) {
      ::setpgid(0, 0);  // Ctrl-C in the terminal reaches dsrun only; dsrun stops the agent in order
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(in.read.get(), STDIN_FILENO);
      ::dup2(out.write.get(), STDOUT_FILENO);
      ::dup2(err.write.get(), STDERR_FILENO);
      char* argv[] = {self.data(), const_cast<char*>("agent"), nullptr};
      ::execv(self.c_str(), argv);
      ::_exit(127);
    }
    to_agent_ = in.write.release();
    from_agent_ = out.read.release();
    agent_err_ = err.read.release();
    set_nonblocking(from_agent_);
    set_nonblocking(agent_err_);
    return "";
  }

  std::vector<int> poll_fds() override {
    std::vector<int> fds;
    if (from_agent_ >= 0) fds.push_back(from_agent_);
    if (agent_err_ >= 0) fds.push_back(agent_err_);
    return fds;
  }

  bool pump() override {
    drain(agent_err_, false);
    return drain(from_agent_, true);
  }

  bool write(const std::string& bytes) override { return to_agent_ >= 0 && write_all(to_agent_, bytes); }

  std::string shutdown(bool forced) override {
    if (to_agent_ >= 0) ::close(to_agent_);  // EOF on the agent's stdin: it stops its ranks
    to_agent_ = -1;
    if (forced) ::kill(-pid_, SIGKILL);      // its ranks die with it (PR_SET_PDEATHSIG)
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    drain(agent_err_, false);
    for (int* fd : {&from_agent_, &agent_err_})
      if (*fd >= 0) ::close(*fd), *fd = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return fmt::format("'dsrun agent' {}", describe_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 0,
                                                     WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  }

 private:
  // Reads everything available on `fd`; false once it reached end of file.
  bool drain(int& fd, bool is_stdout) {
    char buf[65536];
    while (fd >= 0) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        is_stdout ? on_stdout(buf, static_cast<size_t>(n)) : on_stderr(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      ::close(fd);
      fd = -1;
    }
    return false;
  }

  pid_t pid_ = -1;
  int to_agent_ = -1, from_agent_ = -1, agent_err_ = -1;
};

}  // namespace

std::unique_ptr<AgentLink> make_local_link(int node, const std::string& host, EventQueue& events) {
  return std::make_unique<LocalLink>(node, host, events);
}

}  // namespace dsrun
