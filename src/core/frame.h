/* Every byte layout weft puts on a wire, and the one validating decoder for
 * each: data frames and the connection hello (transport), the
 * authentication messages, store requests and replies, and the failure
 * notice ranks leave in the store. Whatever arrives from a socket goes
 * through a decoder here before anything else looks at it, so a peer that
 * sends garbage gets an error, never an out-of-bounds read. Layouts are
 * little-endian and packed by construction (checked below). */
#ifndef WEFT_CORE_FRAME_H
#define WEFT_CORE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC 0x54464557u /* "WEFT" */
#define HELLO_MAGIC 0x48544657u /* "WFTH" */
#define AUTH_MAGIC 0x41544657u  /* "WFTA" */
#define STORE_MAGIC 0x53544657u /* "WFTS" */
#define WIRE_VERSION 1

/* Every message on a data connection starts with this header. The
 * fingerprint (seq .. root) names the operation the sender is in, so that a
 * receiver in a different operation reports the mismatch instead of
 * misreading bytes. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;  /* FRAME_*: others must be 0 */
    uint8_t kind;    /* weft_coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t algo;
    int32_t root;    /* -1: none */
    uint64_t seq;
    uint64_t count;
    uint64_t len;    /* payload bytes that follow */
} frame_hdr;

/* The barrier that starts a timed trial of the call the rest of the
 * header describes (coll/tune/trial.h): a rank in the call itself, or in
 * another call's trial, is then in a different operation. */
#define FRAME_TRIAL 1u
/* No message: the sender waits for one from the receiver in the call the
 * header names (coll/exec/exec_hint.c); the receiver compares and skips it. */
#define FRAME_HINT 2u
#define FRAME_FLAGS (FRAME_TRIAL | FRAME_HINT)

/* First bytes on a data connection, from the connecting rank. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t auth;   /* 1: an auth_hello follows */
    uint64_t comm_id;
    int32_t src;
    int32_t dst;
} hello_msg;

/* Challenge-response (core/auth.c). The connecting side sends auth_hello,
 * the accepting side answers with its nonce and its proof, the connecting
 * side checks that and sends its own proof (AUTH_MAC_LEN bytes). */
#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
enum { AUTH_ROLE_DATA = 1, AUTH_ROLE_STORE = 2 };

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t role;
    uint8_t nonce[AUTH_NONCE_LEN];
} auth_hello;

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t role;
    uint8_t nonce[AUTH_NONCE_LEN];
    uint8_t mac[AUTH_MAC_LEN];
} auth_challenge;

/* Store protocol: a request is the header, keylen key bytes (no NUL), then
 * vallen value bytes; a reply is the header, then vallen value bytes. */
#define STORE_MAX_KEY 4096
#define STORE_MAX_VALUE (64u << 20)
/* HOLD: when this connection closes, the server sets key to the value
 * (a rank's death made visible to the others); SETNX: set key unless it
 * exists, answer with the value that stands (the first writer wins). */
enum { STORE_SET = 1, STORE_GET, STORE_ADD, STORE_CHECK, STORE_DEL, STORE_HOLD, STORE_SETNX };

typedef struct {
    uint32_t magic;
    uint8_t cmd;
    uint8_t pad[3];
    uint32_t keylen;
    uint32_t pad2;
    uint64_t vallen;
    int64_t arg;      /* GET: timeout in ms; ADD: delta */
} store_req;

typedef struct {
    uint32_t magic;
    int32_t status;   /* 0 or WEFT_E* */
    uint64_t vallen;
    int64_t value;    /* ADD: new value; CHECK: 1 if present; SETNX: 1 if this set it */
} store_resp;

_Static_assert(sizeof(frame_hdr) == 40, "frame_hdr layout");
_Static_assert(sizeof(hello_msg) == 24, "hello_msg layout");
_Static_assert(sizeof(auth_hello) == 40, "auth_hello layout");
_Static_assert(sizeof(auth_challenge) == 72, "auth_challenge layout");
_Static_assert(sizeof(store_req) == 32, "store_req layout");
_Static_assert(sizeof(store_resp) == 24, "store_resp layout");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weft's wire formats assume a little-endian host"
#endif

/* Each decoder reads n bytes at buf (which need not be aligned), fills *out
 * and returns 0, or returns WEFT_EPROTO and points *why at a static reason. */
int frame_decode(const void *buf, size_t n, frame_hdr *out, const char **why);
/* size: members of the communicator (src and dst must be distinct ranks). */
int frame_hello_decode(const void *buf, size_t n, int size, hello_msg *out, const char **why);
int auth_hello_decode(const void *buf, size_t n, auth_hello *out, const char **why);
int auth_challenge_decode(const void *buf, size_t n, auth_challenge *out, const char **why);
int store_req_decode(const void *buf, size_t n, store_req *out, const char **why);
/* A whole request: header, key (returned NUL-terminated in key[], which
 * holds STORE_MAX_KEY + 1) and a pointer to the value inside buf. */
int store_msg_decode(const void *buf, size_t n, store_req *out, char *key,
                     const void **val, const char **why);
int store_resp_decode(const void *buf, size_t n, store_resp *out, const char **why);

/* The notice a failing rank leaves in the store for the others:
 * "CODE CULPRIT WITNESS TEXT", CODE a WEFT_E* value, CULPRIT the rank at
 * fault (-1: unknown), WITNESS the rank that wrote it. */
#define FAIL_NOTE_MAX 600
typedef struct {
    int code, culprit, witness;
    char text[FAIL_NOTE_MAX];
} fail_note;
int fail_note_encode(const fail_note *f, char *buf, size_t len); /* bytes, with NUL */
int fail_note_decode(const void *buf, size_t n, int size, fail_note *out, const char **why);

#endif
