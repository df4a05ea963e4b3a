#ifndef ABR_WORKER_CFFMPEG_SHIM_H
#define ABR_WORKER_CFFMPEG_SHIM_H

#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>
#include <libavformat/avio.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <libswresample/swresample.h>
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>

// Swift cannot import function-like or compound-literal macros, so the few
// FFmpeg needs are re-exported here as prefixed inline functions.

static inline int cffmpeg_averror(int posixError) { return AVERROR(posixError); }
static inline int cffmpeg_averror_eof(void) { return AVERROR_EOF; }
static inline int cffmpeg_averror_eagain(void) { return AVERROR(EAGAIN); }
static inline int cffmpeg_averror_invaliddata(void) { return AVERROR_INVALIDDATA; }
static inline int64_t cffmpeg_nopts_value(void) { return AV_NOPTS_VALUE; }
static inline AVRational cffmpeg_time_base_q(void) { return AV_TIME_BASE_Q; }
static inline int cffmpeg_pkt_flag_key(void) { return AV_PKT_FLAG_KEY; }
static inline int cffmpeg_pkt_flag_corrupt(void) { return AV_PKT_FLAG_CORRUPT; }
static inline int cffmpeg_codec_flag_global_header(void) { return AV_CODEC_FLAG_GLOBAL_HEADER; }
static inline int cffmpeg_fmt_globalheader(void) { return AVFMT_GLOBALHEADER; }
static inline int cffmpeg_fmt_nofile(void) { return AVFMT_NOFILE; }
static inline int cffmpeg_avio_flag_write(void) { return AVIO_FLAG_WRITE; }
static inline int cffmpeg_frame_flag_corrupt(void) { return AV_FRAME_FLAG_CORRUPT; }

static inline void cffmpeg_error_string(int errnum, char *buffer, size_t size) {
    if (av_strerror(errnum, buffer, size) < 0) {
        snprintf(buffer, size, "unknown FFmpeg error %d", errnum);
    }
}

/// Silences FFmpeg's own stderr logging below the given level (AV_LOG_*).
static inline void cffmpeg_set_log_level(int level) { av_log_set_level(level); }
static inline int cffmpeg_log_error(void) { return AV_LOG_ERROR; }
static inline int cffmpeg_log_fatal(void) { return AV_LOG_FATAL; }
static inline int cffmpeg_log_quiet(void) { return AV_LOG_QUIET; }
static inline int cffmpeg_log_warning(void) { return AV_LOG_WARNING; }

#endif
