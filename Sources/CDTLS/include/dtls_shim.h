// A small C shim over OpenSSL's DTLS 1.2 for WebRTC (RFC 5763/5764): a server (and, for tests,
// a client) that reads and writes datagrams through memory, never a socket; the node's Swift
// code moves the datagrams. As OvenMediaEngine does, OpenSSL is used through a few calls only.
#ifndef ABR_DTLS_SHIM_H
#define ABR_DTLS_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef struct abr_dtls_context abr_dtls_context;
typedef struct abr_dtls_session abr_dtls_session;

/// SRTP protection profiles as RFC 5764 / RFC 7714 number them.
enum { ABR_SRTP_AES128_CM_SHA1_80 = 0x0001, ABR_SRTP_AEAD_AES_128_GCM = 0x0007 };

/// A fresh ECDSA P-256 key and a self-signed certificate; `fingerprint` receives its SHA-256
/// as "AB:CD:..." (95 characters and a NUL). NULL on failure, with the reason in `error`.
abr_dtls_context *abr_dtls_context_create(char fingerprint[96], char *error, size_t error_size);
void abr_dtls_context_free(abr_dtls_context *context);

/// A session in the server role (or the client role, for tests). `mtu`: the largest datagram.
abr_dtls_session *abr_dtls_session_create(abr_dtls_context *context, int client, int mtu);
void abr_dtls_session_free(abr_dtls_session *session);

/// Results of feeding a datagram or of a timer.
enum { ABR_DTLS_IN_PROGRESS = 0, ABR_DTLS_CONNECTED = 1, ABR_DTLS_FAILED = -1, ABR_DTLS_CLOSED = 2 };

/// Starts the handshake (the client's first flight); the server waits for the peer.
int abr_dtls_session_start(abr_dtls_session *session);
/// Gives one received datagram to the session; what it answers waits in `abr_dtls_session_next_output`.
int abr_dtls_session_feed(abr_dtls_session *session, const uint8_t *datagram, size_t length);
/// The next datagram to send (its length), 0 when none waits, or -1 when `capacity` is too small.
long abr_dtls_session_next_output(abr_dtls_session *session, uint8_t *buffer, size_t capacity);
/// Milliseconds until the handshake's retransmission timer fires (-1: no timer running).
long abr_dtls_session_timeout_ms(abr_dtls_session *session);
/// Call when that timer fired: retransmits the last flight (into the outputs) or gives up.
int abr_dtls_session_handle_timeout(abr_dtls_session *session);
/// Why the session failed (OpenSSL's reason), for the log.
const char *abr_dtls_session_error(abr_dtls_session *session);

/// Once connected: the peer certificate's SHA-256 fingerprint ("AB:CD:..."); 0 on success.
int abr_dtls_session_peer_fingerprint(abr_dtls_session *session, char fingerprint[96]);
/// Once connected: the negotiated SRTP profile (ABR_SRTP_*), 0 when none.
int abr_dtls_session_srtp_profile(abr_dtls_session *session);
/// Once connected: the keying material for SRTP (RFC 5764 §4.2, label "EXTRACTOR-dtls_srtp"),
/// `length` bytes: client key, server key, client salt, server salt. 0 on success.
int abr_dtls_session_export_srtp_keys(abr_dtls_session *session, uint8_t *out, size_t length);
/// Sends a close_notify (into the outputs).
void abr_dtls_session_close(abr_dtls_session *session);

#endif
