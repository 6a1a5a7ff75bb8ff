//! Every limit a contract runs under. Each number says where it came from.

/// Size of one WebAssembly page.
pub const PAGE_SIZE: u64 = 64 * 1024;

/// Largest linear memory a contract may have or grow to, in pages (33 MiB).
/// EOS's `wasm_constraints::maximum_linear_memory` is 33 MiB = 528 pages.
pub const MAX_MEMORY_PAGES: u64 = 528;

/// Largest initial memory a module may declare, in pages. CosmWasm rejects more than 512
/// initial pages at upload; Tally is stricter because every action pays to reset the pages it
/// starts with (resetting a pool slot's memory was 47% of a transfer's time in the first probe
/// of wasmtime's instance pool, 2-core Xeon), so a contract that wants
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

/// Fuel per key a `load` looks up, on top of [`FUEL_PER_HOST_CALL`]: a lookup in a large state
/// held in RAM misses the CPU caches (~100-300 ns with 10M accounts on this project's 2-core
/// machines, where ordinary contract code runs at ~0.3 ns per fuel). Cosmos SDK's `KVStore`
/// gas charges the same kind of flat read cost (`ReadCostFlat` 1,000).
pub const FUEL_PER_KEY_READ: u64 = 1_000;

/// Fuel per key a `db_next` seeks, on top of [`FUEL_PER_HOST_CALL`], and again for each key
/// the pending block deleted that the seek steps over (each one more seek). A seek searches
/// the store's sorted run and each tier of the log store's order of the keys changed since
/// (a tier of 400,000 keys: 0.67 µs, `merge_tiers_and_seeks_are_timed` in
/// `chain/src/store/log/order/tests.rs`) and the journal's sorted overlay, then copies the key
/// and value out: a walk through `contracts/ordered.c` took 1.13 µs a key on the memory store
/// and 1.43 µs on the log store over 1M keys (`cargo bench -p tally-bench --bench
/// store_iter`, medians), which at ~0.3 ns a fuel is about 4,000, four times
/// [`FUEL_PER_KEY_READ`]'s lookup. The key and value returned are charged [`FUEL_PER_BYTE`]
/// each, so a contract walking a million keys pays for each (over 4 billion fuel, 400
/// actions' worth).
pub const FUEL_PER_KEY_SEEK: u64 = 4 * FUEL_PER_KEY_READ;

/// Fuel per key a `store` or `remove` writes, on top of [`FUEL_PER_HOST_CALL`]: besides the
/// lookup, a written key is sorted, hashed into the block's state checksum and appended to the
/// store at commit (~1 µs per key). Cosmos SDK charges writes twice reads (`WriteCostFlat`
/// 2,000); Tally charges three times, for the commit work.
pub const FUEL_PER_KEY_WRITE: u64 = 3_000;

/// Extra fuel when a `store` creates a key that did not exist: state growth, which every node
/// keeps (in RAM for the log store) for as long as the key lives. Ethereum prices creating a
/// storage slot at ~7x updating one (SSTORE 20,000 vs 2,900 gas); Tally's new key costs about
/// four times an overwrite in total.
pub const FUEL_PER_NEW_KEY: u64 = 10_000;

/// Fuel per byte (key plus value) a `store` writes to state, instead of [`FUEL_PER_BYTE`]:
/// the bytes are copied into the journal, hashed into the state checksum, appended to the log
/// and kept in RAM. Cosmos SDK charges 10x per byte written what it charges per byte read
/// (`WriteCostPerByte` 30 vs `ReadCostPerByte` 3).
pub const FUEL_PER_STORED_BYTE: u64 = 10;

/// Bytes of linear memory tracked as one unit when an action writes memory: after the action
/// the runtime restores each unit it dirtied. 1 KiB keeps the restore of a typical action (a
/// few hundred bytes of stack and buffers) at a few chunks, where 64 KiB pages would copy
/// 64 KiB after every transfer.
pub const DIRTY_CHUNK_BYTES: u64 = 1024;

/// Fuel per chunk ([`DIRTY_CHUNK_BYTES`]) of linear memory an action dirties for the first
/// time, by a wasm store, a bulk memory operation or a host write. After the action the
/// runtime copies the chunk back from the contract's snapshot (or zeroes it); on a fresh
/// instance the first write to a chunk can also cost a page fault (~1 µs). Measured by
/// `cargo bench --bench runtime_limits -- restore`.
pub const FUEL_PER_DIRTY_CHUNK: u64 = 2_000;

