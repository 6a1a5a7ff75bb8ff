/* dca: dollar-cost averaging in C, on the exchange of contracts/swap.
 *
 * The contract holds a balance of one token and, once per interval, sells a fixed amount of it
 * for the other through a swap pool, never for less than the plan's `min_out` (a limit price).
 * Anyone may trigger a purchase (`buy`, a keeper's job); the plan, not the keeper, decides what
 * is sold, when, and at what worst price. Only the plan's owner takes tokens out (`payout`).
 *
 * It shows a C contract composing with others through the headers `tally abigen` generates:
 * - dca.abi.h, its own ABI (dca.abi.json): actions, the `status` query, the `bought` event;
 * - swap.abi.h (`--prefix swap_`): asks the pool for its reserves, calls its `swap`;
 * - token-rs.abi.h (`--prefix token_`): pays the pool with a token `transfer`, in which this
 *   contract is the caller and so authorizes moving its own balance.
 * It quotes the pool's price first (a query) to refuse a bad price with a clear message, and
 * passes `min_out` to the swap as well; if the swap fails, the action aborts and the transfer to
 * the pool rolls back with it.
 *
 * Build: tally build contracts/dca.c (tested in chain/tests/all/dca.rs). */
#include "dca.abi.h"
#define SWAP_NO_DISPATCH
#include "swap.abi.h"
#define TOKEN_RS_NO_DISPATCH
#include "token-rs.abi.h"

/* The plan and its totals, borsh, under this key. */
static const char KEY[] = "status";

/* A Status packs into 8 + 8 + 8 + 1 + 8 + 8 + 8 + 3 * 8 = 73 bytes. */
#define STATUS_MAX 73

/* The memo of every transfer this contract makes: a borsh string ("dca"). */
static char MEMO[] = {3, 0, 0, 0, 'd', 'c', 'a'};

/* The pool's fee on what a swap puts in, in basis points: the 0.3% of contracts/swap. */
#define FEE_BPS 30

static bool load_status(Status *s) {
    char buffer[STATUS_MAX];
    int32_t n = load(KEY, sizeof KEY - 1, buffer, sizeof buffer);
    if (n < 0) return false;
    assert(n == STATUS_MAX, "stored status has another size");
    DataStream ds;
    DataStream_init(&ds, buffer, (uint32_t)n);
    Status_unpack(&ds, s);
    DataStream_end(&ds);
    return true;
}

static void store_status(const Status *s) {
    char buffer[STATUS_MAX];
    WriteStream ws;
    WriteStream_init(&ws, buffer, sizeof buffer);
    Status_pack(&ws, s);
    store(KEY, sizeof KEY - 1, buffer, WriteStream_size(&ws));
}

static void on_init(const ApplyContext *ctx, const Init *msg) {
    require_auth(ctx->receiver);
    Status s;
    assert(!load_status(&s), "the plan is already set");
    assert(msg->plan.amount > 0, "a plan sells a positive amount");
    s.plan = msg->plan;
    s.last_buy_ms = 0;
    s.spent = 0;
    s.bought = 0;
    store_status(&s);
}

/* What `amount_in` buys from a pool with these reserves: contracts/swap's formula. */
static uint64_t quote(uint64_t amount_in, uint64_t reserve_in, uint64_t reserve_out) {
    __uint128_t in_with_fee = (__uint128_t)amount_in * (10000 - FEE_BPS);
    __uint128_t denominator = (__uint128_t)reserve_in * 10000 + in_with_fee;
    return (uint64_t)(in_with_fee * reserve_out / denominator);
}

static void on_buy(const ApplyContext *ctx, const Buy *msg) {
    (void)msg;
    Status s;
    assert(load_status(&s), "no plan: init first");
    uint64_t now = tally_block_time();
    assert(s.last_buy_ms == 0 || now >= s.last_buy_ms + s.plan.interval_ms,
           "too early: the plan's interval has not passed");

    /* What the pool would give now, asked before paying it anything. */
    swap_ReservesQuery ask = {0};
    swap_Reserves reserves;
    assert(swap_ReservesQuery_ask(s.plan.pool, &ask, 0, &reserves) == 0,
           "the pool did not answer `reserves`");
    uint64_t reserve_in = s.plan.sell_a ? reserves.a : reserves.b;
    uint64_t reserve_out = s.plan.sell_a ? reserves.b : reserves.a;
    assert(quote(s.plan.amount, reserve_in, reserve_out) >= s.plan.min_out,
           "the pool's price is below the plan's min_out: wait for a better one");

    /* Pay the pool, then swap: the pool counts what arrived. */
    token_Transfer pay = {ctx->receiver, s.plan.pool, s.plan.amount, (String *)MEMO};
    assert(token_Transfer_call(s.plan.token_in, &pay, 0) == 0,
           "paying the pool failed: does dca hold enough of token_in?");
    swap_Swap trade = {ctx->receiver, s.plan.min_out};
    uint64_t out;
    assert(swap_Swap_call(s.plan.pool, &trade, 0, &out) == 0, "the swap failed");

    s.last_buy_ms = now;
    s.spent += s.plan.amount;
    s.bought += out;
    store_status(&s);
    BoughtEvent bought = {s.plan.amount, out, now};
    BoughtEvent_emit(&bought);
    Buy_reply(out);
}

static void on_payout(const ApplyContext *ctx, const Payout *msg) {
    Status s;
    assert(load_status(&s), "no plan: init first");
    require_auth(s.plan.owner);
    token_Transfer send = {ctx->receiver, s.plan.owner, msg->amount, (String *)MEMO};
    assert(token_Transfer_call(msg->token, &send, 0) == 0, "the payout transfer failed");
}

static void answer_status(const ApplyContext *ctx, const StatusQuery *msg) {
    (void)ctx;
    (void)msg;
    Status s;
    assert(load_status(&s), "no plan: init first");
    StatusQuery_reply(&s);
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    dca_dispatch(receiver, code, action);
}

TALLY_EXPORT("query") void query(uint64_t receiver, uint64_t method) {
    dca_query_dispatch(receiver, method);
}
