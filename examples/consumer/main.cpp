// Uses a kiln op as a library user would: find it by name, launch it with typed arguments,
// check the result; then shows that a wrong argument is an error, not a crash.
#include <kiln/kiln.h>

#include <cstdio>
#include <vector>

int main() {
  try {
    kiln::Options options;
    options.spec_dirs = {CONSUMER_OPS_DIR};  // searched before the bundled ops
    kiln::Context ctx(options);
    kiln::Op op = ctx.op("scale_shift");
    const int64_t n = 100003;
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = float(i % 1000);
    auto x = ctx.buffer<float>(n), y = ctx.buffer<float>(n);
    x.upload(host);
    op.launch({kiln::cdiv(n, 256), 256}, x.data(), y.data(), 2.0f, 1.0f, n);
    ctx.synchronize();
    std::vector<float> out = y.download();
    for (int64_t i = 0; i < n; ++i) {
      if (out[i] != 2.0f * host[i] + 1.0f) {
        std::fprintf(stderr, "wrong result at %lld: %g\n", (long long)i, out[i]);
        return 1;
      }
    }
    std::printf("scale_shift on %s (%s, %s): %lld elements ok\n", ctx.accelerator().c_str(), op.target().c_str(),
                op.cache_source().c_str(), (long long)n);
    try {
      op.launch({1, 1}, x.data(), y.data(), 2.0, 1.0f, n);  // a double where the spec says float
      std::fprintf(stderr, "a wrong argument type was accepted\n");
      return 1;
    } catch (const kiln::Error& e) {
      std::printf("refused as it should be: %s\n", e.what());
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: %s: %s\n", e.code().c_str(), e.what());
    return 1;
  }
}
