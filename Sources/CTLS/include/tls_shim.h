// A small C shim over OpenSSL's TLS for TCP connections: the node's HTTPS (with ALPN, so HTTP/2)
// and its PostgreSQL client's TLS. Bytes go in and out through memory, never a socket; the
// node's SwiftNIO handler moves them. Debian's libssl, the library the DTLS shim uses too.
#ifndef ABR_TLS_SHIM_H
#define ABR_TLS_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef struct abr_tls_context abr_tls_context;
typedef struct abr_tls_session abr_tls_session;

/// Which part of a server's PEM files could not be used.
enum { ABR_TLS_BAD_CERTIFICATE = 1, ABR_TLS_BAD_KEY = 2, ABR_TLS_KEY_MISMATCH = 3, ABR_TLS_NO_MEMORY = 4 };

/// A server context: the certificate chain (leaf first) and its private key from PEM files, TLS
/// 1.2 or later, and ALPN from `protocols` (wire format: each name after its length byte, in the
/// server's order of preference). NULL on failure: `failed_part` says which, `error` why.
abr_tls_context *abr_tls_server_context_create(const char *certificate_path, const char *key_path,
                                               const uint8_t *protocols, size_t protocols_length,
                                               int *failed_part, char *error, size_t error_size);
/// A client context: TLS 1.2 or later, the peer verified when `verify` against the roots in the
/// PEM file `roots_path`, or the system's when it is NULL.
abr_tls_context *abr_tls_client_context_create(int verify, const char *roots_path, char *error, size_t error_size);
void abr_tls_context_free(abr_tls_context *context);

/// A session of `context`'s role. A client's `peer_name` (a host name or an address, or NULL)
/// is sent as SNI when it is a name, and the certificate must name it.
abr_tls_session *abr_tls_session_create(abr_tls_context *context, const char *peer_name);
void abr_tls_session_free(abr_tls_session *session);

enum { ABR_TLS_WANT_MORE = 0, ABR_TLS_DONE = 1, ABR_TLS_FAILED = -1, ABR_TLS_CLOSED = -2 };

/// Bytes received from the peer, for the session to read. 0, or -1 when memory ran out.
int abr_tls_session_feed(abr_tls_session *session, const uint8_t *bytes, size_t length);
/// Advances the handshake: DONE, WANT_MORE (send the output, wait for more input) or FAILED.
int abr_tls_session_handshake(abr_tls_session *session);
/// Decrypted bytes (their count), WANT_MORE when none are whole yet, CLOSED after the peer's
/// close_notify, or FAILED.
long abr_tls_session_read(abr_tls_session *session, uint8_t *buffer, size_t capacity);
/// Encrypts `bytes` into the output. 0, or FAILED.
int abr_tls_session_write(abr_tls_session *session, const uint8_t *bytes, size_t length);
/// Bytes waiting to be sent to the peer.
size_t abr_tls_session_pending_output(abr_tls_session *session);
/// Takes up to `capacity` of them (their count).
size_t abr_tls_session_take_output(abr_tls_session *session, uint8_t *buffer, size_t capacity);
/// The protocol ALPN chose (its length; 0 when none), once the handshake is done.
size_t abr_tls_session_alpn(abr_tls_session *session, char *buffer, size_t capacity);
/// A close_notify, into the output.
void abr_tls_session_close(abr_tls_session *session);
/// Why the session failed (OpenSSL's reason, and the certificate check's), for the log.
const char *abr_tls_session_error(abr_tls_session *session);

#endif
