#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

// Feeds `input` to the helper's stdin while reading its stdout, so that neither side waits on
// the other whatever each writes first; closes both. A helper that dies early makes the write
// fail with EPIPE and raise SIGPIPE, which would end kiln: the signal is blocked on this thread
// meanwhile and a pending one taken back (the process-wide disposition is not touched, so
// threads running helpers at once cannot undo each other). Its exit status says why it died.
std::string exchange(int to_child, int from_child, std::string_view input) {
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  ::fcntl(to_child, F_SETFL, ::fcntl(to_child, F_GETFL) | O_NONBLOCK);
  if (input.empty()) {
    ::close(to_child);
    to_child = -1;
  }
  bool broken = false;
  std::string out;
  char buffer[65536];
  while (from_child >= 0) {
    pollfd fds[2] = {{from_child, POLLIN, 0}, {to_child, POLLOUT, 0}};
    if (::poll(fds, to_child >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (to_child >= 0 && fds[1].revents) {
      ssize_t n = ::write(to_child, input.data(), input.size());
      if (n > 0) input.remove_prefix(static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) broken = true;  // the helper stopped reading
      if (input.empty() || broken) {
        ::close(to_child);
        to_child = -1;
      }
    }
    if (fds[0].revents) {
      ssize_t n = ::read(from_child, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        ::close(from_child);
        from_child = -1;
      } else {
        out.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  if (to_child >= 0) ::close(to_child);
  if (broken) {
    const timespec now{0, 0};
    while (::sigtimedwait(&pipe_signal, nullptr, &now) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return out;
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
  SubprocessResult r;
  r.out = exchange(in[1], out[0], input);
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
