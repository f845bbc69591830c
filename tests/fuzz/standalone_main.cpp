// Runs a fuzz target without libFuzzer (g++ builds, CI): every file of its seed corpus,
// then a fixed number of deterministic mutations of them (byte flips, truncations,
// insertions, splices). The same targets build with clang -fsanitize=fuzzer for real
// coverage-guided fuzzing (scripts/fuzz).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS]\n", argv[0]);
    return 2;
  }
  long mutations = argc > 2 ? std::atol(argv[2]) : 20000;
  std::vector<std::string> corpus;
  for (auto& entry : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    corpus.push_back(ss.str());
  }
  corpus.push_back("");
  for (auto& c : corpus) run(c);
  std::mt19937_64 rng(12345);
  for (long i = 0; i < mutations; ++i) {
    std::string s = corpus[rng() % corpus.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 5) {
        case 0:
          if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1:
          if (!s.empty()) s.resize(rng() % s.size());
          break;
        case 2: s.insert(s.begin() + static_cast<long>(s.empty() ? 0 : rng() % s.size()), static_cast<char>(rng())); break;
        case 3: {
          const std::string& other = corpus[rng() % corpus.size()];
          if (!other.empty()) s += other.substr(rng() % other.size());
          break;
        }
        case 4:
          if (!s.empty()) s[rng() % s.size()] = "[]{}=\"'\\\n\t#,.:()*+-/0123456789"[rng() % 32];
          break;
      }
    }
    run(s);
  }
  std::printf("%zu corpus inputs and %ld mutations: no crash\n", corpus.size(), mutations);
  return 0;
}
