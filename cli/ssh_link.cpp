// The ssh transport: one libssh session per host. Public-key authentication, host keys checked
// against known_hosts, ~/.ssh/config honoured. The remote command is only `exec '<dsrun>' agent`
// (the path single-quoted); the plan and every environment value travel inside the channel.
#include <arpa/inet.h>
#include <libssh/libssh.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "agent_link.h"
#include "errors.h"
#include "process.h"
#include "text.h"

namespace dsrun {
namespace {

// OpenSSH-style options from --launcher_args, applied after ~/.ssh/config.
struct SshSettings {
  std::string user, identity, known_hosts;
  int port = 0;
  long timeout_s = 10;
  bool accept_new = false;
};

SshSettings settings_from(const LaunchOptions& o) {
  SshSettings s;
  s.port = o.ssh_port;
  s.identity = o.ssh_identity;
  s.known_hosts = o.ssh_known_hosts;
  s.timeout_s = o.ssh_timeout_s;
  s.accept_new = o.ssh_accept_new;
  std::istringstream words(o.launcher_args);
  std::vector<std::string> args;
  for (std::string w; words >> w;) args.push_back(w);
  auto value_of = [&](size_t& i, const std::string& flag) {
    if (args[i].size() > 2) return args[i].substr(2);
    if (++i >= args.size()) throw InputError(fmt::format("--launcher_args: {} needs a value", flag));
    return args[i];
  };
  auto number = [](const std::string& text, const std::string& what) {
    return parse_positive_int(text, "--launcher_args: " + what);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string flag = args[i].substr(0, 2);
    if (flag == "-p") {
      s.port = number(value_of(i, "-p"), "-p");
    } else if (flag == "-l") {
      s.user = value_of(i, "-l");
    } else if (flag == "-i") {
      s.identity = value_of(i, "-i");
    } else if (flag == "-o") {
      std::string kv = value_of(i, "-o");
      size_t eq = kv.find('=');
      if (eq == std::string::npos) throw InputError(fmt::format("--launcher_args: -o '{}' is not Key=Value", kv));
      std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (key == "Port") s.port = number(value, "Port");
      else if (key == "User") s.user = value;
      else if (key == "IdentityFile") s.identity = value;
      else if (key == "UserKnownHostsFile") s.known_hosts = value;
      else if (key == "ConnectTimeout") s.timeout_s = number(value, "ConnectTimeout");
      else if (key == "StrictHostKeyChecking" && (value == "yes" || value == "accept-new")) s.accept_new = value != "yes";
      else throw InputError(fmt::format("--launcher_args: -o {} is not supported by the ssh transport", kv));
    } else {
      throw InputError(fmt::format("--launcher_args: '{}' is not supported by the ssh transport "
                                   "(use -p, -l, -i or -o Key=Value)", args[i]));
    }
  }
  return s;
}

class SshLink : public AgentLink {
 public:
  SshLink(int node, const std::string& host, const LaunchOptions& o, EventQueue& events)
      : AgentLink(node, host, events),
        settings_(settings_from(o)),
        remote_dsrun_(o.remote_dsrun.empty() ? self_executable() : o.remote_dsrun) {}
  ~SshLink() override {
    close();
    join();
    if (channel_) ssh_channel_free(channel_);
    if (session_) ssh_free(session_);
  }

 protected:
  std::string open() override {
    session_ = ssh_new();
    if (!session_) throw LaunchError(fmt::format("ssh to {}: cannot create a session", host_));
    std::string target = host_, user = settings_.user;
    if (size_t at = target.find('@'); at != std::string::npos) {
      if (user.empty()) user = target.substr(0, at);
      target = target.substr(at + 1);
    }
    ssh_options_set(session_, SSH_OPTIONS_HOST, target.c_str());
    if (const char* home = std::getenv("HOME"); home && *home) {  // ~ is $HOME, as for .deepspeed_env
      std::string ssh_dir = std::string(home) + "/.ssh";
      ssh_options_set(session_, SSH_OPTIONS_SSH_DIR, ssh_dir.c_str());
    }
    ssh_options_parse_config(session_, nullptr);  // ~/.ssh/config, then our explicit settings win
    if (!user.empty()) ssh_options_set(session_, SSH_OPTIONS_USER, user.c_str());
    if (settings_.port > 0) ssh_options_set(session_, SSH_OPTIONS_PORT, &settings_.port);
    if (!settings_.known_hosts.empty()) ssh_options_set(session_, SSH_OPTIONS_KNOWNHOSTS, settings_.known_hosts.c_str());
    ssh_options_set(session_, SSH_OPTIONS_TIMEOUT, &settings_.timeout_s);
    unsigned port = 22;
    ssh_options_get_port(session_, &port);
    where_ = fmt::format("ssh to {} (port {})", host_, port);

    if (ssh_connect(session_) != SSH_OK) fail("cannot connect: {}", ssh_get_error(session_));
    check_host_key();
    authenticate();

    channel_ = ssh_channel_new(session_);
    if (!channel_ || ssh_channel_open_session(channel_) != SSH_OK) fail("cannot open a channel: {}", ssh_get_error(session_));
    std::string command = "exec " + single_quote(remote_dsrun_) + " agent";
    if (ssh_channel_request_exec(channel_, command.c_str()) != SSH_OK)
      fail("cannot run {}: {}", command, ssh_get_error(session_));
    return peer_address();
  }

