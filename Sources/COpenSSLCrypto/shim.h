// OpenSSL's libcrypto (Debian's libssl-dev), the same library the DTLS shim links: digests, HMAC,
// PBKDF2 and constant-time comparison for the node's tokens, handshakes and PostgreSQL's SCRAM.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