/// Fuel every action pays per page (64 KiB) of its memory, for reading the dirty-chunk map
/// afterwards: ~4 µs for a 512-page memory (`cargo bench --bench runtime_limits -- restore`),
/// ~8 ns per page, at ~0.3 ns per fuel.
pub const FUEL_PER_MEMORY_PAGE: u64 = 32;

/// Fuel per byte a bulk memory operation (`memory.fill`, `memory.copy`, `memory.init`)
/// touches. NEAR charges one regular operation per byte (`linear_op_unit_cost` =
/// `regular_op_cost`), and so does wasmtime's default table, which the runtime pins.
pub const FUEL_PER_BULK_BYTE: u8 = 1;

/// Fuel per table element a bulk table operation (`table.fill`, `table.copy`, `table.init`,
/// `table.grow`) touches: each element is written through wasmtime's runtime (~10 ns,
/// measured by `cargo bench --bench runtime_limits -- fuel`).
pub const FUEL_PER_TABLE_ELEMENT: u8 = 30;

/// Fuel of an integer division or remainder (`i32/i64.div_s/div_u/rem_s/rem_u`) instead of
/// one: a 64-bit `div` takes ~40-90 cycles on x86-64 server CPUs, against ~1 for
/// the operations fuel usually counts, so a chain of divisions was the slowest code per fuel
/// (`cargo bench --bench runtime_limits -- fuel`); at 16 it runs at ~0.8 ns per fuel.
pub const FUEL_PER_INTEGER_DIVISION: u8 = 16;

/// Fuel of a float division or square root (`f32/f64.div`, `f32/f64.sqrt`) instead of one:
/// ~15-20 cycles of latency each, plus NaN canonicalisation; at 8 fuel a chain of square
/// roots still ran at ~1.5 ns per fuel, at 16 ~1 ns.
pub const FUEL_PER_FLOAT_DIVISION: u8 = 16;

/// Fuel per `memory.grow`: a call into wasmtime's runtime that changes the memory's
/// protection (~1-3 µs). A grown memory cannot be restored in place, so the instance is
/// dropped and the contract's next action instantiates afresh (~10 µs); like a warm instance
/// evicted from the cache, that happens at most once per action and is the node's cost.
pub const FUEL_PER_MEMORY_GROW: u64 = 10_000;

/// Fuel every action of a module that cannot reuse an instance (it changes its tables or
/// drops segments) pays up front for its fresh instance: ~8-10 µs from the instance pool
/// (measured with wasmtime 48's pooling allocator, 2-core Xeon), plus [`FUEL_PER_BYTE`] per byte of data segments copied in.
pub const FUEL_PER_FRESH_INSTANCE: u64 = 40_000;

/// Fuel a module's instantiation may use (its global initialisers and segment offsets, which
/// wasmtime runs as compiled code). The validation limits bound that code to
/// [`MAX_GLOBALS`] + [`MAX_DATA_SEGMENTS`] + [`MAX_ELEMENT_SEGMENTS`] expressions of at most
/// [`MAX_CONST_EXPR_OPS`] operators each, about 70,000 operators; this is ten times that.
pub const INSTANTIATE_FUEL: u64 = 1_000_000;

/// Deepest stack of synchronous contract-to-contract calls one action may make, the action
/// itself counted as the first level. Each level runs in an instance of its own, so this also
/// bounds how many instances one action can hold at once (the runtime sizes its instance pool
/// with it). Solana allows 4 levels of cross-program invocation (`MAX_INSTRUCTION_STACK_DEPTH`
/// 5 with the caller) and EOS 4 of inline actions (`max_inline_action_depth`); 8 leaves room
/// for a router calling a pool calling a token, twice over.
pub const MAX_CALL_DEPTH: u32 = 8;

// The call stack. Exhaustion must happen at the same depth on every node, so it is counted in
// WebAssembly terms, never in native bytes (which depend on the code Cranelift generates).

/// Bytes of call stack every frame costs besides its values: NEAR's frame accounting
/// (`64 + sizes of params and locals`, finite-wasm), for the return address, the frame pointer
/// and the spills of the runtime's own registers.
pub const FRAME_OVERHEAD_BYTES: u32 = 64;

