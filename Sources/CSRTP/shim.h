// libsrtp2 (Debian's libsrtp2-dev): SRTP and SRTCP for WebRTC viewers.
#include <srtp2/srtp.h>
