// SRTP's ciphers for libsrtp2 through OpenSSL's EVP. Debian builds libsrtp2 on NSS, whose PKCS #11
// layer sets up a context for every packet and costs more than the ciphers themselves: for one
// 1,200-byte packet on the benchmark machine, AEAD_AES_128_GCM took 2.9 µs against OpenSSL's
// 1.2 µs, and AES_CM_128_HMAC_SHA1_80 8.5 µs against 2.9 µs. libsrtp2 lets a program put another
// implementation of a cipher or authentication type in its crypto kernel
// (`srtp_replace_cipher_type`, `srtp_replace_auth_type`), which it self-tests before it uses it;
// these are those implementations. libsrtp2 still does all of SRTP (key derivation, IVs, replay
// windows); only the primitives come from OpenSSL.
#ifndef ABR_SRTP_OPENSSL_H
#define ABR_SRTP_OPENSSL_H

/// Puts OpenSSL's AES-128-GCM and AES-256-GCM in libsrtp2's crypto kernel, in place of its own.
/// Call after `srtp_init` and before any session is created. Returns libsrtp's status: 0 when both
/// passed libsrtp's self-test and are in use; otherwise libsrtp keeps its own implementation.
int abr_srtp_use_openssl_gcm(void);

/// The same for AES-128 in counter mode (which also derives every session's keys, whatever its
/// profile) and HMAC-SHA1: AES_CM_128_HMAC_SHA1_80's ciphers.
int abr_srtp_use_openssl_icm_and_hmac(void);

#endif
