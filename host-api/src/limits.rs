//! Every limit a contract runs under. Each number says where it came from.

/// Size of one WebAssembly page.
pub const PAGE_SIZE: u64 = 64 * 1024;

/// Largest linear memory a contract may have or grow to, in pages (33 MiB).
/// EOS's `wasm_constraints::maximum_linear_memory` is 33 MiB = 528 pages.
pub const MAX_MEMORY_PAGES: u64 = 528;

/// Largest initial memory a module may declare, in pages. CosmWasm rejects more than 512
/// initial pages at upload; Tally is stricter because every action pays to reset the pages it
/// starts with (shared/PROBE.md: memory reset was 47% of a transfer), so a contract that wants
/// more must grow at run time and pay for it in fuel.
pub const MAX_INITIAL_PAGES: u64 = 512;

/// Fuel for one action. One fuel is about one WebAssembly instruction; a simplecoin transfer
/// uses a few thousand. Ten million bounds an action to a few milliseconds of native code,
/// which keeps a 5,000-transaction block well under a second even if every action is hostile.
pub const FUEL_PER_ACTION: u64 = 10_000_000;

/// Fuel every host call costs before any per-byte charge: roughly the instructions a hash-map
/// lookup and the bounds checks cost natively, so a loop of host calls is not cheaper than the
/// equivalent WebAssembly.
pub const FUEL_PER_HOST_CALL: u64 = 200;

/// Fuel per byte moved across the boundary (keys, values, messages).
pub const FUEL_PER_BYTE: u64 = 1;

/// Native stack for WebAssembly frames, in bytes. EOS limits call depth to 251 frames;
/// 512 KiB holds several thousand ordinary frames while keeping a hostile recursion's trap
/// quick and deterministic (a stack overflow is a trap, never a crash).
pub const MAX_WASM_STACK: usize = 512 * 1024;

/// Largest module accepted at upload, in bytes. EOS 2017 had no limit; CosmWasm allows 3 MiB
/// uncompressed. Contracts are small (simplecoin is under 1 KiB), so 1 MiB is generous.
pub const MAX_MODULE_SIZE: usize = 1024 * 1024;

/// Most functions a module may define. CosmWasm's `MAX_FUNCTIONS` is 20,000.
pub const MAX_FUNCTIONS: usize = 20_000;

/// Most imports a module may declare. CosmWasm's `MAX_IMPORTS` is 100.
pub const MAX_IMPORTS: usize = 100;

/// Most exports a module may declare. CosmWasm allows 100 exports of its own.
pub const MAX_EXPORTS: usize = 100;

/// Most globals a module may declare. The same as CosmWasm's `MAX_GLOBALS`.
pub const MAX_GLOBALS: usize = 256;

/// Most tables a module may declare (the MVP allows one; reference types allow more).
pub const MAX_TABLES: usize = 1;

/// Most elements in a table. CosmWasm's `TABLE_SIZE_LIMIT` is 2,500.
pub const MAX_TABLE_ELEMENTS: u64 = 2_500;

/// Longest storage key, in bytes. EOS keys were 8-byte names; 256 bytes allows composite keys.
pub const MAX_KEY_LEN: u32 = 256;

/// Longest storage value, in bytes. CosmWasm caps values at 128 KiB (`MAX_LENGTH_DB_VALUE`);
/// Tally keeps state in RAM, so it allows 64 KiB.
pub const MAX_VALUE_LEN: u32 = 64 * 1024;

/// Longest action message, in bytes. A transfer is 30 bytes; 64 KiB leaves room for contract
/// code passed as data later.
pub const MAX_MESSAGE_LEN: u32 = 64 * 1024;

/// Longest `assert` message kept in a receipt, in bytes (longer ones are rejected as a bad
/// argument, so the receipt never depends on where a truncation fell).
pub const MAX_ASSERT_MESSAGE_LEN: u32 = 1024;

/// Most console output one action may print, in bytes; more aborts the action. Console output
/// is a debugging aid, so 4 KiB is plenty and bounds receipts.
pub const MAX_CONSOLE_LEN: u32 = 4 * 1024;

// Transactions and blocks. A node checks these when it decodes and admits a transaction, before
// it can be included, so nothing over them ever reaches a block.

/// Largest encoded signed transaction, in bytes: a `setcode` carrying the largest module
/// ([`MAX_MODULE_SIZE`]) plus room for its actions and signatures. CometBFT's default mempool
/// `max_tx_bytes` is 1 MiB; a Tally devnet raises it to this.
pub const MAX_TX_BYTES: usize = MAX_MODULE_SIZE + 64 * 1024;

/// Most actions in one transaction. EOS bounds a transaction only by its CPU time; Tally's
/// actions run atomically in one journal checkpoint, and 16 covers batching (a transfer to
/// each of a dozen accounts) while keeping a transaction's worst case at 16 actions' fuel.
pub const MAX_ACTIONS_PER_TX: usize = 16;

/// Most signatures in one transaction, and most authorizations in one action. Each signature
/// costs ~30 µs of verification (shared/PROBE.md) that no fuel pays for, so a transaction may
/// carry few: 8 is more than any multi-party action needs.
pub const MAX_SIGNATURES_PER_TX: usize = 8;

/// Most writes (`store` and `remove` calls, system writes included) one transaction may make.
/// A hostile action once stored 39,000 keys in one transaction (issue 10); a token transfer
/// writes 2. 1,024 leaves room for batch operations while bounding a transaction's journal.
pub const MAX_TX_WRITES: u32 = 1024;

/// Most bytes (keys plus values) one transaction may write: a `setcode` of the largest module
/// ([`MAX_MODULE_SIZE`]) writes its code once, so twice that leaves room for `onInit`.
pub const MAX_TX_WRITE_BYTES: u64 = 2 * MAX_MODULE_SIZE as u64;

/// Fuel every transaction pays before its actions run, for the work no instruction counts:
/// its duplicate check, its journal checkpoint and its share of the block's commit (about
/// 2 µs on the machine of shared/PROBE.md, where a fuel unit of contract code is ~0.3 ns).
pub const FUEL_PER_TX: u64 = 5_000;

/// Fuel per byte of a transaction's encoding: storing it in the block and hashing it into the
/// transactions root.
pub const FUEL_PER_TX_BYTE: u64 = 10;

/// Fuel a system action (`newaccount`, `setcode`) costs before any per-byte charge.
pub const FUEL_PER_SYSTEM_ACTION: u64 = 10_000;

/// Fuel per byte of code a `setcode` uploads, paid before the module is validated and
/// compiled: compilation is the work it buys. Sized so that the largest module the upload
/// limits allow costs less than a block's fuel while its compile time stays within the share
/// of a block's second that the fuel buys (see `MAX_BLOCK_FUEL`).
pub const FUEL_PER_CODE_BYTE: u64 = 100;

/// Fuel one block may use, over all its transactions (intrinsic charges included). Once less
/// than [`FUEL_PER_ACTION`] is left, further transactions are refused for this block. It
/// bounds a block built entirely of hostile transactions: at the worst cost per fuel unit
/// measured (the worst-case block benchmark, README), it keeps such a block under a second.
pub const MAX_BLOCK_FUEL: u64 = 250_000_000;