  std::vector<int> poll_fds() override { return {ssh_get_fd(session_)}; }

  bool pump() override {
    char buf[65536];
    for (;;) {
      int got = 0;
      for (int is_stderr : {1, 0}) {
        int n = ssh_channel_read_nonblocking(channel_, buf, sizeof(buf), is_stderr);
        if (n > 0) {
          is_stderr ? on_stderr(buf, static_cast<size_t>(n)) : on_stdout(buf, static_cast<size_t>(n));
          got += n;
        }
      }
      if (got == 0) break;
    }
    return ssh_channel_is_open(channel_) && !ssh_channel_is_eof(channel_);
  }

  bool write(const std::string& bytes) override {
    size_t done = 0;
    while (done < bytes.size()) {
      int n = ssh_channel_write(channel_, bytes.data() + done, static_cast<uint32_t>(bytes.size() - done));
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  std::string shutdown(bool forced) override {
    if (!channel_) return "";
    std::string result;
    if (!forced) {
      pump();
      int status = ssh_channel_get_exit_status(channel_);
      if (status > 0) result = fmt::format("'{} agent' exited with code {}", remote_dsrun_, status);
    }
    // EOF on the agent's stdin (or the connection dropping) makes it stop its ranks.
    ssh_channel_send_eof(channel_);
    ssh_channel_close(channel_);
    ssh_channel_free(channel_);
    channel_ = nullptr;
    ssh_disconnect(session_);
    return result;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw LaunchError(fmt::format("{}: {}", where_, fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string fingerprint() {
    ssh_key key = nullptr;
    if (ssh_get_server_publickey(session_, &key) != SSH_OK) return "unknown key";
    unsigned char* hash = nullptr;
    size_t length = 0;
    std::string text = ssh_key_type_to_char(ssh_key_type(key));
    if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &length) == SSH_OK) {
      char* printable = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, length);
      text += std::string(" ") + printable;
      ssh_string_free_char(printable);
      ssh_clean_pubkey_hash(&hash);
    }
    ssh_key_free(key);
    return text;
  }

  void check_host_key() {
    const std::string file = settings_.known_hosts.empty() ? "~/.ssh/known_hosts" : settings_.known_hosts;
    switch (ssh_session_is_known_server(session_)) {
      case SSH_KNOWN_HOSTS_OK:
        return;
      case SSH_KNOWN_HOSTS_CHANGED:
      case SSH_KNOWN_HOSTS_OTHER:
        fail("HOST KEY CHANGED: the server now shows {}, which does not match {} (possible man-in-the-middle; "
             "remove the old entry if the change is expected)", fingerprint(), file);
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (settings_.accept_new) {
          if (ssh_session_update_known_hosts(session_) != SSH_OK)
            fail("cannot record the host key in {}: {}", file, ssh_get_error(session_));
          return;
        }
        fail("unknown host key {} (not in {}); add it (ssh-keyscan) or pass --ssh_accept_new to trust it on first use",
             fingerprint(), file);
      case SSH_KNOWN_HOSTS_ERROR:
        fail("cannot check the host key against {}: {}", file, ssh_get_error(session_));
    }
  }

  void authenticate() {
    char* user_c = nullptr;
    ssh_options_get(session_, SSH_OPTIONS_USER, &user_c);
    std::string user = user_c ? user_c : "?";
    ssh_string_free_char(user_c);
    if (!settings_.identity.empty()) {
      ssh_key key = nullptr;
      if (ssh_pki_import_privkey_file(settings_.identity.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK)
        fail("cannot read the private key '{}' (missing, unreadable, or passphrase-protected)", settings_.identity);
      int rc = ssh_userauth_publickey(session_, nullptr, key);
      ssh_key_free(key);
      if (rc != SSH_AUTH_SUCCESS) fail("the server refused key '{}' for user {}", settings_.identity, user);
      return;
    }
    if (ssh_userauth_publickey_auto(session_, nullptr, nullptr) != SSH_AUTH_SUCCESS)
      fail("public-key authentication failed for user {} (tried ssh-agent and ~/.ssh/id_*; see --ssh_identity)", user);
  }

  std::string peer_address() {
    sockaddr_storage addr{};
    socklen_t length = sizeof(addr);
    if (::getpeername(ssh_get_fd(session_), reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "";
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
    else if (addr.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
    return text;
  }

  SshSettings settings_;
  std::string remote_dsrun_;
  std::string where_;
  ssh_session session_ = nullptr;
  ssh_channel channel_ = nullptr;
};

}  // namespace

std::unique_ptr<AgentLink> make_ssh_link(int node, const std::string& host, const LaunchOptions& options,
                                         EventQueue& events) {
  return std::make_unique<SshLink>(node, host, options, events);
}

}  // namespace dsrun
