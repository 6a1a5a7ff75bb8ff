/**
 * \file tally.h
 * \brief The Tally contract API for C: ABI v1 imports plus the EOS 2017 names.
 *
 * Include this one header; there is no library to link and no libc. Build with
 * `tally build contract.c`, which passes the right flags (see README.md).
 *
 * Pointers are offsets into the contract's own linear memory; the caller owns every buffer
 * it passes, and the host only reads or writes inside the lengths given. A bad pointer or
 * length aborts the action (never the node).
 *
 * Messages are borsh-encoded: integers little-endian, a string is a u32 length then bytes.
 */
#ifndef TALLY_H
#define TALLY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks a declaration as an import of ABI v1 (module "env"). */
#define TALLY_IMPORT(name) __attribute__((import_module("env"), import_name(name)))

/** Exports a function under `name` (for `apply` and 2017 handlers). */
#define TALLY_EXPORT(name) __attribute__((export_name(name), visibility("default")))

/* ---- ABI v1 imports, in the order of host-api's abi::IMPORTS --------------------------- */

/** \brief Copy up to `len` bytes of the action's data to `dst`; returns its full length. */
TALLY_IMPORT("read_message") int32_t tally_read_message(void *dst, uint32_t len);

/** \brief The full length of the action's data. */
TALLY_IMPORT("message_size") int32_t tally_message_size(void);

/** \brief Copy up to `dlen` bytes of `key`'s value to `dst`; returns its full length or -1. */
TALLY_IMPORT("load") int32_t load(const void *key, uint32_t klen, void *dst, uint32_t dlen);

/** \brief Set `key` to `value` in this contract's own namespace. */
TALLY_IMPORT("store") void store(const void *key, uint32_t klen, const void *value, uint32_t vlen);

/** \brief Delete `key` from this contract's own namespace (a no-op if absent). */
TALLY_IMPORT("remove") void remove(const void *key, uint32_t klen);

/** \brief Abort the action with `msg` (`mlen` bytes) when `cond` is 0. */
TALLY_IMPORT("assert") void tally_assert(int32_t cond, const char *msg, uint32_t mlen);

/** \brief Abort the action unless the transaction is authorized by `account`. */
TALLY_IMPORT("require_auth") void require_auth(uint64_t account);

/** \brief Append `mlen` bytes of `msg` to the action's console (bounded; for debugging). */
TALLY_IMPORT("print") void tally_print(const char *msg, uint32_t mlen);

/* ---- The EOS 2017 API ------------------------------------------------------------------- */

/** An EOS-style 64-bit account name (up to 12 characters of a-z, 1-5 and '.'). */
typedef uint64_t AccountName;

/** A borsh string inside a message: its length, then its bytes (not NUL-terminated). */
typedef struct __attribute__((packed)) {
    uint32_t len;
    char data[];
} String;

/** A cursor over a message buffer; unpacking past its end aborts the action. */
typedef struct {
    const char *pos;
    const char *end;
} DataStream;

static inline uint32_t tally_strlen(const char *s) {
    uint32_t n = 0;
    while (s[n]) n++;
    return n;
}

/** \brief Abort the action with the NUL-terminated `msg` when `cond` is 0. */
static inline void assert(int cond, const char *msg) {
    if (!cond) tally_assert(0, msg, tally_strlen(msg));
}

/** \brief Copy up to `len` bytes of the action's data to `dst`; returns the bytes copied. */
static inline uint32_t readMessage(void *dst, uint32_t len) {
    uint32_t full = (uint32_t)tally_read_message(dst, len);
    return full < len ? full : len;
}

/** \brief Print a NUL-terminated string to the action's console. */
static inline void prints(const char *s) { tally_print(s, tally_strlen(s)); }

/** \brief Print an unsigned integer in decimal to the action's console. */
static inline void printi(uint64_t v) {
    char buf[20];
    int i = 20;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    tally_print(buf + i, (uint32_t)(20 - i));
}

/** \brief Sets `*name` from the first `len` characters of `s` (EOS's string_to_name). */
static inline void AccountName_initCString(AccountName *name, const char *s, uint32_t len) {
    uint64_t value = 0;
    assert(len <= 12, "account name longer than 12 characters");
    for (uint32_t i = 0; i < len; i++) {
        char c = s[i];
        uint64_t sym;
        if (c >= 'a' && c <= 'z') sym = (uint64_t)(c - 'a') + 6;
        else if (c >= '1' && c <= '5') sym = (uint64_t)(c - '1') + 1;
        else if (c == '.') sym = 0;
        else { assert(0, "invalid character in account name"); return; }
        value |= sym << (64 - 5 * (i + 1));
    }
    *name = value;
}

/** \brief Starts reading `len` bytes at `buffer`. */
static inline void DataStream_init(DataStream *ds, const char *buffer, uint32_t len) {
    ds->pos = buffer;
    ds->end = buffer + len;
}

static inline const char *DataStream_take(DataStream *ds, uint32_t n) {
    const char *at = ds->pos;
    assert((uint32_t)(ds->end - ds->pos) >= n, "message too short");
    ds->pos += n;
    return at;
}

/** \brief Reads a little-endian u64. */
static inline void uint64_unpack(DataStream *ds, uint64_t *value) {
    const unsigned char *p = (const unsigned char *)DataStream_take(ds, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    *value = v;
}

/** \brief Reads an account name (a little-endian u64). */
static inline void AccountName_unpack(DataStream *ds, AccountName *name) {
    uint64_unpack(ds, name);
}

/** \brief Points `*s` at a borsh string inside the stream (no copy). */
static inline void String_unpack(DataStream *ds, String **s) {
    const unsigned char *p = (const unsigned char *)DataStream_take(ds, 4);
    uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    DataStream_take(ds, len);
    *s = (String *)p;
}

#ifdef __cplusplus
}
#endif

#endif /* TALLY_H */
