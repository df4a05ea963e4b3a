// AES-GCM for libsrtp2 through OpenSSL's EVP (see srtp_openssl.h for why).
//
// libsrtp2 drives a cipher type per packet as: set_iv (with the direction), set_aad (the RTP
// header, or the SRTCP header and index), then encrypt and get_tag, or decrypt with the tag at the
// end of the buffer. The key schedule is made once, in init; each packet only sets its IV.
#include "srtp_openssl.h"
#include "srtp_openssl_cipher.h"

#include <openssl/evp.h>
#include <srtp2/cipher.h>
#include <srtp2/srtp.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    EVP_CIPHER_CTX *context;  // first: see srtp_openssl_cipher.h
    const EVP_CIPHER *cipher;
    int tag_length;
} gcm_state;

static const srtp_cipher_type_t gcm_128, gcm_256;

static srtp_err_status_t gcm_alloc(srtp_cipher_pointer_t *pointer, int key_length, int tag_length) {
    const srtp_cipher_type_t *type;
    const EVP_CIPHER *cipher;
    int algorithm;
    // The key lengths include the 12-byte salt, which libsrtp uses for the IVs, not the cipher.
    if (key_length == SRTP_AES_GCM_128_KEY_LEN_WSALT) {
        type = &gcm_128, cipher = EVP_aes_128_gcm(), algorithm = SRTP_AES_GCM_128;
    } else if (key_length == SRTP_AES_GCM_256_KEY_LEN_WSALT) {
        type = &gcm_256, cipher = EVP_aes_256_gcm(), algorithm = SRTP_AES_GCM_256;
    } else {
        return srtp_err_status_bad_param;
    }
    // RFC 7714 tags are 16 bytes; libsrtp also offers 8.
    if (tag_length != 16 && tag_length != 8) return srtp_err_status_bad_param;
    srtp_err_status_t status = abr_srtp_cipher_allocate(pointer, type, algorithm, key_length, sizeof(gcm_state));
    if (status != srtp_err_status_ok) return status;
    gcm_state *state = (*pointer)->state;
    state->cipher = cipher;
    state->tag_length = tag_length;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_dealloc(srtp_cipher_pointer_t instance) { return abr_srtp_cipher_free(instance, sizeof(gcm_state)); }

static srtp_err_status_t gcm_init(void *opaque, const uint8_t *key) {
    gcm_state *state = opaque;
    // Encrypting for now; each packet's set_iv names its direction. GCM's IV is 12 bytes by default.
    if (EVP_CipherInit_ex(state->context, state->cipher, NULL, key, NULL, 1) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_set_iv(void *opaque, uint8_t *iv, srtp_cipher_direction_t direction) {
    gcm_state *state = opaque;
    if (direction != srtp_direction_encrypt && direction != srtp_direction_decrypt) return srtp_err_status_bad_param;
    // The key schedule stays; only the IV and the direction change (GCM's key schedule is the same both ways).
    if (EVP_CipherInit_ex(state->context, NULL, NULL, NULL, iv, direction == srtp_direction_encrypt) != 1)
        return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_set_aad(void *opaque, const uint8_t *aad, uint32_t length) {
    gcm_state *state = opaque;
    int written = 0;
    if (EVP_CipherUpdate(state->context, NULL, &written, aad, (int)length) != 1) return srtp_err_status_algo_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_encrypt(void *opaque, uint8_t *buffer, unsigned int *length) {
    gcm_state *state = opaque;
    int written = 0;
    if (*length > 0 && EVP_CipherUpdate(state->context, buffer, &written, buffer, (int)*length) != 1)
        return srtp_err_status_cipher_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_get_tag(void *opaque, uint8_t *tag, uint32_t *length) {
    gcm_state *state = opaque;
    uint8_t unused[16];
    int written = 0;
    if (EVP_CipherFinal_ex(state->context, unused, &written) != 1) return srtp_err_status_algo_fail;
    if (EVP_CIPHER_CTX_ctrl(state->context, EVP_CTRL_AEAD_GET_TAG, state->tag_length, tag) != 1)
        return srtp_err_status_algo_fail;
    *length = (uint32_t)state->tag_length;
    return srtp_err_status_ok;
}

/// `*length` counts the tag at the end of `buffer`; on success it counts the plaintext only.
static srtp_err_status_t gcm_decrypt(void *opaque, uint8_t *buffer, unsigned int *length) {
    gcm_state *state = opaque;
    if (*length < (unsigned int)state->tag_length) return srtp_err_status_bad_param;
    unsigned int text_length = *length - (unsigned int)state->tag_length;
    int written = 0;
    if (EVP_CIPHER_CTX_ctrl(state->context, EVP_CTRL_AEAD_SET_TAG, state->tag_length, buffer + text_length) != 1)
        return srtp_err_status_algo_fail;
    if (text_length > 0 && EVP_CipherUpdate(state->context, buffer, &written, buffer, (int)text_length) != 1)
        return srtp_err_status_auth_fail;
    uint8_t unused[16];
    if (EVP_CipherFinal_ex(state->context, unused, &written) != 1) return srtp_err_status_auth_fail;
    *length = text_length;
    return srtp_err_status_ok;
}

// libsrtp self-tests a cipher type before it takes it in. The vectors are Test Case 4 of the GCM
// specification (McGrew and Viega, 2005: the AES-128 key feffe992…, 60 bytes of plaintext, 20 of
// AAD) and Test Case 16 (its AES-256 form), each key followed by the 12 bytes of salt SRTP keys carry.
static const uint8_t gcm_plaintext[60] = {
    0xd9, 0x31, 0x32, 0x25, 0xf8, 0x84, 0x06, 0xe5, 0xa5, 0x59, 0x09, 0xc5, 0xaf, 0xf5, 0x26, 0x9a,
    0x86, 0xa7, 0xa9, 0x53, 0x15, 0x34, 0xf7, 0xda, 0x2e, 0x4c, 0x30, 0x3d, 0x8a, 0x31, 0x8a, 0x72,
    0x1c, 0x3c, 0x0c, 0x95, 0x95, 0x68, 0x09, 0x53, 0x2f, 0xcf, 0x0e, 0x24, 0x49, 0xa6, 0xb5, 0x25,
    0xb1, 0x6a, 0xed, 0xf5, 0xaa, 0x0d, 0xe6, 0x57, 0xba, 0x63, 0x7b, 0x39};
static const uint8_t gcm_aad[20] = {0xfe, 0xed, 0xfa, 0xce, 0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed,
                                    0xfa, 0xce, 0xde, 0xad, 0xbe, 0xef, 0xab, 0xad, 0xda, 0xd2};
static uint8_t gcm_iv[12] = {0xca, 0xfe, 0xba, 0xbe, 0xfa, 0xce, 0xdb, 0xad, 0xde, 0xca, 0xf8, 0x88};
static const uint8_t gcm_128_key[28] = {0xfe, 0xff, 0xe9, 0x92, 0x86, 0x65, 0x73, 0x1c, 0x6d, 0x6a,
                                        0x8f, 0x94, 0x67, 0x30, 0x83, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const uint8_t gcm_128_ciphertext[76] = {
    0x42, 0x83, 0x1e, 0xc2, 0x21, 0x77, 0x74, 0x24, 0x4b, 0x72, 0x21, 0xb7, 0x84, 0xd0, 0xd4, 0x9c,
    0xe3, 0xaa, 0x21, 0x2f, 0x2c, 0x02, 0xa4, 0xe0, 0x35, 0xc1, 0x7e, 0x23, 0x29, 0xac, 0xa1, 0x2e,
    0x21, 0xd5, 0x14, 0xb2, 0x54, 0x66, 0x93, 0x1c, 0x7d, 0x8f, 0x6a, 0x5a, 0xac, 0x84, 0xaa, 0x05,
    0x1b, 0xa3, 0x0b, 0x39, 0x6a, 0x0a, 0xac, 0x97, 0x3d, 0x58, 0xe0, 0x91,
    // the tag
    0x5b, 0xc9, 0x4f, 0xbc, 0x32, 0x21, 0xa5, 0xdb, 0x94, 0xfa, 0xe9, 0x5a, 0xe7, 0x12, 0x1a, 0x47};
static const uint8_t gcm_256_key[44] = {
    0xfe, 0xff, 0xe9, 0x92, 0x86, 0x65, 0x73, 0x1c, 0x6d, 0x6a, 0x8f, 0x94, 0x67, 0x30, 0x83, 0x08,
    0xfe, 0xff, 0xe9, 0x92, 0x86, 0x65, 0x73, 0x1c, 0x6d, 0x6a, 0x8f, 0x94, 0x67, 0x30, 0x83, 0x08,
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const uint8_t gcm_256_ciphertext[76] = {
    0x52, 0x2d, 0xc1, 0xf0, 0x99, 0x56, 0x7d, 0x07, 0xf4, 0x7f, 0x37, 0xa3, 0x2a, 0x84, 0x42, 0x7d,
    0x64, 0x3a, 0x8c, 0xdc, 0xbf, 0xe5, 0xc0, 0xc9, 0x75, 0x98, 0xa2, 0xbd, 0x25, 0x55, 0xd1, 0xaa,
    0x8c, 0xb0, 0x8e, 0x48, 0x59, 0x0d, 0xbb, 0x3d, 0xa7, 0xb0, 0x8b, 0x10, 0x56, 0x82, 0x88, 0x38,
    0xc5, 0xf6, 0x1e, 0x63, 0x93, 0xba, 0x7a, 0x0a, 0xbc, 0xc9, 0xf6, 0x62,
    // the tag
    0x76, 0xfc, 0x6e, 0xce, 0x0f, 0x4e, 0x17, 0x68, 0xcd, 0xdf, 0x88, 0x53, 0xbb, 0x2d, 0x55, 0x1b};

static const srtp_cipher_test_case_t gcm_128_test = {
    28, gcm_128_key, gcm_iv, 60, gcm_plaintext, 76, gcm_128_ciphertext, 20, gcm_aad, 16, NULL};
static const srtp_cipher_test_case_t gcm_256_test = {
    44, gcm_256_key, gcm_iv, 60, gcm_plaintext, 76, gcm_256_ciphertext, 20, gcm_aad, 16, NULL};

#define GCM_TYPE(description, test, id) \
    {gcm_alloc, gcm_dealloc, gcm_init, gcm_set_aad, gcm_encrypt, gcm_decrypt, gcm_set_iv, gcm_get_tag, description, test, id}
static const srtp_cipher_type_t gcm_128 = GCM_TYPE("AES-128-GCM (OpenSSL)", &gcm_128_test, SRTP_AES_GCM_128);
static const srtp_cipher_type_t gcm_256 = GCM_TYPE("AES-256-GCM (OpenSSL)", &gcm_256_test, SRTP_AES_GCM_256);

int abr_srtp_use_openssl_gcm(void) {
    srtp_err_status_t status = srtp_replace_cipher_type(&gcm_128, SRTP_AES_GCM_128);
    if (status != srtp_err_status_ok) return (int)status;
    return (int)srtp_replace_cipher_type(&gcm_256, SRTP_AES_GCM_256);
}
