// IEEE binary16 ("half", _Float16, __half) and bfloat16 (__bf16, __nv_bfloat16) to and from
// float, rounding to nearest even as the hardware does: the host side of kernels' half
// types, for kiln's checks, which fill and read their buffers. kiln itself is built by g++,
// whose support of these types varies by version, so the conversions are spelled out here.
#pragma once

#include <cstdint>

namespace kiln {

uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(uint16_t bits);

}  // namespace kiln
