// AES-GCM for libsrtp2 through OpenSSL's EVP. Debian builds libsrtp2 on NSS, whose PKCS #11 layer
// sets up a context for every packet and costs more than the cipher itself (2.9 µs a packet against
// OpenSSL's 1.2 µs for a 1,200-byte packet on the benchmark machine). libsrtp2 lets a program put
// another implementation of a cipher type in its crypto kernel (`srtp_replace_cipher_type`), which
// it self-tests before it uses it; this is that implementation. libsrtp2 still does all of SRTP
// (key derivation, IVs, replay windows); only the AEAD primitive comes from OpenSSL.
#ifndef ABR_SRTP_GCM_OPENSSL_H
#define ABR_SRTP_GCM_OPENSSL_H

/// Puts OpenSSL's AES-128-GCM and AES-256-GCM in libsrtp2's crypto kernel, in place of its own.
/// Call after `srtp_init` and before any session is created. Returns libsrtp's status: 0 when both
/// passed libsrtp's self-test and are in use; otherwise libsrtp keeps its own implementation.
int abr_srtp_use_openssl_gcm(void);

#endif
