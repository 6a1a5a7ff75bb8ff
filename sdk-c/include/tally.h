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

#include <stdbool.h>
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

/* Calls between contracts, queries, events and what a contract can know (docs/CONTRACTS.md). */

/**
 * \brief Run `account`'s action `action` with `len` bytes of `data`, giving it at most `fuel`
 * (0: all this action has left). Returns 0 when it succeeded, else its abort code (a failed
 * callee's writes and events are rolled back; this action goes on). Its return data is then
 * read with tally_return_size and tally_read_return. In the callee, require_auth passes only
 * for this contract: the transaction's signers' authority does not flow into a call.
 */
TALLY_IMPORT("call") int32_t tally_call(uint64_t account, uint64_t action, const void *data, uint32_t len, uint64_t fuel);

/** \brief Run `account`'s read-only query `method` (its `query` export), like tally_call. */
TALLY_IMPORT("query") int32_t tally_query(uint64_t account, uint64_t method, const void *data, uint32_t len, uint64_t fuel);

/** \brief Set this action's (or query's) return data, what its caller reads. */
TALLY_IMPORT("set_return") void tally_set_return(const void *data, uint32_t len);

/** \brief The length of the last call's or query's return data. */
TALLY_IMPORT("return_size") int32_t tally_return_size(void);

/** \brief Copy up to `len` bytes of the last call's return data to `dst`; returns its full length. */
TALLY_IMPORT("read_return") int32_t tally_read_return(void *dst, uint32_t len);

/** \brief The contract that called this action, or 0 for a top-level action. */
TALLY_IMPORT("caller") uint64_t tally_caller(void);

/** \brief Emit event `name` with `len` bytes of borsh `data`, kept in the receipt in order. */
TALLY_IMPORT("emit") void tally_emit(uint64_t name, const void *data, uint32_t len);

/** \brief The block's time, ms since the Unix epoch (the header's, the same on every node). */
TALLY_IMPORT("block_time") uint64_t tally_block_time(void);

/** \brief The block's height. */
TALLY_IMPORT("block_height") uint64_t tally_block_height(void);

/** \brief 1 if `account` authorizes this action (require_auth without aborting), else 0. */
TALLY_IMPORT("has_auth") int32_t has_auth(uint64_t account);

/** \brief 1 if account `account` exists, else 0. */
TALLY_IMPORT("is_account") int32_t is_account(uint64_t account);

/** \brief The first key of this contract's storage between `lo` and `hi` (the last, with
 * TALLY_NEXT_BACKWARD; bounds per `flags`): copies up to `key_cap` bytes of it to `key_dst`
 * and up to `val_cap` bytes of its value to `val_dst`; returns the key's full length << 32 |
 * the value's, or -1 if the range holds no key. Stateless: to walk on, pass the key found as
 * an exclusive bound. The caller owns every buffer. Prefer the TallyRange helpers below. */
TALLY_IMPORT("db_next") int64_t db_next(const void *lo, uint32_t lo_len, const void *hi, uint32_t hi_len, int32_t flags, void *key_dst, uint32_t key_cap, void *val_dst, uint32_t val_cap);

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

/* ---- Strict readers and writers (what `tally abigen --lang c` generates code against) ---- */

/** What an apply call is about: the account whose contract runs (and whose storage it writes),
 * the account the action was sent to, and the action's name. */
typedef struct {
    AccountName receiver;
    AccountName code;
    AccountName action;
} ApplyContext;

/** A borsh `bytes` inside a message: a u32 length, then the bytes (the layout of String). */
typedef String Bytes;

/** \brief Reads one byte. */
static inline void uint8_unpack(DataStream *ds, uint8_t *value) {
    *value = (uint8_t)*DataStream_take(ds, 1);
}

