// What the OpenSSL cipher types for libsrtp2 share (srtp_gcm_openssl.c, srtp_icm_hmac_openssl.c):
// a libsrtp2 cipher and its state in one allocation, the state starting with OpenSSL's context.
#ifndef ABR_SRTP_OPENSSL_CIPHER_H
#define ABR_SRTP_OPENSSL_CIPHER_H

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <srtp2/cipher.h>
#include <stdlib.h>

/// A cipher of `type` whose state (`state_size` bytes, zeroed) starts with an `EVP_CIPHER_CTX *`,
/// made here; the caller fills in the rest of the state.
static inline srtp_err_status_t abr_srtp_cipher_allocate(srtp_cipher_pointer_t *pointer, const srtp_cipher_type_t *type,
                                                         int algorithm, int key_length, size_t state_size) {
    srtp_cipher_t *instance = calloc(1, sizeof(srtp_cipher_t) + state_size);
    if (instance == NULL) return srtp_err_status_alloc_fail;
    EVP_CIPHER_CTX **context = (EVP_CIPHER_CTX **)(instance + 1);
    *context = EVP_CIPHER_CTX_new();
    if (*context == NULL) {
        free(instance);
        return srtp_err_status_alloc_fail;
    }
    instance->type = type;
    instance->state = context;
    instance->key_len = key_length;
    instance->algorithm = algorithm;
    *pointer = instance;
    return srtp_err_status_ok;
}

/// Frees what `abr_srtp_cipher_allocate` made, the key schedule and any salt cleared first.
static inline srtp_err_status_t abr_srtp_cipher_free(srtp_cipher_pointer_t instance, size_t state_size) {
    EVP_CIPHER_CTX_free(*(EVP_CIPHER_CTX **)instance->state);
    OPENSSL_cleanse(instance->state, state_size);
    free(instance);
    return srtp_err_status_ok;
}

#endif
