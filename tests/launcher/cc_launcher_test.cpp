// kiln cc, the compiler launcher: its parts (depfiles, command lines, path labels) and the real
// thing: the kiln program launching the real g++ and nvcc in workspaces at different places,
// nodes with their own cache folders sharing a real redis-server.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <regex>

#include "launcher/compile_command.h"
#include "launcher/depfile.h"
#include "launcher/paths.h"
#include "support/file_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using launcher::CompileCommand;
using launcher::CompilerFamily;
using launcher::NotCacheable;
using launcher::PathLabels;
using testing::RedisServer;
using testing::run_process;
using testing::TempDir;

// ---- Depfiles.

TEST(Depfile, ReadsWhatGccAndNvccWrite) {
  auto gcc = launcher::parse_depfile("main.o: ../src/main.cpp /usr/include/stdc-predef.h \\\n ../include/a\\ b.h x$$y.h\n");
  ASSERT_TRUE(gcc.ok()) << gcc.status().message();
  ASSERT_EQ(gcc->size(), 1u);
  EXPECT_EQ((*gcc)[0].targets, std::vector<std::string>{"main.o"});
  EXPECT_EQ((*gcc)[0].prerequisites,
            (std::vector<std::string>{"../src/main.cpp", "/usr/include/stdc-predef.h", "../include/a b.h", "x$y.h"}));
  // nvcc puts a blank before the colon; -MP adds an empty rule per header.
  auto nvcc = launcher::parse_depfile("k.o : /ws/k.cu \\\n    /ws/b.cuh\n\n/ws/b.cuh:\n");
  ASSERT_TRUE(nvcc.ok()) << nvcc.status().message();
  ASSERT_EQ(nvcc->size(), 2u);
  EXPECT_EQ((*nvcc)[0].prerequisites, (std::vector<std::string>{"/ws/k.cu", "/ws/b.cuh"}));
  EXPECT_EQ((*nvcc)[1].targets, std::vector<std::string>{"/ws/b.cuh"});
  EXPECT_TRUE((*nvcc)[1].prerequisites.empty());
}

TEST(Depfile, RendersWhatItReadsBack) {
  std::vector<launcher::DepRule> rules = {{{"out dir/a.o"}, {"/x/a b.h", "c#d.h", "e$f.h", "g\\h.h"}}, {{"/x/a b.h"}, {}}};
  auto back = launcher::parse_depfile(launcher::render_depfile(rules));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].targets, rules[0].targets);
  EXPECT_EQ((*back)[0].prerequisites, rules[0].prerequisites);
  EXPECT_EQ((*back)[1].targets, rules[1].targets);
}

TEST(Depfile, BackslashesAreReadAndWrittenAsGccWritesThem) {
  // GCC writes a lone backslash as it is, and doubles a run of them before an escaped blank.
  auto rules = launcher::parse_depfile("a.o: x\\y.h a\\\\\\ b.h c\\#d.h\n");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  EXPECT_EQ((*rules)[0].prerequisites, (std::vector<std::string>{"x\\y.h", "a\\ b.h", "c#d.h"}));
  EXPECT_EQ(launcher::render_depfile(*rules), "a.o: \\\n  x\\y.h \\\n  a\\\\\\ b.h \\\n  c\\#d.h\n");
}

TEST(Depfile, TextThatIsNotRulesIsRefused) {
  EXPECT_FALSE(launcher::parse_depfile("a.o b.h c.h\n").ok());
  EXPECT_FALSE(launcher::parse_depfile(": b.h\n").ok());
  EXPECT_TRUE(launcher::parse_depfile("").ok());
}

// ---- Path labels.

TEST(PathLabels, TheWorkingFolderThenTheBasesThenAbsolute) {
  PathLabels p("/ws1/build/norm", {"/ws1", "relative-is-ignored", "/venv"});
  EXPECT_EQ(p.label("x.o"), "cwd:x.o");
  EXPECT_EQ(p.label("/ws1/build/norm/sub/../y.o"), "cwd:y.o");
  EXPECT_EQ(p.label("../../generated/k.cu"), "base0:generated/k.cu");
  EXPECT_EQ(p.label("/venv/include/a.h"), "base1:include/a.h");
  EXPECT_EQ(p.label("/usr/include/stdio.h"), "/usr/include/stdio.h");
  EXPECT_EQ(p.path_of("base0:generated/k.cu"), "/ws1/generated/k.cu");
  EXPECT_EQ(p.path_of("cwd:."), "/ws1/build/norm");
  EXPECT_EQ(p.path_of("base2:x"), "") << "a base this node does not have";
  EXPECT_EQ(p.base_label("/ws1/build/norm"), "base0:build/norm");
}

