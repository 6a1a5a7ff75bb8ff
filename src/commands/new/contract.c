/* {{name}}: counts how often each account calls `hit`; `reset` forgets an account's count.
 *
 * Storage: an account's 8-byte name -> its count (a little-endian u64).
 * The action types come from {{name}}.abi.json; after changing it, run
 *     tally abigen {{name}}.abi.json --lang c -o {{name}}.abi.h
 * Build: tally build {{name}}.c          Test: ./test.sh          More: README.md */
#include "{{name}}.abi.h"

/* hit {who}: adds one to who's count. */
static void on_hit(const ApplyContext *ctx, const Hit *msg) {
    uint64_t count = 0;
    require_auth(msg->who);
    load(&msg->who, sizeof msg->who, &count, sizeof count);
    count += 1;
    store(&msg->who, sizeof msg->who, &count, sizeof count);
}

/* reset {who}: forgets who's count. */
static void on_reset(const ApplyContext *ctx, const Reset *msg) {
    require_auth(msg->who);
    remove(&msg->who, sizeof msg->who);
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    {{name}}_dispatch(receiver, code, action);
}
