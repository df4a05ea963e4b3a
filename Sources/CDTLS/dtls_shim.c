#include "dtls_shim.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct abr_dtls_context {
    SSL_CTX *ctx;
};

// Datagrams OpenSSL wrote, kept apart: DTLS writes each datagram with one BIO_write, and a memory
// BIO would run a flight's datagrams together past the MTU.
#define ABR_DTLS_MAX_QUEUED 64
typedef struct {
    uint8_t *data[ABR_DTLS_MAX_QUEUED];
    size_t length[ABR_DTLS_MAX_QUEUED];
    int head, count;
    long mtu;
} datagram_queue;

struct abr_dtls_session {
    SSL *ssl;
    BIO *incoming;
    datagram_queue outgoing;
    int state;
    char error[256];
};

static BIO_METHOD *queue_method;

static int queue_write(BIO *bio, const char *data, int length) {
    datagram_queue *queue = BIO_get_data(bio);
    if (length <= 0) return 0;
    if (queue->count == ABR_DTLS_MAX_QUEUED) return -1;
    int slot = (queue->head + queue->count) % ABR_DTLS_MAX_QUEUED;
    queue->data[slot] = malloc((size_t)length);
    if (!queue->data[slot]) return -1;
    memcpy(queue->data[slot], data, (size_t)length);
    queue->length[slot] = (size_t)length;
    queue->count++;
    return length;
}

static long queue_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number; (void)pointer;
    datagram_queue *queue = BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_WPENDING: return 0;
    case BIO_CTRL_PENDING: return 0;
    case BIO_CTRL_DGRAM_QUERY_MTU: return queue->mtu;
    case BIO_CTRL_DGRAM_GET_MTU_OVERHEAD: return 28; // IPv4 + UDP
    default: return 0;
    }
}

static int queue_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

static void free_queue(datagram_queue *queue) {
    while (queue->count > 0) {
        free(queue->data[queue->head]);
        queue->head = (queue->head + 1) % ABR_DTLS_MAX_QUEUED;
        queue->count--;
    }
}

static void describe_errors(char *out, size_t size, const char *what) {
    unsigned long code = ERR_get_error();
    char reason[200] = "no OpenSSL reason";
    if (code) ERR_error_string_n(code, reason, sizeof reason);
    snprintf(out, size, "%s: %s", what, reason);
    ERR_clear_error();
}

// The certificate is checked against the SDP's fingerprint after the handshake, not by a CA.
static int accept_any_certificate(int preverify, X509_STORE_CTX *store) {
    (void)preverify; (void)store;
    return 1;
}

static int fingerprint_of(X509 *certificate, char out[96]) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (!X509_digest(certificate, EVP_sha256(), digest, &length) || length != 32) return -1;
    for (unsigned int index = 0; index < length; index++) {
        snprintf(out + index * 3, 4, index + 1 < length ? "%02X:" : "%02X", digest[index]);
    }
    return 0;
}

abr_dtls_context *abr_dtls_context_create(char fingerprint[96], char *error, size_t error_size) {
    if (!queue_method) {
        BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "abr datagram queue");
        BIO_meth_set_write(method, queue_write);
        BIO_meth_set_ctrl(method, queue_ctrl);
        BIO_meth_set_create(method, queue_create);
        queue_method = method;
    }
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *certificate = X509_new();
    SSL_CTX *ctx = SSL_CTX_new(DTLS_method());
    if (!key || !certificate || !ctx) {
        describe_errors(error, error_size, "cannot make a DTLS key, certificate or context");
        goto fail;
    }
    // A random serial, valid from a day ago for 30 days; the name is WebRTC's usual one.
    unsigned char serial[8];
    RAND_bytes(serial, sizeof serial);
    serial[0] &= 0x7F;
    BIGNUM *number = BN_bin2bn(serial, sizeof serial, NULL);
    BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate));
    BN_free(number);
    X509_set_version(certificate, 2);
    X509_gmtime_adj(X509_getm_notBefore(certificate), -86400);
    X509_gmtime_adj(X509_getm_notAfter(certificate), 30L * 86400);
    X509_NAME *name = X509_get_subject_name(certificate);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"WebRTC", -1, -1, 0);
    X509_set_issuer_name(certificate, name);
    X509_set_pubkey(certificate, key);
    if (!X509_sign(certificate, key, EVP_sha256())) {
        describe_errors(error, error_size, "cannot sign the DTLS certificate");
        goto fail;
    }
    if (!SSL_CTX_use_certificate(ctx, certificate) || !SSL_CTX_use_PrivateKey(ctx, key)) {
        describe_errors(error, error_size, "cannot use the DTLS certificate");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, DTLS1_2_VERSION);
    SSL_CTX_set_cipher_list(ctx, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, accept_any_certificate);
    SSL_CTX_set_read_ahead(ctx, 1);
    // Note: OpenSSL's list is "<name>:<name>"; it returns 0 on success.
    if (SSL_CTX_set_tlsext_use_srtp(ctx, "SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_80") != 0) {
        describe_errors(error, error_size, "cannot offer DTLS-SRTP profiles");
        goto fail;
    }
    if (fingerprint_of(certificate, fingerprint) != 0) {
        describe_errors(error, error_size, "cannot take the certificate's fingerprint");
        goto fail;
    }
    X509_free(certificate);
    EVP_PKEY_free(key);
    abr_dtls_context *context = calloc(1, sizeof *context);
    context->ctx = ctx;
    return context;
fail:
    if (ctx) SSL_CTX_free(ctx);
    if (certificate) X509_free(certificate);
    if (key) EVP_PKEY_free(key);
    return NULL;
}

