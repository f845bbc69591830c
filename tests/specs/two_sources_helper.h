// Included by two_sources.cl: what the CUDA version keeps in helper.cu.
__constant float scale = 2.0f;
inline float helper(float x) { return x * 3.0f + 1.0f; }
