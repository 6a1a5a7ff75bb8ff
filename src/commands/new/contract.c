/* {{name}}: counts how often each account calls `hit`; `reset` forgets an account's count;
 * the query `count` tells anyone an account's count (tally query {{name}} count ACCOUNT).
 *
 * Storage: an account's 8-byte name -> its count (a little-endian u64).
 * The types and readers come from {{name}}.abi.json; after changing it, run
 *     tally abigen {{name}}.abi.json --lang c -o {{name}}.abi.h
 * Build: tally build {{name}}.c          Test: ./test.sh          More: README.md */
#include "{{name}}.abi.h"

/* who's count: a u64 under the account's 8-byte name, 0 if none. */
static uint64_t count_of(AccountName who) {
    uint64_t count = 0;
    load(&who, sizeof who, &count, sizeof count);
    return count;
}

/* hit {who}: adds one to who's count, and returns the new count. */
static void on_hit(const ApplyContext *ctx, const Hit *msg) {
    require_auth(msg->who);
    uint64_t count = count_of(msg->who) + 1;
    store(&msg->who, sizeof msg->who, &count, sizeof count);
    Hit_reply(count);
}

/* reset {who}: forgets who's count. */
static void on_reset(const ApplyContext *ctx, const Reset *msg) {
    require_auth(msg->who);
    remove(&msg->who, sizeof msg->who);
}

/* count {who}: who's count (read-only: a query can write nothing). */
static void answer_count(const ApplyContext *ctx, const CountQuery *msg) {
    CountQuery_reply(count_of(msg->who));
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    {{name}}_dispatch(receiver, code, action);
}

TALLY_EXPORT("query") void query(uint64_t receiver, uint64_t method) {
    {{name}}_query_dispatch(receiver, method);
}