TEST(PathLabels, APatternBaseIsTheFolderThatHoldsTheSource) {
  PathLabels p("/work", {"/tmp/*", "/venv"});
  EXPECT_EQ(p.label("/tmp/tmpa1/tvm_kernels.cu"), "/tmp/tmpa1/tvm_kernels.cu") << "unbound, it matches nothing";
  EXPECT_FALSE(p.bind_source("/work/k.cu"));
  EXPECT_TRUE(p.bind_source("/tmp/tmpa1/tvm_kernels.cu"));
  EXPECT_EQ(p.label("/tmp/tmpa1/tvm_kernels.cu"), "base0:tvm_kernels.cu");
  EXPECT_EQ(p.label("/tmp/tmpa1/sub/k.h"), "base0:sub/k.h");
  EXPECT_EQ(p.label("/tmp/tmpzz/k.h"), "/tmp/tmpzz/k.h") << "another folder under /tmp is not the base";
  EXPECT_EQ(p.label("/venv/a.h"), "base1:a.h");
  EXPECT_EQ(p.path_of("base0:k.h"), "/tmp/tmpa1/k.h");
  PathLabels in_cwd("/tmp", {"/tmp/*"});
  EXPECT_TRUE(in_cwd.bind_source("tmpc3/tvm_kernels.cu"));
  EXPECT_EQ(in_cwd.label("tmpc3/tvm_kernels.cu"), "base0:tvm_kernels.cu") << "the innermost folder names it, not the working folder";
  EXPECT_EQ(in_cwd.label("other.h"), "cwd:other.h");
  PathLabels q("/work", {"/tmp/*"});
  EXPECT_TRUE(q.bind_source("/tmp/tmpb2/tvm_kernels.cu"));
  EXPECT_EQ(q.label("/tmp/tmpb2/tvm_kernels.cu"), p.label("/tmp/tmpa1/tvm_kernels.cu")) << "two temporary folders, one label";
  EXPECT_FALSE(q.bind_source("/tmp/loose.cu")) << "a source directly in DIR has no folder of its own";
  EXPECT_EQ(q.path_of("base0:k.h"), "") << "no longer bound";
}

// ---- Command lines.

CompileCommand parse_ok(CompilerFamily f, const std::vector<std::string>& args, const PathLabels& p) {
  auto parsed = launcher::parse_compile_command(f, args, p);
  if (auto* nc = std::get_if<NotCacheable>(&parsed)) ADD_FAILURE() << "not cacheable: " << nc->reason;
  return std::holds_alternative<CompileCommand>(parsed) ? std::get<CompileCommand>(parsed) : CompileCommand{};
}

std::string refusal(CompilerFamily f, const std::vector<std::string>& args) {
  auto parsed = launcher::parse_compile_command(f, args, PathLabels("/b", {}));
  return std::holds_alternative<NotCacheable>(parsed) ? std::get<NotCacheable>(parsed).reason : "cacheable";
}