/// The deterministic stack limit: the most bytes of frames (each [`FRAME_OVERHEAD_BYTES`] plus
/// 8 bytes per parameter, local and operand-stack slot, 16 for `v128`) that may be live at
/// once. Past it the action fails with `StackOverflow`, at the same depth on every node.
/// NEAR allows 256 KiB of such accounted frames (`max_stack_height` 262,144); Tally allows
/// half, which still admits ~800 frames of a typical function (EOS allows 251).
pub const MAX_STACK_BYTES: u32 = 128 * 1024;

/// Native stack for WebAssembly frames, in bytes: a backstop that [`MAX_STACK_BYTES`] always
/// reaches first. A frame's native size is at most ~2x its accounted size (every value spills
/// to an 8- or 16-byte slot; measured worst case in the runtime's
/// `deterministic_stack_limit_always_triggers_before_the_native_one`), so this is four times
/// the deterministic limit, and small enough for the 2 MiB stack of a spawned thread.
pub const MAX_WASM_STACK: usize = 4 * MAX_STACK_BYTES as usize;

/// Largest module accepted at upload, in bytes. EOS 2017 had no limit; CosmWasm allows 3 MiB
/// uncompressed. Contracts are small (simplecoin is under 1 KiB), so 1 MiB is generous.
pub const MAX_MODULE_SIZE: usize = 1024 * 1024;

/// Most functions a module may define. Compiling costs ~150 µs of CPU per function however
/// small (the deploy benchmark's "max functions" shape), so CosmWasm's 20,000 took 3 s here;
/// 2,048 takes ~0.3 s. NEAR allows 10,000 functions in 4 MiB of code, ~625 per 256 KiB.
pub const MAX_FUNCTIONS: usize = 2_048;

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

// Compile cost. Cranelift's time grows with code size, locals, blocks and nesting, so each is
// bounded statically at upload; the worst module these limits allow compiles in well under a
// second (`cargo bench --bench runtime_limits -- deploy`, README).

/// Most bytes of function bodies (the code section) a module may have. Compile time is about
/// linear in it, and worst for code that is all stores (each gains a dirty-chunk mark): 256
/// KiB of `i32.store` took ~0.9-1.1 s of CPU to deploy, so 128 KiB keeps the worst shape near
/// half a second (`cargo bench --bench runtime_limits -- deploy`). Real contracts are far
/// smaller: simplecoin's code is ~500 bytes, the Rust token's a few KiB.
pub const MAX_CODE_SIZE: usize = 128 * 1024;

/// Most bytes of code after the runtime's instrumentation, a safety net under
/// [`MAX_CODE_SIZE`]: the instrumentation adds at most ~40 bytes per store (a 3-byte
/// instruction at least) and ~40 per function, so ~12x the code plus 40 bytes per function.
/// NEAR bounds its instrumented code too (`max_instrumented_code_size`, 16 MiB).
pub const MAX_INSTRUMENTED_CODE_SIZE: usize = 16 * MAX_CODE_SIZE;

/// Most bytes of one function body. NEAR allows 192 KiB (`max_function_body_size`); Tally's
/// whole code section is [`MAX_CODE_SIZE`], and one function may use a quarter of it
/// (register allocation grows faster than linearly with a function's size).
pub const MAX_FUNCTION_BODY_SIZE: usize = 32 * 1024;

/// Most locals one function may declare (parameters not included). wasmparser allows 50,000;
/// Cranelift zero-initialises each one, so 20,000 functions of 50,000 locals took ~90 s to
/// compile (issue 10). EOS allows 8 KiB of locals per function (`maximum_func_local_bytes`,
/// 1,024 i64s); Tally allows as many locals of any type.
pub const MAX_FUNCTION_LOCALS: u32 = 1_024;

/// Most locals all functions together may declare. NEAR allows 1,000,000 per contract
/// (`max_locals_per_contract`) for 4 MiB contracts; scaled to [`MAX_CODE_SIZE`] that is
/// ~32,000.
pub const MAX_TOTAL_LOCALS: u64 = 32 * 1024;

/// Most parameters of a function type. NEAR allows 64 (`max_params_per_function`); CosmWasm
/// 100.
pub const MAX_FUNCTION_PARAMS: usize = 64;

/// Most results of a function type. CosmWasm's `MAX_FUNCTION_RESULTS` is 1; it also lets the
/// runtime wrap every body in one block for its stack accounting.
pub const MAX_FUNCTION_RESULTS: usize = 1;

/// Most types a module may declare. NEAR's `max_types_per_contract` is 1,024.
pub const MAX_TYPES: usize = 1_024;