/** \brief Reads a little-endian u32. */
static inline void uint32_unpack(DataStream *ds, uint32_t *value) {
    const unsigned char *p = (const unsigned char *)DataStream_take(ds, 4);
    *value = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/** \brief Reads a little-endian i64. */
static inline void int64_unpack(DataStream *ds, int64_t *value) {
    uint64_t v;
    uint64_unpack(ds, &v);
    *value = (int64_t)v;
}

/** \brief Reads a little-endian u16. */
static inline void uint16_unpack(DataStream *ds, uint16_t *value) {
    const unsigned char *p = (const unsigned char *)DataStream_take(ds, 2);
    *value = (uint16_t)(p[0] | p[1] << 8);
}

/** \brief Reads a little-endian i32. */
static inline void int32_unpack(DataStream *ds, int32_t *value) {
    uint32_t v;
    uint32_unpack(ds, &v);
    *value = (int32_t)v;
}

/** \brief Reads a little-endian u128. */
static inline void uint128_unpack(DataStream *ds, __uint128_t *value) {
    uint64_t lo, hi;
    uint64_unpack(ds, &lo);
    uint64_unpack(ds, &hi);
    *value = (__uint128_t)hi << 64 | lo;
}

/** \brief Reads a bool: one byte, 0 or 1; aborts "malformed action data" on any other (as
 * a Rust contract's bool does). */
static inline void bool_unpack(DataStream *ds, bool *value) {
    uint8_t b;
    uint8_unpack(ds, &b);
    assert(b <= 1, "malformed action data");
    *value = b == 1;
}

/** \brief Points `*b` at a borsh `bytes` inside the stream (no copy). */
static inline void Bytes_unpack(DataStream *ds, Bytes **b) { String_unpack(ds, b); }

/** \brief Whether `len` bytes at `s` are UTF-8 exactly as Rust's `core::str::from_utf8` defines
 * it (no overlong forms, no surrogates, nothing above U+10FFFF). */
static inline int tally_utf8_valid(const char *s, uint32_t len) {
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + len;
    while (p < end) {
        unsigned char c = *p++;
        uint32_t more;
        unsigned char lo = 0x80, hi = 0xBF; /* the range of the first continuation byte */
        if (c < 0x80) continue;
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return 0;
        if ((uint32_t)(end - p) < more || *p < lo || *p > hi) return 0;
        p++;
        for (uint32_t i = 1; i < more; i++, p++)
            if (*p < 0x80 || *p > 0xBF) return 0;
    }
    return 1;
}

/** \brief String_unpack, then aborts "malformed action data" unless the string is UTF-8 (as a
 * Rust contract's String is). */
static inline void String_unpack_utf8(DataStream *ds, String **s) {
    String_unpack(ds, s);
    assert(tally_utf8_valid((*s)->data, (*s)->len), "malformed action data");
}

/** \brief Aborts "message has trailing bytes" unless the whole stream was read. */
static inline void DataStream_end(DataStream *ds) {
    assert(ds->pos == ds->end, "message has trailing bytes");
}

#ifndef TALLY_MESSAGE_MAX
/** Longest action data tally_message accepts, in bytes. A C contract starts with one 64 KiB
 * page holding its data and an 8 KiB stack, so the default keeps the buffer well inside it;
 * define TALLY_MESSAGE_MAX before including tally.h for longer messages (a Rust contract's
 * limit is its heap). */
#define TALLY_MESSAGE_MAX 4096
#endif

/** \brief The running action's whole data, copied into a static buffer; aborts "message longer
 * than TALLY_MESSAGE_MAX" if it does not fit. */
static inline DataStream tally_message(void) {
    static char buffer[TALLY_MESSAGE_MAX];
    uint32_t size = (uint32_t)tally_message_size();
    DataStream ds;
    assert(size <= TALLY_MESSAGE_MAX, "message longer than TALLY_MESSAGE_MAX");
    tally_read_message(buffer, size);
    DataStream_init(&ds, buffer, size);
    return ds;
}

/** A cursor over a buffer being written; writing past its end aborts the action. */
typedef struct {
    char *start;
    char *pos;
    char *end;
} WriteStream;

/** \brief Starts writing `len` bytes at `buffer`. */
static inline void WriteStream_init(WriteStream *ws, char *buffer, uint32_t len) {
    ws->start = buffer;
    ws->pos = buffer;
    ws->end = buffer + len;
}

/** \brief The number of bytes written so far. */
static inline uint32_t WriteStream_size(const WriteStream *ws) {
    return (uint32_t)(ws->pos - ws->start);
}

static inline unsigned char *WriteStream_take(WriteStream *ws, uint32_t n) {
    char *at = ws->pos;
    assert((uint32_t)(ws->end - ws->pos) >= n, "pack buffer too small");
    ws->pos += n;
    return (unsigned char *)at;
}

/** \brief Writes one byte. */
static inline void uint8_pack(WriteStream *ws, uint8_t value) { *WriteStream_take(ws, 1) = value; }

/** \brief Writes a little-endian u32. */
static inline void uint32_pack(WriteStream *ws, uint32_t value) {
    unsigned char *p = WriteStream_take(ws, 4);
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(value >> (8 * i));
}

/** \brief Writes a little-endian u64. */
static inline void uint64_pack(WriteStream *ws, uint64_t value) {
    unsigned char *p = WriteStream_take(ws, 8);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(value >> (8 * i));
}

/** \brief Writes a little-endian i64. */
static inline void int64_pack(WriteStream *ws, int64_t value) { uint64_pack(ws, (uint64_t)value); }

/** \brief Writes an account name (a little-endian u64). */
static inline void AccountName_pack(WriteStream *ws, AccountName name) { uint64_pack(ws, name); }

/** \brief Writes a borsh string: its length, then its bytes. */
static inline void String_pack(WriteStream *ws, const String *s) {
    uint32_pack(ws, s->len);
    __builtin_memcpy(WriteStream_take(ws, s->len), s->data, s->len);
}

/** \brief Writes a borsh `bytes`: its length, then the bytes. */
static inline void Bytes_pack(WriteStream *ws, const Bytes *b) { String_pack(ws, b); }

/** \brief Writes a little-endian u16. */
static inline void uint16_pack(WriteStream *ws, uint16_t value) {
    unsigned char *p = WriteStream_take(ws, 2);
    p[0] = (unsigned char)value;
    p[1] = (unsigned char)(value >> 8);
}

/** \brief Writes a little-endian i32. */
static inline void int32_pack(WriteStream *ws, int32_t value) { uint32_pack(ws, (uint32_t)value); }

/** \brief Writes a little-endian u128. */
static inline void uint128_pack(WriteStream *ws, __uint128_t value) {
    uint64_pack(ws, (uint64_t)value);
    uint64_pack(ws, (uint64_t)(value >> 64));
}

/** \brief Writes a bool as one byte, 0 or 1. */
static inline void bool_pack(WriteStream *ws, bool value) { uint8_pack(ws, value ? 1 : 0); }

/* ---- 128-bit arithmetic ----------------------------------------------------------------- */

/* clang lowers __uint128_t multiplication, division and remainder to calls into compiler-rt,
 * and `tally build` links no runtime library, so tally.h carries the three a contract needs
 * (a price times a reserve over a reserve). They are weak, so a contract's own definitions
 * win, and hidden, so never exported: a contract that does no 128-bit arithmetic links none
 * of them. They use only 64-bit operations, since a 128-bit shift by a variable would itself
 * be a call into compiler-rt. */

/** \brief The 128-bit product of two u64. */
static inline void tally_mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    *lo = mid << 32 | (uint32_t)p00;
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/** \brief compiler-rt's 128-bit multiply: the low 128 bits of a * b. */
__attribute__((weak, visibility("hidden"))) __int128 __multi3(__int128 a, __int128 b) {
    uint64_t hi, lo;
    tally_mul64((uint64_t)a, (uint64_t)b, &hi, &lo);
    hi += (uint64_t)a * (uint64_t)(b >> 64) + (uint64_t)(a >> 64) * (uint64_t)b;
    return (__int128)((__uint128_t)hi << 64 | lo);
}

/** \brief n / d and n % d, unsigned 128-bit; traps on division by zero, as 64-bit division
 * does in WebAssembly. */
static inline __uint128_t tally_udivmod128(__uint128_t n, __uint128_t d, __uint128_t *rem) {
    uint64_t nh = (uint64_t)(n >> 64), nl = (uint64_t)n;
    uint64_t dh = (uint64_t)(d >> 64), dl = (uint64_t)d;
    if (nh == 0 && dh == 0) {
        *rem = nl % dl;
        return nl / dl;
    }
    if (dh == 0 && dl == 0) __builtin_trap();
    if (dh >> 63) { /* d >= 2^127: the quotient is 0 or 1 */
        int ge = nh > dh || (nh == dh && nl >= dl);
        *rem = ge ? n - d : n;
        return ge ? 1 : 0;
    }
    /* Long division, one bit at a time: r stays below 2d < 2^128. */
    uint64_t qh = 0, ql = 0, rh = 0, rl = 0;
    for (int i = 127; i >= 0; i--) {
        uint64_t bit = i >= 64 ? (nh >> (i - 64)) & 1 : (nl >> i) & 1;
        rh = rh << 1 | rl >> 63;
        rl = rl << 1 | bit;
        if (rh > dh || (rh == dh && rl >= dl)) {
            uint64_t borrow = rl < dl;
            rl -= dl;
            rh -= dh + borrow;
            if (i >= 64) qh |= 1ULL << (i - 64);
            else ql |= 1ULL << i;
        }
    }
    *rem = (__uint128_t)rh << 64 | rl;
    return (__uint128_t)qh << 64 | ql;
}

/** \brief compiler-rt's unsigned 128-bit division. */
__attribute__((weak, visibility("hidden"))) __uint128_t __udivti3(__uint128_t n, __uint128_t d) {
    __uint128_t rem;
    return tally_udivmod128(n, d, &rem);
}

/** \brief compiler-rt's unsigned 128-bit remainder. */
__attribute__((weak, visibility("hidden"))) __uint128_t __umodti3(__uint128_t n, __uint128_t d) {
    __uint128_t rem;
    tally_udivmod128(n, d, &rem);
    return rem;
}

/* ---- Return data of calls and queries -------------------------------------------------- */

#ifndef TALLY_RETURN_MAX
/** Longest return data tally_returned accepts, in bytes (as TALLY_MESSAGE_MAX for messages). */
#define TALLY_RETURN_MAX 4096
#endif

/** \brief The return data of the last tally_call or tally_query, copied into a static buffer;
 * aborts "return data longer than TALLY_RETURN_MAX" if it does not fit. Strings and bytes
 * unpacked from it stay valid until the next call or query. */
static inline DataStream tally_returned(void) {
    static char buffer[TALLY_RETURN_MAX];
    uint32_t size = (uint32_t)tally_return_size();
    DataStream ds;
    assert(size <= TALLY_RETURN_MAX, "return data longer than TALLY_RETURN_MAX");
    tally_read_return(buffer, size);
    DataStream_init(&ds, buffer, size);
    return ds;
}

/* ---- Ordered iteration over this contract's storage (db_next) ---------------------------- */

/** db_next flag: walk backward, from `hi` down. */
#define TALLY_NEXT_BACKWARD 1
/** db_next flag: `lo` is exclusive. */
#define TALLY_NEXT_LO_EXCLUSIVE 2
/** db_next flag: `hi` is inclusive. */
#define TALLY_NEXT_HI_INCLUSIVE 4
/** db_next flag: no upper bound (`hi` is ignored). An empty `lo` is no lower bound. */
#define TALLY_NEXT_HI_OPEN 8
/** The longest storage key, in bytes (host-api's MAX_KEY_LEN). */
#define TALLY_MAX_KEY 256

/** A walk over the keys between two bounds, from either end: tally_range_next takes the
 * lowest key left, tally_range_prev the highest, each narrowing the bounds past it, so the
 * walk sees the action's own writes and may delete the key it just got. Keys sort as byte
 * strings: store integers big-endian (tally_put_be64) for them to sort as numbers. */
typedef struct {
    uint8_t lo[TALLY_MAX_KEY];
    uint32_t lo_len;
    uint8_t hi[TALLY_MAX_KEY];
    uint32_t hi_len;
    /** TALLY_NEXT_LO_EXCLUSIVE, TALLY_NEXT_HI_INCLUSIVE, TALLY_NEXT_HI_OPEN. */
    int32_t flags;
    /** The key the last step found, and its length. */
    uint8_t key[TALLY_MAX_KEY];
    uint32_t key_len;
    /** The full length of its value (more than the buffer given when it did not fit). */
    uint32_t value_len;
} TallyRange;

static inline void tally_copy(uint8_t *dst, const void *src, uint32_t len) {
    for (uint32_t i = 0; i < len; i++) dst[i] = ((const uint8_t *)src)[i];
}

/** \brief A walk over the keys from `lo` to `hi`, bounds per `flags` (TALLY_NEXT_*; 0: `lo`
 * included, `hi` excluded). Bounds longer than TALLY_MAX_KEY abort. */
static inline void tally_range_init(TallyRange *r, const void *lo, uint32_t lo_len, const void *hi, uint32_t hi_len, int32_t flags) {
    assert(lo_len <= TALLY_MAX_KEY && hi_len <= TALLY_MAX_KEY, "range bound longer than TALLY_MAX_KEY");
    tally_copy(r->lo, lo, lo_len);
    r->lo_len = lo_len;
    tally_copy(r->hi, hi, hi_len);
    r->hi_len = hi_len;
    r->flags = flags & ~TALLY_NEXT_BACKWARD;
    r->key_len = 0;
    r->value_len = 0;
}

/** \brief A walk over the keys that start with `prefix`. */
static inline void tally_range_prefix(TallyRange *r, const void *prefix, uint32_t len) {
    uint32_t end = len;
    tally_range_init(r, prefix, len, prefix, len, 0);
    /* The upper bound: the prefix with its last byte below 0xff incremented, and what
     * follows it dropped; none if every byte is 0xff. */
    while (end > 0 && r->hi[end - 1] == 0xff) end--;
    if (end == 0) {
        r->flags |= TALLY_NEXT_HI_OPEN;
    } else {
        r->hi[end - 1]++;
    }
    r->hi_len = end;
}

static inline int tally_range_step(TallyRange *r, int32_t backward, void *value, uint32_t value_cap) {
    int64_t found = db_next(r->lo, r->lo_len, r->hi, r->hi_len, r->flags | backward, r->key, TALLY_MAX_KEY, value, value_cap);
    if (found < 0) return 0;
    r->key_len = (uint32_t)(found >> 32);
    r->value_len = (uint32_t)found;
    if (backward) {
        tally_copy(r->hi, r->key, r->key_len);
        r->hi_len = r->key_len;
        r->flags &= ~(TALLY_NEXT_HI_INCLUSIVE | TALLY_NEXT_HI_OPEN);
    } else {
        tally_copy(r->lo, r->key, r->key_len);
        r->lo_len = r->key_len;
        r->flags |= TALLY_NEXT_LO_EXCLUSIVE;
    }
    return 1;
}

/** \brief The lowest key left: 1 with r->key, r->key_len and up to `value_cap` bytes of its
 * value in `value` (r->value_len is its full length), or 0 when none is left. */
static inline int tally_range_next(TallyRange *r, void *value, uint32_t value_cap) {
    return tally_range_step(r, 0, value, value_cap);
}

/** \brief The highest key left, like tally_range_next. */
static inline int tally_range_prev(TallyRange *r, void *value, uint32_t value_cap) {
    return tally_range_step(r, TALLY_NEXT_BACKWARD, value, value_cap);
}

/** \brief Writes `v` big-endian to `dst` (8 bytes): a key part that sorts as the number. */
static inline void tally_put_be64(uint8_t *dst, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) dst[i] = (uint8_t)v;
}

/** \brief Reads 8 bytes big-endian. */
static inline uint64_t tally_get_be64(const uint8_t *src) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | src[i];
    return v;
}

#ifdef __cplusplus
}
#endif

#endif /* TALLY_H */