TEST(CompileCommand, NinjasGccCompileIsCachedAndMovesWithItsWorkspace) {
  std::vector<std::string> args1 = {"-MMD", "-MF", "/ws1/o/a.o.d", "-I/ws1/include", "-isystem", "/usr/include/python3.11",
                                    "-O3", "-fPIC", "-std=c++17", "-DX=1", "-c", "/ws1/src/a.cpp", "-o", "/ws1/o/a.o"};
  std::vector<std::string> args2 = args1;
  for (auto& a : args2)
    if (auto at = a.find("/ws1"); at != std::string::npos) a.replace(at, 4, "/elsewhere/ws2");
  auto c1 = parse_ok(CompilerFamily::kGcc, args1, PathLabels("/ws1/o", {"/ws1"}));
  auto c2 = parse_ok(CompilerFamily::kGcc, args2, PathLabels("/elsewhere/ws2/o", {"/elsewhere/ws2"}));
  EXPECT_EQ(c1.source, "/ws1/src/a.cpp");
  EXPECT_EQ(c1.output, "/ws1/o/a.o");
  EXPECT_EQ(c1.depfile, "/ws1/o/a.o.d");
  EXPECT_EQ(c1.key_args, c2.key_args) << "a moved workspace keys the same";
  auto c3 = parse_ok(CompilerFamily::kGcc, args1, PathLabels("/ws1/o", {}));
  EXPECT_NE(c1.key_args, c3.key_args) << "outside any base, paths stay absolute";
  // A relative path keys its spelling too: the depfile a hit replays spells it so.
  auto near = parse_ok(CompilerFamily::kGcc, {"-c", "../src/a.c", "-o", "a.o"}, PathLabels("/p/b1", {"/p"}));
  auto deep = parse_ok(CompilerFamily::kGcc, {"-c", "../../src/a.c", "-o", "a.o"}, PathLabels("/p/b2/deep", {"/p"}));
  EXPECT_NE(near.key_args, deep.key_args);
  // -x applies to the inputs after it: where the source stands is keyed.
  auto before = parse_ok(CompilerFamily::kGcc, {"-c", "-x", "c", "f.cpp"}, PathLabels("/p", {}));
  auto after = parse_ok(CompilerFamily::kGcc, {"-c", "f.cpp", "-x", "c"}, PathLabels("/p", {}));
  EXPECT_NE(before.key_args, after.key_args);
  // On a miss the depfile is asked for with every header, to a file of kiln's.
  auto run = c1.compile_args("/tmp/d");
  EXPECT_EQ(std::count(run.begin(), run.end(), "-MMD"), 0);
  EXPECT_EQ(std::vector<std::string>(run.end() - 3, run.end()), (std::vector<std::string>{"-MD", "-MF", "/tmp/d"}));
}

TEST(CompileCommand, FlashInfersNvccCompileIsCached) {
  auto c = parse_ok(CompilerFamily::kNvcc,
                    {"--generate-dependencies-with-compile", "-MF", "norm.cuda.o.d", "-DPy_LIMITED_API=0x03090000",
                     "-D_GLIBCXX_USE_CXX11_ABI=1", "-I/fi/include", "-isystem", "/usr/local/cuda/include", "--compiler-options=-fPIC",
                     "--expt-relaxed-constexpr", "-static-global-template-stub=false", "-gencode=arch=compute_90a,code=sm_90a",
                     "-O3", "-std=c++17", "--threads=4", "-use_fast_math", "-Xfatbin=-compress-all", "--compress-mode=size", "-c", "/fi/csrc/norm.cu", "-o", "norm.cuda.o"},
                    PathLabels("/b", {}));
  EXPECT_EQ(c.mode, "object");
  EXPECT_EQ(c.depfile, "norm.cuda.o.d");
  EXPECT_EQ(c.include_dirs, (std::vector<std::string>{"/fi/include", "/usr/local/cuda/include"}));
  EXPECT_EQ(parse_ok(CompilerFamily::kNvcc, {"-cubin", "-arch=sm_90", "k.cu"}, PathLabels("/b", {})).output, "k.cubin");
  // CMake's CUDA rule: host options forwarded, keyed as the host compiler's.
  auto cmake = parse_ok(CompilerFamily::kNvcc,
                        {"-forward-unknown-to-host-compiler", "-I/p/include", "--generate-code=arch=compute_90,code=[compute_90,sm_90]",
                         "-std=c++17", "-fvisibility=hidden", "-MD", "-MT", "k.cu.o", "-MF", "k.cu.o.d", "-x", "cu", "-c", "/p/k.cu",
                         "-o", "k.cu.o"},
                        PathLabels("/b", {}));
  EXPECT_EQ(cmake.depfile, "k.cu.o.d");
  EXPECT_EQ(std::count(cmake.key_args.begin(), cmake.key_args.end(), "host\x1f-fvisibility=hidden"), 1);
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-forward-unknown-to-host-compiler", "-c", "k.cu", "-fplugin=x.so"}), "unknown option -fplugin=x.so");
  EXPECT_EQ(parse_ok(CompilerFamily::kNvcc, {"-dc", "k.cu", "-o", "k.o"}, PathLabels("/b", {})).mode, "rdc-object");
}

