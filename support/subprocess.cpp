#include "support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace kiln {
namespace {

void write_all_and_close(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the helper stopped reading (it died): its status says why
    data.remove_prefix(static_cast<size_t>(n));
  }
  ::close(fd);
}

std::string read_all_and_close(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string SubprocessResult::how_it_ended() const {
  if (signal) return std::string("was killed by ") + ::strsignal(signal);
  return "exited with status " + std::to_string(exit_code);
}

Result<SubprocessResult> run_subprocess(const std::vector<std::string>& argv, std::string_view input) {
  if (argv.empty()) return invalid_argument("run_subprocess: no program");
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status(StatusCode::kIoError, "cannot create a pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return Status(StatusCode::kIoError, "cannot create a pipe: " + std::string(std::strerror(errno)));
  }
  // stderr goes to an anonymous file: read after the exit, it can never fill a pipe and block.
  int err = ::memfd_create("kiln-helper-stderr", MFD_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  if (err >= 0) posix_spawn_file_actions_adddup2(&actions, err, 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    if (err >= 0) ::close(err);
    return unavailable("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  // A helper that dies early must not take kiln with it through SIGPIPE.
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  write_all_and_close(in[1], input);
  ::sigaction(SIGPIPE, &previous, nullptr);
  SubprocessResult r;
  r.out = read_all_and_close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  else if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (err >= 0) {
    ::lseek(err, 0, SEEK_SET);
    r.err = read_all_and_close(err);
    while (!r.err.empty() && (r.err.back() == '\n' || r.err.back() == ' ')) r.err.pop_back();
    if (r.err.size() > 4096) r.err = r.err.substr(0, 4096) + "...";
  }
  return r;
}

}  // namespace kiln
