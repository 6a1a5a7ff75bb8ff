/* ordered: a test contract for ordered iteration (db_next through tally.h's TallyRange).
 * Build: tally build contracts/ordered.c
 *
 * Actions (borsh data; bytes are a u32 length then the bytes):
 *   put  {key: bytes, value: bytes}   store
 *   del  {key: bytes}                 remove
 *   walk {lo: bytes, hi: bytes, flags: u32, mode: u8, limit: u32}
 *        walk the keys from lo to hi (bounds per flags: TALLY_NEXT_LO_EXCLUSIVE,
 *        TALLY_NEXT_HI_INCLUSIVE, TALLY_NEXT_HI_OPEN), at most `limit` of them. mode bits:
 *        1 backward, 2 remove each key once read, 4 the keys that start with `lo` (a prefix;
 *        hi and flags unused), 8 count the keys only (a benchmark's walk: the result is the
 *        count alone). Returns {count: u32, then per key: key: bytes, value: bytes},
 *        each value cut to 64 bytes with its full length, and emits it as event `walked`.
 * Query walk {the same}: the same walk, read-only (erasing aborts), answered as return data.
 * A transaction of put, del and walk actions walks its own uncommitted writes. */
#include "tally.h"

#define ACTION_PUT 0xaeb2000000000000ULL
#define ACTION_DEL 0x4aa2000000000000ULL
#define ACTION_WALK 0xe1a3000000000000ULL
#define EVENT_WALKED 0xe1a3052400000000ULL

#define MODE_BACKWARD 1
#define MODE_ERASE 2
#define MODE_PREFIX 4
#define MODE_COUNT 8

/* Values a walk returns are cut to this many bytes (their full length is returned). */
#define VALUE_CUT 64

static char message[8192];
/* A walk's result: an event holds at most 4 KiB (MAX_EVENT_LEN). */
static char out[4096];
static TallyRange range;

typedef struct {
    const char *data;
    uint32_t len;
} Span;

static Span span_unpack(DataStream *ds) {
    Span b;
    uint32_unpack(ds, &b.len);
    b.data = DataStream_take(ds, b.len);
    return b;
}

static DataStream read_all(void) {
    uint32_t size = (uint32_t)tally_message_size();
    DataStream ds;
    assert(size <= sizeof message, "message longer than 8192 bytes");
    tally_read_message(message, size);
    DataStream_init(&ds, message, size);
    return ds;
}

static uint32_t put_u32(uint32_t at, uint32_t v) {
    assert(at + 4 <= sizeof out, "walk result longer than 4096 bytes");
    for (int i = 0; i < 4; i++) out[at + i] = (char)(v >> (8 * i));
    return at + 4;
}

static uint32_t put_bytes(uint32_t at, const void *data, uint32_t len, uint32_t full) {
    at = put_u32(at, full);
    assert(at + len <= sizeof out, "walk result longer than 4096 bytes");
    __builtin_memcpy(out + at, data, len);
    return at + len;
}

/* Walks as the message asks; returns the result's length in `out`. */
static uint32_t walk(DataStream *ds) {
    Span lo = span_unpack(ds), hi = span_unpack(ds);
    uint32_t flags, limit;
    uint8_t mode;
    uint8_t value[VALUE_CUT];
    uint32_unpack(ds, &flags);
    uint8_unpack(ds, &mode);
    uint32_unpack(ds, &limit);
    if (mode & MODE_PREFIX) {
        tally_range_prefix(&range, lo.data, lo.len);
    } else {
        tally_range_init(&range, lo.data, lo.len, hi.data, hi.len, (int32_t)flags);
    }
    uint32_t count = 0, at = 4;
    while (count < limit) {
        int found = (mode & MODE_BACKWARD) ? tally_range_prev(&range, value, sizeof value)
                                           : tally_range_next(&range, value, sizeof value);
        if (!found) break;
        if (!(mode & MODE_COUNT)) {
            uint32_t kept = range.value_len < VALUE_CUT ? range.value_len : VALUE_CUT;
            at = put_bytes(at, range.key, range.key_len, range.key_len);
            at = put_bytes(at, value, kept, range.value_len);
        }
        if (mode & MODE_ERASE) remove(range.key, range.key_len);
        count++;
    }
    put_u32(0, count);
    tally_set_return(out, at);
    return at;
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    if (code != receiver) return;
    DataStream ds = read_all();
    if (action == ACTION_PUT) {
        Span key = span_unpack(&ds), value = span_unpack(&ds);
        store(key.data, key.len, value.data, value.len);
    } else if (action == ACTION_DEL) {
        Span key = span_unpack(&ds);
        remove(key.data, key.len);
    } else if (action == ACTION_WALK) {
        tally_emit(EVENT_WALKED, out, walk(&ds));
    } else {
        assert(0, "unknown action: ordered has put, del and walk");
    }
    assert(ds.pos == ds.end, "trailing bytes after the action's data");
}

TALLY_EXPORT("query") void query(uint64_t receiver, uint64_t method) {
    (void)receiver;
    assert(method == ACTION_WALK, "unknown query: ordered answers walk");
    DataStream ds = read_all();
    walk(&ds);
    assert(ds.pos == ds.end, "trailing bytes after the query's data");
}
