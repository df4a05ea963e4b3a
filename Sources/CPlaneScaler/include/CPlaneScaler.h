#ifndef C_PLANE_SCALER_H
#define C_PLANE_SCALER_H
/*
 * Resamples one 8-bit picture plane to another size with Keys' bicubic (B = 0, C = 0.6, the
 * kernel of swscale's SWS_BICUBIC), vertically first and then horizontally, in 14-bit fixed
 * point with a 16-bit intermediate. Vertical first means the horizontal pass, the one that
 * gathers, runs on the output's rows rather than the source's; with AVX-512 it gathers 16
 * outputs' taps at once from a register (vpermt2w). Plain C where neither AVX2 nor AVX-512 is
 * there; every path gives the same bytes.
 *
 * Pure C with no FFmpeg: FFmpegBridge's Scaler hands it the planes of its frames.
 */
#include <stddef.h>
#include <stdint.h>

typedef struct abr_plane_scaler abr_plane_scaler;

/* What a scaler may use, the widest first; the scaler takes the widest this CPU runs. */
typedef enum {
    ABR_PLANE_SCALER_PORTABLE = 0,
    ABR_PLANE_SCALER_AVX2 = 1,
    ABR_PLANE_SCALER_AVX512 = 2,
} abr_plane_scaler_kernel;

/* NULL when a size is below 1 or above 1 << 14, or memory is short. */
abr_plane_scaler *abr_plane_scaler_create(int src_width, int src_height, int dst_width, int dst_height,
                                          abr_plane_scaler_kernel widest);
void abr_plane_scaler_free(abr_plane_scaler *scaler);

/* Reads src_height rows of src_width bytes and writes dst_height rows of dst_width bytes.
 * Neither is read or written past its width. Not reentrant: one scaler per thread. */
void abr_plane_scaler_run(abr_plane_scaler *scaler, const uint8_t *src, ptrdiff_t src_stride,
                          uint8_t *dst, ptrdiff_t dst_stride);

/* The kernel this scaler runs. */
abr_plane_scaler_kernel abr_plane_scaler_kernel_in_use(const abr_plane_scaler *scaler);

#endif