/// Deepest nesting of blocks, loops and ifs in a function. Every level is a Cranelift block
/// whose variables may need block parameters, so depth multiplies the cost of every local
/// used inside. EOS allows 1,024 (`maximum_nested_structures`); compilers emit far less than
/// 256 (LLVM's output for deeply nested Rust is ~20-50).
pub const MAX_NESTING_DEPTH: u32 = 256;

/// Most blocks, loops and ifs in one function. NEAR's `max_blocks_per_function` is 5,000.
pub const MAX_BLOCKS_PER_FUNCTION: u32 = 5_000;

/// Most targets of one `br_table`. Each target is an edge in Cranelift's flow graph that
/// carries every live variable; a Rust `match` on a byte needs 256. 4,096 leaves room for
/// interpreters' dispatch tables.
pub const MAX_BR_TABLE_TARGETS: u32 = 4_096;

/// Most values on one function's operand stack at once. NEAR allows 8 KiB of operand stack
/// per function (`max_operand_stack_bytes_per_function`), 1,024 eight-byte values.
pub const MAX_OPERAND_STACK: u32 = 1_024;

/// Most operators in one constant expression (a global's initialiser, a segment's offset).
/// Extended constant expressions are address arithmetic such as `global.get $base;
/// i32.const 16; i32.add`; 32 is plenty, and bounds the code instantiation runs.
pub const MAX_CONST_EXPR_OPS: usize = 32;

/// Most data segments a module may declare. Each is copied into every fresh instance; rustc
/// and clang emit a handful.
pub const MAX_DATA_SEGMENTS: usize = 1_024;

/// Most element segments a module may declare.
pub const MAX_ELEMENT_SEGMENTS: usize = 1_024;

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

// Calls between contracts, queries and events (docs/CONTRACTS.md).

/// Most distinct contracts (by code) one transaction may enter, by actions and calls
/// together. A transaction pays a fresh instance for each contract it enters after its first
/// (`Contract::fresh_instance_fuel`), and the runtime keeps twice this many instances warm, so
/// one transaction cannot make the node instantiate more often than it pays for. Solana lets
/// a transaction lock 64 accounts; 16 contracts is a router, two pools and four tokens, twice
/// over, and matches [`MAX_ACTIONS_PER_TX`].
pub const MAX_CONTRACTS_PER_TX: u32 = 16;

/// Fuel a `call` or `query` pays before the callee runs, besides the bytes it passes: taking
/// and restoring a warm instance of the callee and a journal checkpoint cost about 1 µs, a
/// little more than 3,000 fuel of contract code at ~0.3 ns a fuel.
pub const FUEL_PER_CALL: u64 = 5_000;

/// Longest return data a call or query may hand back, in bytes: a message's size, since a
/// caller's return data is as large a thing as a callee's input.
pub const MAX_RETURN_LEN: u32 = MAX_MESSAGE_LEN;

/// Fuel an event pays besides its bytes: it is kept in its receipt, which the block commits to
/// and the node hands to CometBFT's indexer, like a small write.
pub const FUEL_PER_EVENT: u64 = FUEL_PER_KEY_WRITE;

/// Fuel per byte of an event's data: stored with the block and hashed into its receipts root,
/// as a transaction's own bytes are ([`FUEL_PER_TX_BYTE`]).
pub const FUEL_PER_EVENT_BYTE: u64 = FUEL_PER_TX_BYTE;

/// Longest event data, in bytes. Events tell indexers what happened (NEP-297 events are a few
/// hundred bytes of JSON); 4 KiB holds any typed record a contract would emit.
pub const MAX_EVENT_LEN: u32 = 4 * 1024;

/// Most events one transaction may emit: 256 transfers' worth, and at most
/// 256 x [`MAX_EVENT_LEN`] = 1 MiB of receipt per transaction, the size of the largest
/// transaction ([`MAX_TX_BYTES`]).
pub const MAX_EVENTS_PER_TX: u32 = 256;

/// Fuel a query made from outside the chain (`tally query`, ABCI Query) may use: an action's.
pub const FUEL_PER_QUERY: u64 = FUEL_PER_ACTION;

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
/// costs ~30 µs of verification (ed25519 on one core of a 2-core Xeon) that no fuel pays for, so a transaction may
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
/// 2 µs on a 2-core Xeon, where a fuel unit of contract code is ~0.3 ns).
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
