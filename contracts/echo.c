/* echo: reads each action of echo.abi.json with the readers `tally abigen --lang c` generated
 * (echo.abi.h) and stores what it read, so tests/authoring.rs can compare it, byte for byte,
 * with echo-rs (the same contract in Rust) and with the Rust encoder.
 *
 * Storage after an action: "echo" -> the message packed again with the generated _pack;
 * "receiver", "code", "action" -> the ApplyContext; one key per field -> its value
 * (integers little-endian, strings and bytes raw). For `rich`, what reading its lists and
 * options found: "points" -> the sum of the points' x (i64) and how many have a label (u32),
 * "maybe" -> the value if there is one, "nested" -> the total bytes of the inner lists. */
#include "echo.abi.h"

static char out[TALLY_MESSAGE_MAX];

static void put(const char *key, const void *value, uint32_t len) {
    store(key, tally_strlen(key), value, len);
}

static void put_context(const ApplyContext *ctx) {
    put("receiver", &ctx->receiver, 8);
    put("code", &ctx->code, 8);
    put("action", &ctx->action, 8);
}

static void put_echo(const WriteStream *ws, uint32_t expected_size) {
    assert(WriteStream_size(ws) == expected_size, "_packed_size differs from what _pack wrote");
    put("echo", out, WriteStream_size(ws));
}

static void on_all(const ApplyContext *ctx, const All *msg) {
    WriteStream ws;
    put_context(ctx);
    WriteStream_init(&ws, out, sizeof out);
    All_pack(&ws, msg);
    put_echo(&ws, All_packed_size(msg));
    put("account", &msg->account, 8);
    put("small", &msg->small, 1);
    put("medium", &msg->medium, 4);
    put("large", &msg->large, 8);
    put("delta", &msg->delta, 8);
    put("text", msg->text->data, msg->text->len);
    put("blob", msg->blob->data, msg->blob->len);
}

static void on_empty(const ApplyContext *ctx, const Empty *msg) {
    WriteStream ws;
    put_context(ctx);
    WriteStream_init(&ws, out, sizeof out);
    Empty_pack(&ws, msg);
    put_echo(&ws, Empty_packed_size(msg));
}

static void on_pair_of(const ApplyContext *ctx, const PairOf *msg) {
    WriteStream ws;
    put_context(ctx);
    WriteStream_init(&ws, out, sizeof out);
    PairOf_pack(&ws, msg);
    put_echo(&ws, PairOf_packed_size(msg));
    put("first", msg->first->data, msg->first->len);
    put("second", msg->second->data, msg->second->len);
}

static void on_rich(const ApplyContext *ctx, const Rich *msg) {
    WriteStream ws;
    put_context(ctx);
    WriteStream_init(&ws, out, sizeof out);
    Rich_pack(&ws, msg);
    put_echo(&ws, Rich_packed_size(msg));
    uint8_t flag = msg->flag ? 1 : 0;
    put("flag", &flag, 1);
    put("port", &msg->port, 2);
    put("big", &msg->big, 16);
    put("offset", &msg->offset, 4);
    /* A list is its items' bytes: read them back with the item's reader. */
    int64_t sum = 0;
    uint32_t labels = 0;
    DataStream items = msg->points.items;
    for (uint32_t i = 0; i < msg->points.len; i++) {
        Point p;
        Point_unpack(&items, &p);
        sum += p.x;
        labels += p.label.some;
    }
    char points[12];
    __builtin_memcpy(points, &sum, 8);
    __builtin_memcpy(points + 8, &labels, 4);
    put("points", points, 12);
    if (msg->maybe.some) put("maybe", &msg->maybe.value, 8);
    uint32_t total = 0;
    DataStream inner = msg->nested.items;
    for (uint32_t i = 0; i < msg->nested.len; i++) {
        List_u8 bytes;
        List_u8_unpack(&inner, &bytes);
        total += bytes.len;
    }
    put("nested", &total, 4);
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    echo_dispatch(receiver, code, action);
}