void abr_dtls_context_free(abr_dtls_context *context) {
    if (!context) return;
    SSL_CTX_free(context->ctx);
    free(context);
}

abr_dtls_session *abr_dtls_session_create(abr_dtls_context *context, int client, int mtu) {
    abr_dtls_session *session = calloc(1, sizeof *session);
    if (!session) return NULL;
    session->ssl = SSL_new(context->ctx);
    session->incoming = BIO_new(BIO_s_mem());
    BIO *outgoing = BIO_new(queue_method);
    if (!session->ssl || !session->incoming || !outgoing) {
        if (outgoing) BIO_free(outgoing);
        abr_dtls_session_free(session);
        return NULL;
    }
    session->outgoing.mtu = mtu > 0 ? mtu : 1200;
    BIO_set_data(outgoing, &session->outgoing);
    BIO_set_mem_eof_return(session->incoming, -1);
    SSL_set_bio(session->ssl, session->incoming, outgoing);
    SSL_set_options(session->ssl, SSL_OP_NO_QUERY_MTU);
    SSL_set_mtu(session->ssl, session->outgoing.mtu - 28);
    DTLS_set_link_mtu(session->ssl, session->outgoing.mtu);
    if (client) SSL_set_connect_state(session->ssl); else SSL_set_accept_state(session->ssl);
    return session;
}

void abr_dtls_session_free(abr_dtls_session *session) {
    if (!session) return;
    if (session->ssl) SSL_free(session->ssl); // frees both BIOs
    else if (session->incoming) BIO_free(session->incoming);
    free_queue(&session->outgoing);
    free(session);
}

static int step(abr_dtls_session *session) {
    if (session->state == ABR_DTLS_FAILED || session->state == ABR_DTLS_CLOSED) return session->state;
    if (!SSL_is_init_finished(session->ssl)) {
        int result = SSL_do_handshake(session->ssl);
        if (result == 1) {
            session->state = ABR_DTLS_CONNECTED;
        } else {
            int reason = SSL_get_error(session->ssl, result);
            if (reason != SSL_ERROR_WANT_READ && reason != SSL_ERROR_WANT_WRITE) {
                describe_errors(session->error, sizeof session->error, "DTLS handshake failed");
                session->state = ABR_DTLS_FAILED;
            }
        }
        return session->state;
    }
    // After the handshake the peer sends nothing but alerts (no application data in WebRTC
    // media): read them, so a close_notify ends the session.
    uint8_t sink[2048];
    int result = SSL_read(session->ssl, sink, sizeof sink);
    if (result <= 0) {
        int reason = SSL_get_error(session->ssl, result);
        if (reason == SSL_ERROR_ZERO_RETURN) session->state = ABR_DTLS_CLOSED;
        else if (reason != SSL_ERROR_WANT_READ && reason != SSL_ERROR_WANT_WRITE) {
            describe_errors(session->error, sizeof session->error, "DTLS failed");
            session->state = ABR_DTLS_FAILED;
        }
    }
    ERR_clear_error();
    return session->state;
}

int abr_dtls_session_start(abr_dtls_session *session) { return step(session); }

int abr_dtls_session_feed(abr_dtls_session *session, const uint8_t *datagram, size_t length) {
    if (length == 0 || length > 65535) return session->state;
    // What came before and was not read (a bad record) is dropped, one datagram at a time.
    BIO_reset(session->incoming);
    BIO_write(session->incoming, datagram, (int)length);
    return step(session);
}

long abr_dtls_session_next_output(abr_dtls_session *session, uint8_t *buffer, size_t capacity) {
    datagram_queue *queue = &session->outgoing;
    if (queue->count == 0) return 0;
    size_t length = queue->length[queue->head];
    if (length > capacity) return -1;
    memcpy(buffer, queue->data[queue->head], length);
    free(queue->data[queue->head]);
    queue->head = (queue->head + 1) % ABR_DTLS_MAX_QUEUED;
    queue->count--;
    return (long)length;
}

long abr_dtls_session_timeout_ms(abr_dtls_session *session) {
    struct timeval left;
    if (SSL_is_init_finished(session->ssl) || !DTLSv1_get_timeout(session->ssl, &left)) return -1;
    return left.tv_sec * 1000 + left.tv_usec / 1000;
}

int abr_dtls_session_handle_timeout(abr_dtls_session *session) {
    if (DTLSv1_handle_timeout(session->ssl) < 0) {
        describe_errors(session->error, sizeof session->error, "DTLS handshake timed out");
        session->state = ABR_DTLS_FAILED;
    }
    return session->state;
}

const char *abr_dtls_session_error(abr_dtls_session *session) { return session->error; }

int abr_dtls_session_peer_fingerprint(abr_dtls_session *session, char fingerprint[96]) {
    X509 *peer = SSL_get1_peer_certificate(session->ssl);
    if (!peer) return -1;
    int result = fingerprint_of(peer, fingerprint);
    X509_free(peer);
    return result;
}

int abr_dtls_session_srtp_profile(abr_dtls_session *session) {
    SRTP_PROTECTION_PROFILE *profile = SSL_get_selected_srtp_profile(session->ssl);
    return profile ? (int)profile->id : 0;
}

int abr_dtls_session_export_srtp_keys(abr_dtls_session *session, uint8_t *out, size_t length) {
    static const char label[] = "EXTRACTOR-dtls_srtp";
    return SSL_export_keying_material(session->ssl, out, length, label, sizeof label - 1, NULL, 0, 0) == 1 ? 0 : -1;
}

void abr_dtls_session_close(abr_dtls_session *session) {
    if (SSL_is_init_finished(session->ssl)) SSL_shutdown(session->ssl);
    session->state = ABR_DTLS_CLOSED;
}
