#include "support/zstd_frame.h"

#include <zstd.h>

#include <algorithm>
#include <memory>

namespace kiln {

Result<std::string> zstd_decompress_exact(std::string_view frame, uint64_t expected, ZstdFrameLimits limits,
                                          const std::string& what) {
  if (ZSTD_getFrameContentSize(frame.data(), frame.size()) != expected)
    return Status(StatusCode::kDataLoss, what + " frame size does not match the header");
  // Reused per thread; reset (its window limit set again) before each frame.
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) return Status(StatusCode::kInternal, "cannot make a zstd decoder");
  ZSTD_DCtx_reset(ctx.get(), ZSTD_reset_session_only);
  ZSTD_DCtx_setParameter(ctx.get(), ZSTD_d_windowLogMax, limits.max_window_log);
  std::string out;
  out.resize(static_cast<size_t>(std::min<uint64_t>(expected, limits.first_output_bytes)));
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  ZSTD_outBuffer to{out.data(), out.size(), 0};
  for (;;) {
    size_t in_before = in.pos, out_before = to.pos;
    size_t left = ZSTD_decompressStream(ctx.get(), &to, &in);
    if (ZSTD_isError(left)) return Status(StatusCode::kDataLoss, what + ": " + ZSTD_getErrorName(left));
    if (left == 0) break;  // the frame is done
    if (to.pos == to.size && to.size < expected) {
      out.resize(static_cast<size_t>(std::min<uint64_t>(expected, uint64_t{to.size} * 2)));
      to.dst = out.data();
      to.size = out.size();
    } else if (in.pos == in_before && to.pos == out_before) {
      // Stuck: more output than the header declared, or the frame ends early.
      return Status(StatusCode::kDataLoss, what + (to.pos == expected ? " is longer than its header says" : " is cut short"));
    }
  }
  if (to.pos != expected)
    return Status(StatusCode::kDataLoss, what + " is " + std::to_string(to.pos) + " bytes, its header says " + std::to_string(expected));
  return out;  // to.pos == expected, and the buffer never grows past expected: it is exactly full
}

}  // namespace kiln
