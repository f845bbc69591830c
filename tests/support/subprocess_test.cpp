// support/subprocess.h with real programs: what kiln's helper toolchains go through.
#include <gtest/gtest.h>

#include <csignal>

#include "support/subprocess.h"

namespace kiln {
namespace {

TEST(Subprocess, InputGoesInAndOutputComesBack) {
  std::string input(3 << 20, 'k');  // more than a pipe holds: written while it is read
  auto r = run_subprocess({"/bin/cat"}, input);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out, input);
}

TEST(Subprocess, AHelperThatDiesWithoutReadingDoesNotTakeKilnWithIt) {
  // /bin/true reads nothing: the write meets a closed pipe (EPIPE, and SIGPIPE on this thread).
  auto r = run_subprocess({"/bin/true"}, std::string(8 << 20, 'x'));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->signal, 0);
}

TEST(Subprocess, ACrashIsReportedWithItsSignalAndWhatItPrinted) {
  auto r = run_subprocess({"/bin/sh", "-c", "echo dying >&2; kill -ABRT $$"}, "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->signal, SIGABRT);
  EXPECT_EQ(r->err, "dying");
  EXPECT_NE(r->how_it_ended().find("Aborted"), std::string::npos) << r->how_it_ended();
  auto exited = run_subprocess({"/bin/sh", "-c", "exit 3"}, "");
  ASSERT_TRUE(exited.ok());
  EXPECT_EQ(exited->how_it_ended(), "exited with status 3");
}

TEST(Subprocess, AProgramThatIsNotThereIsUnavailableWithItsName) {
  auto r = run_subprocess({"/no/such/kiln-helper"}, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/no/such/kiln-helper"), std::string::npos);
}

}  // namespace
}  // namespace kiln