TEST(CompileCommand, WhatKilnCannotKeyOrReplayRunsUntouched) {
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"a.o", "b.o", "-o", "a.so"}), "link (no -c)");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-E", "a.c"}), "-E");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "b.c"}), "several inputs");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "-"}), "source from stdin");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "@args.rsp"}), "response file");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-fplugin=evil.so"}), "-fplugin=evil.so");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "--frobnicate"}), "unknown option --frobnicate");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-MD"}), "-MD without -MF");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-save-temps"}), "-save-temps");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "-keep"}), "-keep");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"k.o", "-o", "k.so", "-shared"}), "link (no -c, -dc, -cubin, -ptx or -fatbin)");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "-Xcompiler", "-fplugin=x.so"}), "-Xcompiler -fplugin=x.so");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "--no-such-thing"}), "unknown option --no-such-thing");
  // What names this machine cannot be keyed for another.
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-march=native"}), "-march=native");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "-arch=native"}), "-arch native");
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "-Xcompiler", "-fPIC,-mtune=native"}), "-Xcompiler -mtune=native");
  // Each of -Xcompiler's options is held to what a host compile refuses.
  EXPECT_EQ(refusal(CompilerFamily::kNvcc, {"-c", "k.cu", "-Xcompiler=-fPIC,-fprofile-use=x"}), "-Xcompiler -fprofile-use=x");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-fpass-plugin=x.so"}), "-fpass-plugin=x.so");
  EXPECT_EQ(refusal(CompilerFamily::kGcc, {"-c", "a.c", "-fsave-optimization-record"}), "-fsave-optimization-record");
  EXPECT_EQ(launcher::family_of("/usr/bin/x86_64-linux-gnu-g++-12"), CompilerFamily::kGcc);
  EXPECT_EQ(launcher::family_of("clang++-22"), CompilerFamily::kClang);
  EXPECT_EQ(launcher::family_of("/usr/local/cuda/bin/nvcc"), CompilerFamily::kNvcc);
  EXPECT_FALSE(launcher::family_of("/usr/bin/python3").has_value());
}

// ---- The kiln program around real compilers.

// A workspace: a source and a header of its own, and a build folder, at `root`.
void write_workspace(const TempDir& dir, const std::string& root, const std::string& header_body) {
  dir.write(root + "/include/a.h", "#pragma once\ninline int twice(int x) { return " + header_body + "; }\n");
  dir.write(root + "/src/main.cpp",
            "#include \"a.h\"\n#include <vector>\n#warning kiln-cc-test-warning\nint f(int x) { std::vector<int> v{x}; return twice(v[0]); }\n");
  dir.write(root + "/build/.keep", "");
}

