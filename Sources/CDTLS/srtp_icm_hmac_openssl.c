// AES-ICM (AES in counter mode, RFC 3711 §4.1.1) and HMAC-SHA1 (§4.2.1) for libsrtp2 through
// OpenSSL (see srtp_openssl.h for why). AES-ICM also derives every session's keys (§4.3), so
// this one replacement serves both profiles' key derivation and AES_CM_128_HMAC_SHA1_80's media.
#include "srtp_openssl.h"
#include "srtp_openssl_cipher.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <srtp2/auth.h>
#include <srtp2/cipher.h>
#include <srtp2/srtp.h>
#include <stdlib.h>
#include <string.h>

// MARK: AES-ICM with a 128-bit key

enum { icm_key_size = 16, icm_salt_size = 14 };

typedef struct {
    EVP_CIPHER_CTX *context;  // first: see srtp_openssl_cipher.h
    uint8_t offset[16];  // the salt, its last two bytes zero: each packet's counter is it XOR the IV
} icm_state;

static const srtp_cipher_type_t icm_128;

static srtp_err_status_t icm_alloc(srtp_cipher_pointer_t *pointer, int key_length, int tag_length) {
    (void)tag_length;
    if (key_length != SRTP_AES_ICM_128_KEY_LEN_WSALT) return srtp_err_status_bad_param;
    return abr_srtp_cipher_allocate(pointer, &icm_128, SRTP_AES_ICM_128, key_length, sizeof(icm_state));
}

static srtp_err_status_t icm_dealloc(srtp_cipher_pointer_t instance) { return abr_srtp_cipher_free(instance, sizeof(icm_state)); }

