/* A program linked against the real libnvrtc.so.13 (as DeepGEMM's NVRTC mode is), for the tests
   of libkiln_nvrtc.so: it compiles one source with the options it is given and prints every
   answer a caller can ask afterwards, so that a run through kiln can be compared line by line
   with a run of the real NVRTC alone.

   usage: nvrtc_client SOURCE NAME_EXPRESSION [OPTION...]
   The environment's GIVEN_HEADER, when set, is handed to nvrtcCreateProgram as "given.h"; its
   RECOMPILE_ARCH, when set, compiles the same program a second time with that option in the
   first option's place (the arch) and prints the answers again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct _nvrtcProgram* nvrtcProgram;
int nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
int nvrtcAddNameExpression(nvrtcProgram, const char*);
int nvrtcCompileProgram(nvrtcProgram, int, const char* const*);
int nvrtcGetPTXSize(nvrtcProgram, size_t*);
int nvrtcGetPTX(nvrtcProgram, char*);
int nvrtcGetCUBINSize(nvrtcProgram, size_t*);
int nvrtcGetCUBIN(nvrtcProgram, char*);
int nvrtcGetLTOIRSize(nvrtcProgram, size_t*);
int nvrtcGetLTOIR(nvrtcProgram, char*);
int nvrtcGetProgramLogSize(nvrtcProgram, size_t*);
int nvrtcGetProgramLog(nvrtcProgram, char*);
int nvrtcGetLoweredName(nvrtcProgram, const char*, const char**);
int nvrtcGetPCHCreateStatus(nvrtcProgram);
int nvrtcDestroyProgram(nvrtcProgram*);

static unsigned long long fnv1a(const char* p, size_t n) {
  unsigned long long h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

static void output(nvrtcProgram p, const char* name, int (*size_of)(nvrtcProgram, size_t*), int (*get)(nvrtcProgram, char*)) {
  size_t n = 0;
  int rc = size_of(p, &n);
  if (rc != 0 || !get) {
    printf("%s rc %d size %zu\n", name, rc, rc == 0 ? n : 0);
    return;
  }
  char* bytes = malloc(n ? n : 1);
  rc = get(p, bytes);
  printf("%s rc %d size %zu fnv %016llx\n", name, rc, n, fnv1a(bytes, n));
  free(bytes);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: nvrtc_client SOURCE NAME_EXPRESSION [OPTION...]\n");
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 2;
  static char source[1 << 20];
  size_t n = fread(source, 1, sizeof source - 1, f);
  fclose(f);
  source[n] = 0;
  const char* given = getenv("GIVEN_HEADER");
  const char* names[] = {"given.h"};
  nvrtcProgram p;
  int rc = nvrtcCreateProgram(&p, source, "client.cu", given ? 1 : 0, given ? &given : NULL, given ? names : NULL);
  printf("create %d\n", rc);
  if (rc != 0) return 1;
  printf("add %d\n", nvrtcAddNameExpression(p, argv[2]));
  printf("compile %d\n", nvrtcCompileProgram(p, argc - 3, (const char* const*)argv + 3));
  output(p, "ptx", nvrtcGetPTXSize, nvrtcGetPTX);
  const char* again = getenv("RECOMPILE_ARCH");
  if (again && argc > 3) {
    argv[3] = (char*)again;
    printf("compile again %d\n", nvrtcCompileProgram(p, argc - 3, (const char* const*)argv + 3));
    output(p, "ptx", nvrtcGetPTXSize, nvrtcGetPTX);
  }
  output(p, "cubin", nvrtcGetCUBINSize, nvrtcGetCUBIN);
  output(p, "ltoir", nvrtcGetLTOIRSize, nvrtcGetLTOIR);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(p, &log_size);
  char* log = malloc(log_size + 1);
  nvrtcGetProgramLog(p, log);
  log[log_size] = 0;
  printf("log size %zu: %s\n", log_size, log);
  free(log);
  const char* lowered = NULL;
  rc = nvrtcGetLoweredName(p, argv[2], &lowered);
  printf("lowered %d %s\n", rc, rc == 0 ? lowered : "-");
  printf("pch %d\n", nvrtcGetPCHCreateStatus(p));
  printf("destroy %d\n", nvrtcDestroyProgram(&p));
  return 0;
}
