/* registry: a name registry. The first account to claim a name owns it; only the owner may
 * change its text or release it. Build: tally build contracts/registry.c
 *
 * Actions (borsh data):
 *   set {owner: name, entry: name, text: string}   claim `entry` for `owner`, or update its text
 *   del {owner: name, entry: name}                 release `entry`
 * Storage: entry (8 bytes) -> owner (8 bytes) followed by the text (at most 256 bytes). */
#include "tally.h"

#define MAX_TEXT 256

static char buffer[1024]; /* longer messages read as truncated: "message too short" */
static char record[8 + MAX_TEXT];

/* Aborts unless `entry` is free or owned by `owner`; returns whether it exists. */
static int check_owner(AccountName entry, AccountName owner) {
    AccountName current;
    int found = load(&entry, sizeof entry, &current, sizeof current);
    if (found < 0) return 0;
    assert(current == owner, "the name belongs to another account");
    return 1;
}

void onApply_Set_registry() {
    int read = readMessage(buffer, sizeof buffer);
    DataStream ds;
    DataStream_init(&ds, buffer, read);
    AccountName owner, entry;
    String *text;
    AccountName_unpack(&ds, &owner);
    AccountName_unpack(&ds, &entry);
    String_unpack(&ds, &text);
    assert(text->len <= MAX_TEXT, "text longer than 256 bytes");
    require_auth(owner);
    check_owner(entry, owner);
    __builtin_memcpy(record, &owner, 8);
    __builtin_memcpy(record + 8, text->data, text->len);
    store(&entry, sizeof entry, record, 8 + text->len);
}

void onApply_Del_registry() {
    int read = readMessage(buffer, sizeof buffer);
    DataStream ds;
    DataStream_init(&ds, buffer, read);
    AccountName owner, entry;
    AccountName_unpack(&ds, &owner);
    AccountName_unpack(&ds, &entry);
    require_auth(owner);
    assert(check_owner(entry, owner), "no such name");
    remove(&entry, sizeof entry);
}
