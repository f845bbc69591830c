// A small SIMD layer in the style DeepSpeed uses for its CPU ops: the builder picks the width
// with -D__AVX512__, -D__AVX256__ or -D__SCALAR__ (from the CPU's flags), and the kernels are
// written once against these macros. The macro names match DeepSpeed's builders so that a
// builder's simd_width() drives them, the code is kiln's own.
#pragma once

#include <cstddef>

#if defined(__AVX512__) || defined(__AVX256__)
#include <immintrin.h>
#endif

#if defined(__AVX512__)
#if !defined(__AVX512F__)
#error "__AVX512__ was requested but the compiler targets no AVX-512F (add -march=native)"
#endif
#define KSIMD_WIDTH 16
typedef __m512 ksimd_f32;
#define KSIMD_LOAD(p) _mm512_loadu_ps(p)
#define KSIMD_STORE(p, v) _mm512_storeu_ps(p, v)
#define KSIMD_SET1(x) _mm512_set1_ps(x)
#define KSIMD_ADD(a, b) _mm512_add_ps(a, b)
#define KSIMD_MUL(a, b) _mm512_mul_ps(a, b)
#define KSIMD_DIV(a, b) _mm512_div_ps(a, b)
#define KSIMD_SQRT(a) _mm512_sqrt_ps(a)
#define KSIMD_ISA "avx512"
#elif defined(__AVX256__)
#if !defined(__AVX2__)
#error "__AVX256__ was requested but the compiler targets no AVX2 (add -march=native)"
#endif
#define KSIMD_WIDTH 8
typedef __m256 ksimd_f32;
#define KSIMD_LOAD(p) _mm256_loadu_ps(p)
#define KSIMD_STORE(p, v) _mm256_storeu_ps(p, v)
#define KSIMD_SET1(x) _mm256_set1_ps(x)
#define KSIMD_ADD(a, b) _mm256_add_ps(a, b)
#define KSIMD_MUL(a, b) _mm256_mul_ps(a, b)
#define KSIMD_DIV(a, b) _mm256_div_ps(a, b)
#define KSIMD_SQRT(a) _mm256_sqrt_ps(a)
#define KSIMD_ISA "avx256"
#else
#define KSIMD_WIDTH 1
#define KSIMD_ISA "scalar"
#endif

// Elements one tile of `span` SIMD registers covers.
#define KSIMD_TILE(span) (static_cast<std::size_t>(KSIMD_WIDTH) * (span))
