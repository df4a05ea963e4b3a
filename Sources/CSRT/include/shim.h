#ifndef ABR_CSRT_SHIM_H
#define ABR_CSRT_SHIM_H
// libsrt (Debian's libsrt-gnutls-dev): only SRTServer imports this module.
#include <srt/srt.h>
#include <srt/access_control.h>
#endif
