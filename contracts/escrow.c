/* escrow: a buyer's tokens held until the buyer releases them to the seller, or handed back
 * once the deal's deadline has passed.
 *
 * - open {id, buyer, seller, token, amount, timeout_ms} -> deadline_ms: the buyer (who signs)
 *   funds a deal. The tokens come in a token `transfer` to this contract in the same
 *   transaction, before `open` (a contract cannot move a user's tokens: the user's authority
 *   does not flow into a call), and `open` checks they arrived: its balance, asked of the
 *   token, must cover every open deal in that token. The deadline is the block's time plus
 *   `timeout_ms`.
 * - release {id}: the buyer pays the seller.
 * - refund {id}: after the deadline, anyone may send the tokens back to the buyer.
 * - query deal {id} -> Deal; events `opened` and `settled`.
 *
 * The payments are calls of token-rs's `transfer` in which this contract is the caller, and so
 * authorizes moving its own balance; if one fails, the action aborts and nothing changes.
 * Tokens sent to escrow without an `open` in the same transaction belong to no deal yet, and
 * the next `open` could claim them: send both in one transaction, which applies all or nothing.
 * Deals are stored under "deal" + the id in 8 big-endian bytes, so they list in id order
 * (`tally keys escrow deals`, as its ABI's tables declare).
 *
 * Build: tally build contracts/escrow.c (tested in chain/tests/all/escrow.rs, and on a
 * devnet by the README's walk-through). */
#include "escrow.abi.h"
#define TOKEN_RS_NO_DISPATCH
#include "token-rs.abi.h"

/* A Deal packs into 8 + 8 + 8 + 8 + 8 bytes. */
#define DEAL_SIZE 40

/* The memo of every payment: a borsh string ("escrow"). */
static char MEMO[] = {6, 0, 0, 0, 'e', 's', 'c', 'r', 'o', 'w'};

/* "deal" + id, big-endian: keys in id order. */
typedef struct {
    char tag[4];
    uint8_t id[8];
} DealKey;

static DealKey deal_key(uint64_t id) {
    DealKey key = {{'d', 'e', 'a', 'l'}, {0}};
    for (int i = 0; i < 8; i++) key.id[i] = (uint8_t)(id >> (56 - 8 * i));
    return key;
}

/* "locked" + token: the total of the open deals in that token. */
typedef struct {
    char tag[6];
    AccountName token;
} __attribute__((packed)) LockedKey;

static bool load_deal(uint64_t id, Deal *deal) {
    DealKey key = deal_key(id);
    char buffer[DEAL_SIZE];
    int32_t n = load(&key, sizeof key, buffer, sizeof buffer);
    if (n < 0) return false;
    assert(n == DEAL_SIZE, "a stored deal has another size");
    DataStream ds;
    DataStream_init(&ds, buffer, (uint32_t)n);
    Deal_unpack(&ds, deal);
    DataStream_end(&ds);
    return true;
}

static void store_deal(uint64_t id, const Deal *deal) {
    DealKey key = deal_key(id);
    char buffer[DEAL_SIZE];
    WriteStream ws;
    WriteStream_init(&ws, buffer, sizeof buffer);
    Deal_pack(&ws, deal);
    store(&key, sizeof key, buffer, WriteStream_size(&ws));
}

static uint64_t locked(AccountName token) {
    LockedKey key = {{'l', 'o', 'c', 'k', 'e', 'd'}, token};
    uint64_t total = 0;
    load(&key, sizeof key, &total, sizeof total);
    return total;
}

static void set_locked(AccountName token, uint64_t total) {
    LockedKey key = {{'l', 'o', 'c', 'k', 'e', 'd'}, token};
    store(&key, sizeof key, &total, sizeof total);
}

static void on_open(const ApplyContext *ctx, const Open *msg) {
    require_auth(msg->buyer);
    assert(msg->amount > 0, "a deal holds a positive amount");
    /* The token refuses a transfer to oneself: a deal paying the escrow could never settle. */
    assert(msg->seller != ctx->receiver && msg->buyer != ctx->receiver,
           "the escrow cannot be a party to its own deal");
    Deal deal;
    assert(!load_deal(msg->id, &deal), "a deal with this id exists: pick another id");
    uint64_t total = locked(msg->token) + msg->amount;
    assert(total >= msg->amount, "too many tokens locked");

    token_BalanceQuery ask = {ctx->receiver};
    uint64_t balance = 0;
    assert(token_BalanceQuery_ask(msg->token, &ask, 0, &balance) == 0,
           "the token did not answer `balance`: is it a token-rs contract?");
    assert(balance >= total,
           "the deal is not funded: transfer the amount to escrow in the same transaction, "
           "before open");

    uint64_t now = tally_block_time();
    assert(now + msg->timeout_ms >= now, "timeout_ms is too large");
    deal = (Deal){msg->buyer, msg->seller, msg->token, msg->amount, now + msg->timeout_ms};
    store_deal(msg->id, &deal);
    set_locked(msg->token, total);
    OpenedEvent opened = {msg->id, deal};
    OpenedEvent_emit(&opened);
    Open_reply(deal.deadline_ms);
}

/* Pays the deal's tokens to `to` and forgets the deal. */
static void settle(AccountName self, uint64_t id, const Deal *deal, AccountName to) {
    token_Transfer pay = {self, to, deal->amount, (String *)MEMO};
    assert(token_Transfer_call(deal->token, &pay, 0) == 0, "the token transfer failed");
    DealKey key = deal_key(id);
    remove(&key, sizeof key);
    set_locked(deal->token, locked(deal->token) - deal->amount);
    SettledEvent settled = {id, to, deal->amount};
    SettledEvent_emit(&settled);
}

static void on_release(const ApplyContext *ctx, const Release *msg) {
    Deal deal;
    assert(load_deal(msg->id, &deal), "no deal with this id");
    require_auth(deal.buyer);
    settle(ctx->receiver, msg->id, &deal, deal.seller);
}

static void on_refund(const ApplyContext *ctx, const Refund *msg) {
    Deal deal;
    assert(load_deal(msg->id, &deal), "no deal with this id");
    assert(tally_block_time() >= deal.deadline_ms,
           "the deal runs until its deadline: only the buyer can end it before (release)");
    settle(ctx->receiver, msg->id, &deal, deal.buyer);
}

static void answer_deal(const ApplyContext *ctx, const DealQuery *msg) {
    (void)ctx;
    Deal deal;
    assert(load_deal(msg->id, &deal), "no deal with this id");
    DealQuery_reply(&deal);
}

TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    escrow_dispatch(receiver, code, action);
}

TALLY_EXPORT("query") void query(uint64_t receiver, uint64_t method) {
    escrow_query_dispatch(receiver, method);
}