/// `key`: the 16-byte key, then the 14-byte salt.
static srtp_err_status_t icm_init(void *opaque, const uint8_t *key) {
    icm_state *state = opaque;
    memset(state->offset, 0, sizeof state->offset);
    memcpy(state->offset, key + icm_key_size, icm_salt_size);
    if (EVP_EncryptInit_ex(state->context, EVP_aes_128_ctr(), NULL, key, state->offset) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

/// Counter mode is its own inverse: the direction does not matter.
static srtp_err_status_t icm_set_iv(void *opaque, uint8_t *iv, srtp_cipher_direction_t direction) {
    (void)direction;
    icm_state *state = opaque;
    uint8_t counter[16];
    for (int index = 0; index < 16; index++) counter[index] = state->offset[index] ^ iv[index];
    if (EVP_EncryptInit_ex(state->context, NULL, NULL, NULL, counter) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t icm_encrypt(void *opaque, uint8_t *buffer, unsigned int *length) {
    icm_state *state = opaque;
    int written = 0;
    if (*length > 0 && EVP_EncryptUpdate(state->context, buffer, &written, buffer, (int)*length) != 1)
        return srtp_err_status_cipher_fail;
    return srtp_err_status_ok;
}

// RFC 3711's AES-CM test vector (Appendix B.2): the first 32 bytes of keystream.
static const uint8_t icm_key[30] = {0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c,
                                    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd};
static uint8_t icm_iv[16];
static const uint8_t icm_plaintext[32];
static const uint8_t icm_keystream[32] = {0xe0, 0x3e, 0xad, 0x09, 0x35, 0xc9, 0x5e, 0x80, 0xe1, 0x66, 0xb1, 0x6d, 0xd9, 0x2b, 0x4e, 0xb4,
                                          0xd2, 0x35, 0x13, 0x16, 0x2b, 0x02, 0xd0, 0xf7, 0x2a, 0x43, 0xa2, 0xfe, 0x4a, 0x5f, 0x97, 0xab};
static const srtp_cipher_test_case_t icm_test = {30, icm_key, icm_iv, 32, icm_plaintext, 32, icm_keystream, 0, NULL, 0, NULL};

static const srtp_cipher_type_t icm_128 = {
    icm_alloc, icm_dealloc, icm_init, NULL, icm_encrypt, icm_encrypt, icm_set_iv, NULL,
    "AES-128-ICM (OpenSSL)", &icm_test, SRTP_AES_ICM_128};

// MARK: HMAC-SHA1

typedef struct {
    EVP_MAC_CTX *context;
} hmac_state;

static const srtp_auth_type_t hmac_sha1;

static srtp_err_status_t hmac_alloc(srtp_auth_pointer_t *pointer, int key_length, int tag_length) {
    // SRTP's authentication keys are 20 bytes; the tag is at most SHA-1's 20.
    if (key_length < 0 || key_length > 20 || tag_length < 0 || tag_length > 20) return srtp_err_status_bad_param;
    srtp_auth_t *instance = calloc(1, sizeof(srtp_auth_t) + sizeof(hmac_state));
    if (instance == NULL) return srtp_err_status_alloc_fail;
    hmac_state *state = (hmac_state *)(instance + 1);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    state->context = mac == NULL ? NULL : EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);  // the context holds its own reference
    if (state->context == NULL) {
        free(instance);
        return srtp_err_status_alloc_fail;
    }
    instance->type = &hmac_sha1;
    instance->state = state;
    instance->out_len = tag_length;
    instance->key_len = key_length;
    instance->prefix_len = 0;
    *pointer = instance;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_dealloc(srtp_auth_pointer_t instance) {
    hmac_state *state = instance->state;
    EVP_MAC_CTX_free(state->context);
    free(instance);
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_init(void *opaque, const uint8_t *key, int key_length) {
    hmac_state *state = opaque;
    OSSL_PARAM parameters[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA1", 0), OSSL_PARAM_construct_end()};
    if (EVP_MAC_init(state->context, key, (size_t)key_length, parameters) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

/// A new message under the same key (OpenSSL keeps the key's inner and outer states).
static srtp_err_status_t hmac_start(void *opaque) {
    hmac_state *state = opaque;
    if (EVP_MAC_init(state->context, NULL, 0, NULL) != 1) return srtp_err_status_auth_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_update(void *opaque, const uint8_t *buffer, int length) {
    hmac_state *state = opaque;
    if (length > 0 && EVP_MAC_update(state->context, buffer, (size_t)length) != 1) return srtp_err_status_auth_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_compute(void *opaque, const uint8_t *buffer, int length, int tag_length, uint8_t *tag) {
    hmac_state *state = opaque;
    if (tag_length < 0 || tag_length > 20) return srtp_err_status_bad_param;
    srtp_err_status_t status = hmac_update(opaque, buffer, length);
    if (status != srtp_err_status_ok) return status;
    uint8_t digest[EVP_MAX_MD_SIZE];
    size_t digest_length = 0;
    if (EVP_MAC_final(state->context, digest, &digest_length, sizeof digest) != 1 || digest_length < (size_t)tag_length)
        return srtp_err_status_auth_fail;
    memcpy(tag, digest, (size_t)tag_length);
    return srtp_err_status_ok;
}

// RFC 2202's first HMAC-SHA1 test case: a key of twenty 0x0b bytes, "Hi There".
static const uint8_t hmac_key[20] = {0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b,
                                     0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b};
static const uint8_t hmac_data[8] = {'H', 'i', ' ', 'T', 'h', 'e', 'r', 'e'};
static const uint8_t hmac_tag[20] = {0xb6, 0x17, 0x31, 0x86, 0x55, 0x05, 0x72, 0x64, 0xe2, 0x8b,
                                     0xc0, 0xb6, 0xfb, 0x37, 0x8c, 0x8e, 0xf1, 0x46, 0xbe, 0x00};
static const srtp_auth_test_case_t hmac_test = {20, hmac_key, 8, hmac_data, 20, hmac_tag, NULL};

static const srtp_auth_type_t hmac_sha1 = {
    hmac_alloc, hmac_dealloc, hmac_init, hmac_compute, hmac_update, hmac_start, "HMAC-SHA1 (OpenSSL)", &hmac_test, SRTP_HMAC_SHA1};

int abr_srtp_use_openssl_icm_and_hmac(void) {
    srtp_err_status_t status = srtp_replace_cipher_type(&icm_128, SRTP_AES_ICM_128);
    if (status != srtp_err_status_ok) return (int)status;
    return (int)srtp_replace_auth_type(&hmac_sha1, SRTP_HMAC_SHA1);
}
