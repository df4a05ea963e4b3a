#include "tls_shim.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct abr_tls_context {
    SSL_CTX *ctx;
    uint8_t protocols[64];
    size_t protocols_length;
};

struct abr_tls_session {
    SSL *ssl;
    BIO *incoming;
    BIO *outgoing;
    char error[320];
};

static void describe_errors(char *out, size_t size, const char *what) {
    unsigned long code = ERR_get_error();
    char reason[240] = "no OpenSSL reason";
    if (code) ERR_error_string_n(code, reason, sizeof reason);
    ERR_clear_error();
    snprintf(out, size, "%s: %s", what, reason);
}

// The server's preference among what the client offers; no overlap goes on without ALPN
// (HTTP/1.1), as a client that offers none does.
static int select_protocol(SSL *ssl, const unsigned char **out, unsigned char *out_length,
                           const unsigned char *offered, unsigned int offered_length, void *argument) {
    (void)ssl;
    abr_tls_context *context = argument;
    unsigned char *chosen = NULL;
    unsigned char chosen_length = 0;
    if (SSL_select_next_proto(&chosen, &chosen_length, context->protocols, (unsigned int)context->protocols_length,
                              offered, offered_length) != OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    *out = chosen;
    *out_length = chosen_length;
    return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *new_context(const SSL_METHOD *method) {
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    // Renegotiation is a way to make a server work for nothing; HTTP/2 forbids it anyway.
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    // Idle connections give their read and write buffers back (a node holds thousands of players).
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return ctx;
}

abr_tls_context *abr_tls_server_context_create(const char *certificate_path, const char *key_path,
                                               const uint8_t *protocols, size_t protocols_length,
                                               int *failed_part, char *error, size_t error_size) {
    *failed_part = 0;
    ERR_clear_error();
    abr_tls_context *context = calloc(1, sizeof *context);
    if (!context || protocols_length > sizeof context->protocols) {
        snprintf(error, error_size, context ? "more ALPN protocols than 64 bytes hold" : "no memory for a TLS context");
        free(context);
        *failed_part = ABR_TLS_NO_MEMORY;
        return NULL;
    }
    context->ctx = new_context(TLS_server_method());
    if (!context->ctx) {
        describe_errors(error, error_size, "SSL_CTX_new");
        *failed_part = ABR_TLS_NO_MEMORY;
        free(context);
        return NULL;
    }
    if (SSL_CTX_use_certificate_chain_file(context->ctx, certificate_path) != 1) {
        describe_errors(error, error_size, "not a readable PEM certificate");
        *failed_part = ABR_TLS_BAD_CERTIFICATE;
    } else if (SSL_CTX_use_PrivateKey_file(context->ctx, key_path, SSL_FILETYPE_PEM) != 1) {
        describe_errors(error, error_size, "not a readable PEM private key");
        *failed_part = ABR_TLS_BAD_KEY;
    } else if (SSL_CTX_check_private_key(context->ctx) != 1) {
        describe_errors(error, error_size, "the private key is not the certificate's");
        *failed_part = ABR_TLS_KEY_MISMATCH;
    }
    if (*failed_part) {
        abr_tls_context_free(context);
        return NULL;
    }
    memcpy(context->protocols, protocols, protocols_length);
    context->protocols_length = protocols_length;
    if (protocols_length > 0) SSL_CTX_set_alpn_select_cb(context->ctx, select_protocol, context);
    return context;
}

abr_tls_context *abr_tls_client_context_create(int verify, const char *roots_path, char *error, size_t error_size) {
    ERR_clear_error();
    abr_tls_context *context = calloc(1, sizeof *context);
    if (!context) {
        snprintf(error, error_size, "no memory for a TLS context");
        return NULL;
    }
    context->ctx = new_context(TLS_client_method());
    if (!context->ctx) {
        describe_errors(error, error_size, "SSL_CTX_new");
        free(context);
        return NULL;
    }
    if (verify) {
        int loaded = roots_path ? SSL_CTX_load_verify_locations(context->ctx, roots_path, NULL)
                                : SSL_CTX_set_default_verify_paths(context->ctx);
        if (loaded != 1) {
            describe_errors(error, error_size, roots_path ? "not a readable PEM file of root certificates" : "the system's certificate roots");
            abr_tls_context_free(context);
            return NULL;
        }
        SSL_CTX_set_verify(context->ctx, SSL_VERIFY_PEER, NULL);
    }
    return context;
}

void abr_tls_context_free(abr_tls_context *context) {
    if (!context) return;
    SSL_CTX_free(context->ctx);
    free(context);
}

abr_tls_session *abr_tls_session_create(abr_tls_context *context, const char *peer_name) {
    abr_tls_session *session = calloc(1, sizeof *session);
    if (!session) return NULL;
    session->ssl = SSL_new(context->ctx);
    session->incoming = BIO_new(BIO_s_mem());
    session->outgoing = BIO_new(BIO_s_mem());
    if (!session->ssl || !session->incoming || !session->outgoing) {
        SSL_free(session->ssl);
        BIO_free(session->incoming);
        BIO_free(session->outgoing);
        free(session);
        return NULL;
    }
    // An empty input BIO means "wait for more", not the end of the stream.
    BIO_set_mem_eof_return(session->incoming, -1);
    BIO_set_mem_eof_return(session->outgoing, -1);
    SSL_set_bio(session->ssl, session->incoming, session->outgoing);
    if (SSL_is_server(session->ssl)) {
        SSL_set_accept_state(session->ssl);
    } else {
        if (peer_name && *peer_name) {
            unsigned char address[16];
            int is_address = inet_pton(AF_INET, peer_name, address) == 1 || inet_pton(AF_INET6, peer_name, address) == 1;
            X509_VERIFY_PARAM *parameters = SSL_get0_param(session->ssl);
            if (is_address) {
                X509_VERIFY_PARAM_set1_ip_asc(parameters, peer_name);
            } else {
                SSL_set_tlsext_host_name(session->ssl, peer_name);
                SSL_set1_host(session->ssl, peer_name);
            }
        }
        SSL_set_connect_state(session->ssl);
    }
    return session;
}

void abr_tls_session_free(abr_tls_session *session) {
    if (!session) return;
    SSL_free(session->ssl);  // frees both BIOs
    free(session);
}

int abr_tls_session_feed(abr_tls_session *session, const uint8_t *bytes, size_t length) {
    while (length > 0) {
        int chunk = length > 1 << 30 ? 1 << 30 : (int)length;
        int written = BIO_write(session->incoming, bytes, chunk);
        if (written <= 0) return -1;
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

static int failure(abr_tls_session *session, const char *what) {
    long verification = SSL_get_verify_result(session->ssl);
    if (!SSL_is_server(session->ssl) && verification != X509_V_OK) {
        snprintf(session->error, sizeof session->error, "%s: the peer's certificate is refused (%s)", what,
                 X509_verify_cert_error_string(verification));
        ERR_clear_error();
    } else {
        describe_errors(session->error, sizeof session->error, what);
    }
    return ABR_TLS_FAILED;
}

int abr_tls_session_handshake(abr_tls_session *session) {
    ERR_clear_error();
    int result = SSL_do_handshake(session->ssl);
    if (result == 1) return ABR_TLS_DONE;
    switch (SSL_get_error(session->ssl, result)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return ABR_TLS_WANT_MORE;
    default: return failure(session, "TLS handshake");
    }
}

long abr_tls_session_read(abr_tls_session *session, uint8_t *buffer, size_t capacity) {
    ERR_clear_error();
    int result = SSL_read(session->ssl, buffer, capacity > 1 << 30 ? 1 << 30 : (int)capacity);
    if (result > 0) return result;
    switch (SSL_get_error(session->ssl, result)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return ABR_TLS_WANT_MORE;
    case SSL_ERROR_ZERO_RETURN: return ABR_TLS_CLOSED;
    default: return failure(session, "TLS read");
    }
}

int abr_tls_session_write(abr_tls_session *session, const uint8_t *bytes, size_t length) {
    ERR_clear_error();
    while (length > 0) {
        int chunk = length > 1 << 30 ? 1 << 30 : (int)length;
        int written = SSL_write(session->ssl, bytes, chunk);
        if (written <= 0) return failure(session, "TLS write");
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

size_t abr_tls_session_pending_output(abr_tls_session *session) {
    return BIO_ctrl_pending(session->outgoing);
}

size_t abr_tls_session_take_output(abr_tls_session *session, uint8_t *buffer, size_t capacity) {
    int taken = BIO_read(session->outgoing, buffer, capacity > 1 << 30 ? 1 << 30 : (int)capacity);
    return taken > 0 ? (size_t)taken : 0;
}

size_t abr_tls_session_alpn(abr_tls_session *session, char *buffer, size_t capacity) {
    const unsigned char *protocol = NULL;
    unsigned int length = 0;
    SSL_get0_alpn_selected(session->ssl, &protocol, &length);
    if (!protocol || length == 0 || length > capacity) return 0;
    memcpy(buffer, protocol, length);
    return length;
}

void abr_tls_session_close(abr_tls_session *session) {
    ERR_clear_error();
    SSL_shutdown(session->ssl);
    ERR_clear_error();
}

const char *abr_tls_session_error(abr_tls_session *session) {
    return session->error[0] ? session->error : "no reason recorded";
}