class CcLauncher : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/g++", X_OK) != 0) GTEST_SKIP() << "g++ is not installed";
    // g++ behind a script that writes down every compile it runs (not the identity probes).
    m_dir.write("tools/g++", "#!/bin/sh\ncase \"$*\" in *' -c '*) echo \"$*\" >> \"$CC_TEST_LOG\";; esac\nexec /usr/bin/g++ \"$@\"\n");
    ::chmod((m_dir / "tools/g++").c_str(), 0755);
  }
  // `kiln cc` in `ws`/build with its own cache and log, KILN_CC_BASEDIR = ws.
  std::vector<std::string> cc(const std::string& ws, const std::string& cache, const std::string& remote,
                              const std::vector<std::string>& args) const {
    std::vector<std::string> argv{"env", "-C", m_dir / ws + "/build", testing::kiln_binary(), "--cache-dir", m_dir / cache,
                                  "--remote", remote, "cc"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  std::map<std::string, std::string> env(const std::string& ws) const {
    return {{"KILN_CC_BASEDIR", m_dir / ws}, {"CC_TEST_LOG", m_dir / (ws + ".log")}};
  }
  std::vector<std::string> gcc_compile(const std::string& ws) const {
    return {m_dir / "tools/g++", "-O2", "-I" + m_dir / ws + "/include", "-MMD", "-MF", "main.o.d", "-c", m_dir / ws + "/src/main.cpp",
            "-o", "main.o"};
  }
  int compiles(const std::string& ws) const {
    auto text = read_file(m_dir / (ws + ".log"));
    return text.ok() ? static_cast<int>(std::count(text->begin(), text->end(), '\n')) : 0;
  }
  std::string file(const std::string& rel) const {
    auto text = read_file(m_dir / rel);
    return text.ok() ? text.value() : "<missing>";
  }
  TempDir m_dir;
};

TEST_F(CcLauncher, AHitWritesTheObjectAndDepfileAndReplaysWarningsWithoutTheCompiler) {
  write_workspace(m_dir, "ws", "2 * x");
  auto first = run_process(cc("ws", "cache", "", gcc_compile("ws")), env("ws"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("kiln-cc-test-warning"), std::string::npos) << first.err;
  std::string object = file("ws/build/main.o"), depfile = file("ws/build/main.o.d");
  EXPECT_NE(depfile.find("a.h"), std::string::npos) << depfile;
  // What g++ makes by itself, byte for byte.
  auto plain = run_process({"env", "-C", m_dir / "ws/build", "/usr/bin/g++", "-O2", "-I" + m_dir / "ws/include", "-c",
                            m_dir / "ws/src/main.cpp", "-o", "plain.o"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(object, file("ws/build/plain.o"));
  ::unlink((m_dir / "ws/build/main.o").c_str());
  ::unlink((m_dir / "ws/build/main.o.d").c_str());
  auto hit = run_process(cc("ws", "cache", "", gcc_compile("ws")), env("ws"));
  ASSERT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_EQ(compiles("ws"), 1) << "the hit ran no compiler";
  EXPECT_EQ(file("ws/build/main.o"), object);
  EXPECT_NE(file("ws/build/main.o.d").find(m_dir / "ws/include/a.h"), std::string::npos) << file("ws/build/main.o.d");
  EXPECT_NE(hit.err.find("kiln-cc-test-warning"), std::string::npos) << "the warning again: " << hit.err;
  // A changed header is a miss.
  write_workspace(m_dir, "ws", "x + x + 0");
  auto changed = run_process(cc("ws", "cache", "", gcc_compile("ws")), env("ws"));
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_EQ(compiles("ws"), 2);
  // A changed flag is a miss too.
  auto flags = gcc_compile("ws");
  flags[1] = "-O1";
  ASSERT_EQ(run_process(cc("ws", "cache", "", flags), env("ws")).exit_code, 0);
  EXPECT_EQ(compiles("ws"), 3);
}

TEST_F(CcLauncher, AFailedCompileFailsAsTheCompilerDoesAndIsNotKept) {
  write_workspace(m_dir, "ws", "undeclared_name");
  for (int i = 0; i < 2; ++i) {
    auto r = run_process(cc("ws", "cache", "", gcc_compile("ws")), env("ws"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("undeclared_name"), std::string::npos) << r.err;
  }
  EXPECT_EQ(compiles("ws"), 2) << "each run compiles: a failure is not kept";
}

TEST_F(CcLauncher, TheNameTheCompilerIsCalledByIsInTheKey) {
  // One script under two names, as cc and c++ (or clang and clang++) are one binary: it compiles
  // C as c... and C++ as c++..., so f.c makes a C symbol through one and a C++ one through the other.
  m_dir.write("tools/driver", "#!/bin/sh\ncase \"$*\" in *' -c '*) echo \"$*\" >> \"$CC_TEST_LOG\";; esac\n"
                              "case \"$0\" in *c++) exec /usr/bin/g++ \"$@\";; *) exec /usr/bin/gcc \"$@\";; esac\n");
  ::chmod((m_dir / "tools/driver").c_str(), 0755);
  ASSERT_EQ(::symlink((m_dir / "tools/driver").c_str(), (m_dir / "tools/cc").c_str()), 0);
  ASSERT_EQ(::symlink((m_dir / "tools/driver").c_str(), (m_dir / "tools/c++").c_str()), 0);
  m_dir.write("ws/src/f.c", "int f(void) { return 1; }\n");
  m_dir.write("ws/build/.keep", "");
  for (std::string name : {"cc", "c++"}) {
    auto r = run_process(cc("ws", "cache", "", {m_dir / ("tools/" + name), "-O0", "-c", "../src/f.c", "-o", name + ".o"}), env("ws"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(compiles("ws"), 2);
  EXPECT_NE(file("ws/build/cc.o"), file("ws/build/c++.o"));
}

TEST_F(CcLauncher, ASourceThatNamesTheTimeIsCompiledEachTime) {
  m_dir.write("ws/src/when.cpp", "const char* when() { return __DATE__ \" \" __TIME__; }\n");
  m_dir.write("ws/build/.keep", "");
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run_process(cc("ws", "cache", "", {m_dir / "tools/g++", "-O0", "-c", "../src/when.cpp", "-o", "when.o"}), env("ws")).exit_code, 0);
  EXPECT_EQ(compiles("ws"), 2);
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cache", "stats", "--json"});
  EXPECT_NE(stats.out.find("\"__DATE___in_the_source\":2"), std::string::npos) << stats.out;
}

TEST_F(CcLauncher, AHeaderSavedWhileItCompilesIsNotKept) {
  // A compiler that saves a header as it starts (an editor's save during a long nvcc compile):
  // what it read may be either version, so the result is not kept under the new one's hash.
  m_dir.write("saving/g++", "#!/bin/sh\ncase \"$*\" in *' -c '*) echo \"$*\" >> \"$CC_TEST_LOG\"; "
                            "echo 'inline int twice(int x) { return x << 1; }' > \"$SAVED_HEADER\";; esac\nexec /usr/bin/g++ \"$@\"\n");
  ::chmod((m_dir / "saving/g++").c_str(), 0755);
  write_workspace(m_dir, "ws", "2 * x");
  auto args = gcc_compile("ws");
  args[0] = m_dir / "saving/g++";
  auto with_saves = env("ws");
  with_saves["SAVED_HEADER"] = m_dir / "ws/include/a.h";
  for (int i = 0; i < 2; ++i) ASSERT_EQ(run_process(cc("ws", "cache", "", args), with_saves).exit_code, 0);
  EXPECT_EQ(compiles("ws"), 2) << "nothing was kept to hit";
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cache", "stats", "--json"});
  EXPECT_NE(stats.out.find("a_file_it_read_changed_while_it_compiled\":2"), std::string::npos) << stats.out;
}

TEST_F(CcLauncher, ACudaHomeIsNeverWrittenIntoTheToolkitItStandsFor) {
  // A toolkit reached through a link, as /usr/local/cuda is: --cuda-home naming it is refused
  // and nothing in it changes.
  m_dir.write("cuda-13.9/bin/nvcc", "#!/bin/sh\n");
  ::chmod((m_dir / "cuda-13.9/bin/nvcc").c_str(), 0755);
  m_dir.write("cuda-13.9/version.json", "{}\n");
  ASSERT_EQ(::symlink((m_dir / "cuda-13.9").c_str(), (m_dir / "cuda").c_str()), 0);
  for (std::string dir : {"cuda", "cuda/bin", "cuda-13.9/sub"}) {
    auto r = run_process({testing::kiln_binary(), "cc", "--cuda-home", m_dir / dir, "--toolkit", m_dir / "cuda"});
    EXPECT_NE(r.exit_code, 0) << dir;
    EXPECT_NE(r.err.find("toolkit"), std::string::npos) << r.err;
  }
  EXPECT_EQ(file("cuda-13.9/version.json"), "{}\n");
  EXPECT_EQ(file("cuda-13.9/bin/nvcc"), "#!/bin/sh\n");
  // A folder with a file of its own where a link would go is left alone too.
  m_dir.write("home/version.json", "mine\n");
  auto r = run_process({testing::kiln_binary(), "cc", "--cuda-home", m_dir / "home", "--toolkit", m_dir / "cuda"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(file("home/version.json"), "mine\n");
}

TEST_F(CcLauncher, ACacheThatCannotBeOpenedNeverBreaksTheBuild) {
  write_workspace(m_dir, "ws", "2 * x");
  m_dir.write("not-a-folder", "a file where the cache folder should be\n");
  auto r = run_process(cc("ws", "not-a-folder", "", gcc_compile("ws")), env("ws"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kiln cc: warning"), std::string::npos) << r.err;
  EXPECT_NE(file("ws/build/main.o"), "<missing>");
  EXPECT_NE(file("ws/build/main.o.d").find("a.h"), std::string::npos);
  EXPECT_EQ(compiles("ws"), 1);
}

TEST_F(CcLauncher, ALinkRunsTheCompilerUntouchedAndIsCountedWithItsReason) {
  write_workspace(m_dir, "ws", "2 * x");
  ASSERT_EQ(run_process(cc("ws", "cache", "", gcc_compile("ws")), env("ws")).exit_code, 0);
  auto link = run_process(cc("ws", "cache", "", {m_dir / "tools/g++", "-shared", "main.o", "-o", "libmain.so"}), env("ws"));
  ASSERT_EQ(link.exit_code, 0) << link.err;
  struct stat st{};
  EXPECT_EQ(::stat((m_dir / "ws/build/libmain.so").c_str(), &st), 0);
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cache", "stats", "--json"});
  EXPECT_NE(stats.out.find("\"cc_not_cached\":{\"link_(no_-c)\":1}"), std::string::npos) << stats.out;
}

TEST_F(CcLauncher, NodesWithWorkspacesElsewhereShareThroughRedisAndEightAtOnceCompileOnce) {
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  m_dir.write("redis/.keep", "");
  RedisServer redis(m_dir / "redis");
  // Node 1 compiles; node 2, its workspace in another folder, gets it from the tier.
  write_workspace(m_dir, "node1", "2 * x");
  write_workspace(m_dir, "deeper/node2", "2 * x");
  auto one = run_process(cc("node1", "cache1", redis.url(), gcc_compile("node1")), env("node1"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = run_process(cc("deeper/node2", "cache2", redis.url(), gcc_compile("deeper/node2")), env("deeper/node2"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(compiles("node1"), 1);
  EXPECT_EQ(compiles("deeper/node2"), 0) << "node 2 compiled nothing";
  EXPECT_EQ(file("node1/build/main.o"), file("deeper/node2/build/main.o"));
  std::string dep2 = file("deeper/node2/build/main.o.d");
  EXPECT_NE(dep2.find(m_dir / "deeper/node2/include/a.h"), std::string::npos) << "node 2's own paths: " << dep2;
  EXPECT_EQ(dep2.find(m_dir / "node1"), std::string::npos) << dep2;
  // Eight nodes starting at once on a source none has: one compile among them.
  constexpr int k_nodes = 8;
  std::vector<std::vector<std::string>> commands;
  std::vector<std::map<std::string, std::string>> envs;
  for (int i = 0; i < k_nodes; ++i) {
    std::string ws = "at-once" + std::to_string(i);
    write_workspace(m_dir, ws, "3 * x");
    commands.push_back(cc(ws, "cache-at-once" + std::to_string(i), redis.url(), gcc_compile(ws)));
    envs.push_back(env(ws));
  }
  auto results = testing::run_processes(commands, envs);
  for (auto& r : results) EXPECT_EQ(r.exit_code, 0) << r.err;
  int total = 0;
  for (int i = 0; i < k_nodes; ++i) total += compiles("at-once" + std::to_string(i));
  EXPECT_EQ(total, 1);
  for (int i = 1; i < k_nodes; ++i)
    EXPECT_EQ(file("at-once" + std::to_string(i) + "/build/main.o"), file("at-once0/build/main.o")) << "node " << i;
}

TEST_F(CcLauncher, NvccCompilesOnceForTwoWorkspaces) {
  const std::string nvcc = "/usr/local/cuda/bin/nvcc";
  if (::access(nvcc.c_str(), X_OK) != 0) GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda";
  for (std::string ws : {"n1", "elsewhere/n2"}) {
    m_dir.write(ws + "/include/b.cuh", "#pragma once\n__host__ __device__ inline float twice2(float x) { return 2 * x; }\n");
    m_dir.write(ws + "/src/k.cu", "#include \"b.cuh\"\n__global__ void scale(float* x, float s) { x[threadIdx.x] *= s * twice2(1); }\n");
    m_dir.write(ws + "/build/.keep", "");
  }
  auto compile = [&](const std::string& ws) {
    return cc(ws, "cache", "",
              {nvcc, "-gencode=arch=compute_90,code=sm_90", "-O3", "-I" + m_dir / ws + "/include", "--generate-dependencies-with-compile",
               "--dependency-output", "k.o.d", "-c", m_dir / ws + "/src/k.cu", "-o", "k.o"});
  };
  auto one = run_process(compile("n1"), env("n1"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = run_process(compile("elsewhere/n2"), env("elsewhere/n2"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(file("n1/build/k.o"), file("elsewhere/n2/build/k.o"));
  EXPECT_NE(file("elsewhere/n2/build/k.o.d").find(m_dir / "elsewhere/n2/include/b.cuh"), std::string::npos);
  // A JIT that runs $CUDA_HOME/bin/nvcc itself, given a CUDA_HOME of kiln's: a hit too.
  auto home = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cc", "--cuda-home", m_dir / "cuda-home",
                           "--toolkit", "/usr/local/cuda"});
  ASSERT_EQ(home.exit_code, 0) << home.err;
  EXPECT_EQ(home.out, m_dir / "cuda-home\n");
  struct stat st{};
  EXPECT_EQ(::stat((m_dir / "cuda-home/include/cuda_runtime.h").c_str(), &st), 0) << "the toolkit's headers, linked";
  ::unlink((m_dir / "n1/build/k.o").c_str());
  auto through_home = run_process({"env", "-C", m_dir / "n1/build", m_dir / "cuda-home/bin/nvcc", "-gencode=arch=compute_90,code=sm_90",
                                   "-O3", "-I" + m_dir / "n1/include", "--generate-dependencies-with-compile", "--dependency-output",
                                   "k.o.d", "-c", m_dir / "n1/src/k.cu", "-o", "k.o"},
                                  env("n1"));
  ASSERT_EQ(through_home.exit_code, 0) << through_home.err;
  EXPECT_EQ(file("n1/build/k.o"), file("elsewhere/n2/build/k.o"));
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cache", "stats", "--json"});
  EXPECT_EQ(testing::json_field(stats.out, "compiles"), "1") << stats.out;
  EXPECT_EQ(testing::json_field(stats.out, "hits_disk"), "2") << stats.out;
}

TEST_F(CcLauncher, ACMakeProjectBuiltInASecondFolderCompilesNothing) {
  const std::string nvcc = "/usr/local/cuda/bin/nvcc";
  if (::access(nvcc.c_str(), X_OK) != 0) GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda";
  // The launchers as CMake users set them, for C++ and for CUDA.
  std::string launcher = testing::kiln_binary() + ";--cache-dir;" + m_dir / "cache" + ";--remote;;cc";
  for (std::string project : {"p1", "copies/p2"}) {
    m_dir.write(project + "/CMakeLists.txt",
                "cmake_minimum_required(VERSION 3.18)\nproject(launched LANGUAGES CXX CUDA)\n"
                "add_library(launched STATIC src/host.cpp src/kernel.cu)\ntarget_include_directories(launched PRIVATE include)\n"
                "set_target_properties(launched PROPERTIES CUDA_ARCHITECTURES 90)\n");
    m_dir.write(project + "/include/sq.cuh", "#pragma once\n__host__ __device__ inline float sq(float x) { return x * x; }\n");
    m_dir.write(project + "/src/host.cpp", "#include <string>\nstd::string host_name() { return \"launched\"; }\n");
    m_dir.write(project + "/src/kernel.cu", "#include \"sq.cuh\"\n__global__ void k(float* x) { x[threadIdx.x] = sq(x[threadIdx.x]); }\n");
    std::map<std::string, std::string> env = {{"KILN_CC_BASEDIR", m_dir / project}};
    auto configure = run_process({"cmake", "-S", m_dir / project, "-B", m_dir / project + "/build", "-G", "Ninja",
                                  "-DCMAKE_CUDA_COMPILER=" + nvcc, "-DCMAKE_CXX_COMPILER_LAUNCHER=" + launcher,
                                  "-DCMAKE_CUDA_COMPILER_LAUNCHER=" + launcher},
                                 env);
    ASSERT_EQ(configure.exit_code, 0) << configure.out << configure.err;
    auto build = run_process({"cmake", "--build", m_dir / project + "/build"}, env);
    ASSERT_EQ(build.exit_code, 0) << build.out << build.err;
  }
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "cache", "stats", "--json"});
  EXPECT_EQ(testing::json_field(stats.out, "compiles"), "2") << "p1's two sources; p2 compiled nothing: " << stats.out;
  EXPECT_EQ(testing::json_field(stats.out, "hits_disk"), "2") << stats.out;
  EXPECT_EQ(file("p1/build/liblaunched.a").size(), file("copies/p2/build/liblaunched.a").size());
}

}  // namespace
}  // namespace kiln
