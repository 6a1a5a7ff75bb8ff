//! The contract side of ABI v1, for contracts written in Rust (feature `guest`).
//!
//! Safe wrappers over the imports: the action's message, storage under raw-byte keys with
//! borsh values, authority checks, aborts and console output; [`contract!`] for the entry
//! point and the `no_std` boilerplate. Only `core` and `alloc` are used, so a contract is
//! `no_std`.
//!
//! A contract's action types come from its ABI file: `tally abigen NAME.abi.json --lang rust
//! -o src/abi.rs` generates one struct per action and an `Action` enum of them (see
//! [`crate::message`]). [`contract!`] exports `apply`, decodes the incoming action into that
//! enum and calls your function with it and the [`Context`] (receiver, code, action):
//!
//! ```ignore
//! #![no_std]
//! mod abi; // generated: `pub enum Action { Hit(Hit) }`, `pub struct Hit { pub who: Name }`
//!
//! use abi::{Action, Hit};
//! use tally_host_api::guest::{self, Context};
//!
//! tally_host_api::contract!(execute);
//!
//! fn execute(_ctx: &Context, action: Action) {
//!     match action {
//!         Action::Hit(Hit { who }) => {
//!             guest::require_auth(who);
//!             let count = guest::load::<u64>(&who).unwrap_or(0);
//!             guest::store(&who, &(count + 1));
//!         }
//!     }
//! }
//! ```
//!
//! # Keys and values
//!
//! A key is raw bytes ([`Key`]): a `&str` is its UTF-8 bytes, a [`Name`] its 8 bytes
//! little-endian (the layout of the 2017 C contracts, so a Rust token and simplecoin keep
//! balances alike), a `u64` its 8 bytes little-endian. Values are borsh ([`store`], [`load`]),
//! or raw bytes ([`store_bytes`], [`load_bytes`]).
//!
//! # Action data
//!
//! [`message`] decodes the action's data strictly, as [`crate::message::decode`] does:
//! exactly one value, no trailing bytes, strings in UTF-8. The readers `tally abigen --lang c`
//! generates for C contracts accept and refuse exactly the same data, with the same abort
//! messages. (The 2017 C helpers, `DataStream` and friends, read a prefix and ignore the rest;
//! `DataStream_end` checks that nothing is left.)

use alloc::vec::Vec;
use borsh::{BorshDeserialize, BorshSerialize};

pub use crate::Name;
pub use crate::message::{
    ActionData, Actions, DecodeError, EventData, Message, Queries, QueryData, name,
};
pub use crate::{contract, no_std_boilerplate, queries};

mod sys {
    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        pub fn read_message(dst: *mut u8, len: u32) -> i32;
        pub fn load(key: *const u8, klen: u32, dst: *mut u8, dlen: u32) -> i32;
        pub fn store(key: *const u8, klen: u32, value: *const u8, vlen: u32);
        pub fn remove(key: *const u8, klen: u32);
        pub fn assert(cond: i32, msg: *const u8, mlen: u32);
        pub fn require_auth(account: i64);
        pub fn print(msg: *const u8, mlen: u32);
        pub fn call(account: i64, action: i64, data: *const u8, len: u32, fuel: i64) -> i32;
        pub fn query(account: i64, method: i64, data: *const u8, len: u32, fuel: i64) -> i32;
        pub fn set_return(data: *const u8, len: u32);
        pub fn read_return(dst: *mut u8, len: u32) -> i32;
        pub fn caller() -> i64;
        pub fn emit(name: i64, data: *const u8, len: u32);
        pub fn block_time() -> i64;
        pub fn block_height() -> i64;
        pub fn has_auth(account: i64) -> i32;
        pub fn is_account(account: i64) -> i32;
    }
}

/// What an `apply` call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The account whose contract is running (whose storage [`store`] writes).
    pub receiver: Name,
    /// The account the action was sent to. [`apply`] and [`dispatch`] only call handlers
    /// when it is the receiver.
    pub code: Name,
    /// The action's name.
    pub action: Name,
}

/// Aborts the action with `message`: its transaction rolls back, the node goes on.
pub fn abort(message: &str) -> ! {
    // SAFETY: the pointer and length describe `message`, which lives across the call.
    unsafe { sys::assert(0, message.as_ptr(), message.len() as u32) };
    unreachable!("assert(0) does not return")
}

/// Aborts the action with `message` unless `condition` holds.
pub fn check(condition: bool, message: &str) {
    if !condition {
        abort(message);
    }
}

/// Aborts unless the transaction carrying this action is authorized by `account`.
pub fn require_auth(account: Name) {
    // SAFETY: a plain integer argument.
    unsafe { sys::require_auth(account.0 as i64) }
}

/// Appends `text` to the action's console (for debugging; bounded by the runtime).
pub fn print(text: &str) {
    // SAFETY: the pointer and length describe `text`.
    unsafe { sys::print(text.as_ptr(), text.len() as u32) }
}

/// Why a call or query failed: the callee's abort code (`AbortCode` as a number). Its writes
/// and events were rolled back; the caller decides whether to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFailed(pub i32);

/// Bytes a read of the message, of a call's return data or of a stored value makes room for
/// before it asks the host: one host call for anything up to this long (a token transfer's
/// message is 33 bytes, a balance 8), a second one, with room for all of it, for anything
/// longer. Asking the length first cost a host call on every read.
const FIRST_READ: usize = 64;

/// Reads a buffer the host holds with `read(dst, len) -> full length` (negative: none):
/// `None` if the host has none, else all of it.
fn read_all(read: impl Fn(*mut u8, u32) -> i32) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(FIRST_READ);
    loop {
        let full = read(buf.as_mut_ptr(), buf.capacity() as u32);
        if full < 0 {
            return None;
        }
        let full = full as usize;
        if full <= buf.capacity() {
            // SAFETY: the host wrote `full` bytes, within the capacity it was given.
            unsafe { buf.set_len(full) };
            return Some(buf);
        }
        buf.reserve_exact(full);
    }
}

/// The return data of the last call or query.
fn returned() -> Vec<u8> {
    // SAFETY: `read_all` passes a buffer with room for the length it passes.
    read_all(|dst, len| unsafe { sys::read_return(dst, len) }).unwrap_or_default()
}

/// Calls `account`'s action `action` with `data` (borsh), giving it at most `fuel` (0: all this
/// action has left), and returns its return data. In the callee only this contract
/// authorizes: the transaction's signers' authority does not flow into a call.
pub fn call(account: Name, action: Name, data: &[u8], fuel: u64) -> Result<Vec<u8>, CallFailed> {
    // SAFETY: the pointer and length describe `data`.
    let status = unsafe {
        sys::call(
            account.0 as i64,
            action.0 as i64,
            data.as_ptr(),
            data.len() as u32,
            fuel as i64,
        )
    };
    answer(status)
}

/// A call's or query's status as its return data or its failure.
fn answer(status: i32) -> Result<Vec<u8>, CallFailed> {
    match status {
        0 => Ok(returned()),
        code => Err(CallFailed(code)),
    }
}

/// Runs `account`'s read-only query `method` with `data`, like [`call`]: it can write, emit
/// or call nothing.
pub fn query(account: Name, method: Name, data: &[u8], fuel: u64) -> Result<Vec<u8>, CallFailed> {
    // SAFETY: the pointer and length describe `data`.
    let status = unsafe {
        sys::query(
            account.0 as i64,
            method.0 as i64,
            data.as_ptr(),
            data.len() as u32,
            fuel as i64,
        )
    };
    answer(status)
}

/// Sets this action's (or query's) return data, what its caller reads.
pub fn set_return(data: &[u8]) {
    // SAFETY: the pointer and length describe `data`.
    unsafe { sys::set_return(data.as_ptr(), data.len() as u32) }
}

/// The contract that called this action, or `None` for a top-level action.
pub fn caller() -> Option<Name> {
    // SAFETY: no arguments.
    match unsafe { sys::caller() } {
        0 => None,
        account => Some(Name(account as u64)),
    }
}

/// Emits event `name` with `data` (borsh, as declared in the ABI), kept in the receipt.
pub fn emit(name: Name, data: &[u8]) {
    // SAFETY: the pointer and length describe `data`.
    unsafe { sys::emit(name.0 as i64, data.as_ptr(), data.len() as u32) }
}

/// The block's time, ms since the Unix epoch: the header's, the same on every node.
pub fn block_time() -> u64 {
    // SAFETY: no arguments.
    unsafe { sys::block_time() as u64 }
}

/// The block's height.
pub fn block_height() -> u64 {
    // SAFETY: no arguments.
    unsafe { sys::block_height() as u64 }
}

/// Whether `account` authorizes this action ([`require_auth`] without aborting).
pub fn has_auth(account: Name) -> bool {
    // SAFETY: a plain integer argument.
    unsafe { sys::has_auth(account.0 as i64) != 0 }
}

/// Whether account `account` exists.
pub fn is_account(account: Name) -> bool {
    // SAFETY: a plain integer argument.
    unsafe { sys::is_account(account.0 as i64) != 0 }
}

/// The action's raw data.
pub fn message_bytes() -> Vec<u8> {
    // SAFETY: `read_all` passes a buffer with room for the length it passes.
    read_all(|dst, len| unsafe { sys::read_message(dst, len) }).unwrap_or_default()
}

/// The action's data decoded as exactly one `T` (see [the module docs](self#action-data));
/// aborts the action with the [`DecodeError`]'s message otherwise.
pub fn message<T: BorshDeserialize>() -> T {
    crate::message::decode(&message_bytes()).unwrap_or_else(|e| abort(e.message()))
}

/// A storage key: raw bytes, with no length prefix.
pub trait Key {
    /// Calls `f` with the key's bytes.
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R;
}

impl Key for [u8] {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}

impl<const N: usize> Key for [u8; N] {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}

impl Key for Vec<u8> {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}

/// Its UTF-8 bytes: `tally get CONTRACT str:TEXT` reads it.
impl Key for str {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}

impl Key for alloc::string::String {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}

/// Its 8 bytes little-endian, as the C contracts store an `AccountName`: `tally get CONTRACT
/// name:ACCOUNT` reads it.
impl Key for Name {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.0.to_le_bytes())
    }
}

/// Its 8 bytes little-endian.
impl Key for u64 {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.to_le_bytes())
    }
}

impl<K: Key + ?Sized> Key for &K {
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        (**self).with_bytes(f)
    }
}

/// The raw value of `key` in this contract's storage.
pub fn load_bytes(key: &(impl Key + ?Sized)) -> Option<Vec<u8>> {
    key.with_bytes(|key| {
        // SAFETY: the key with its exact length; `read_all` passes a buffer with room for the
        // length it passes.
        read_all(|dst, len| unsafe { sys::load(key.as_ptr(), key.len() as u32, dst, len) })
    })
}

/// The value of `key` decoded as `V`, or `None` if absent; aborts if it is not exactly one
/// `V`. Name the type where the compiler cannot infer it: `load::<u64>(&who)`.
pub fn load<V: BorshDeserialize>(key: &(impl Key + ?Sized)) -> Option<V> {
    let bytes = load_bytes(key)?;
    Some(crate::message::decode(&bytes).unwrap_or_else(|_| abort("stored value has another type")))
}

/// Whether `key` has a value in this contract's storage.
pub fn contains(key: &(impl Key + ?Sized)) -> bool {
    key.with_bytes(|key| {
        // SAFETY: the key pointer with its exact length; a zero-length destination.
        unsafe { sys::load(key.as_ptr(), key.len() as u32, [].as_mut_ptr(), 0) >= 0 }
    })
}

/// Sets the raw value of `key`.
pub fn store_bytes(key: &(impl Key + ?Sized), value: &[u8]) {
    key.with_bytes(|key| {
        // SAFETY: pointers with their exact lengths.
        unsafe {
            sys::store(
                key.as_ptr(),
                key.len() as u32,
                value.as_ptr(),
                value.len() as u32,
            )
        }
    })
}

/// `value` borsh-encoded, as [`crate::message::encode`] encodes it, into a buffer that starts
/// with room for 64 bytes: grown from nothing, a 40-byte value took four allocations and three
/// copies (the bump allocator frees none of them), and borsh's own `to_vec` reserves 1 KiB,
/// which pushes the next allocations into another 1 KiB chunk for the runtime to restore and
/// the action to pay for. Every typed call, answer and event of this module encodes with it.
pub fn encode<V: BorshSerialize + ?Sized>(value: &V) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIRST_READ);
    value
        .serialize(&mut out)
        .unwrap_or_else(|_| abort("encoding"));
    out
}

/// Sets `key` to `value`, borsh-encoded.
pub fn store<V: BorshSerialize + ?Sized>(key: &(impl Key + ?Sized), value: &V) {
    store_bytes(key, &encode(value));
}

/// Deletes `key` (a no-op if absent).
pub fn remove(key: &(impl Key + ?Sized)) {
    key.with_bytes(|key| {
        // SAFETY: pointer with its exact length.
        unsafe { sys::remove(key.as_ptr(), key.len() as u32) }
    })
}

/// Runs one `apply(receiver, code, action)` call with generated action types: decodes the
/// action's data into `A` (the `Action` enum of `tally abigen`) and calls `handler`. Aborts
/// on an unknown action or malformed data; does nothing when the action was sent to another
/// contract (`code != receiver`). [`contract!`] calls it.
pub fn apply<A: Actions>(receiver: u64, code: u64, action: u64, handler: impl FnOnce(&Context, A)) {
    if code != receiver {
        return;
    }
    let ctx = Context {
        receiver: Name(receiver),
        code: Name(code),
        action: Name(action),
    };
    match A::decode(ctx.action, &message_bytes()) {
        Ok(decoded) => handler(&ctx, decoded),
        Err(e) => abort(e.message()),
    }
}

/// A handler for [`dispatch`]: it reads its own [`message`].
pub type Handler = fn(&Context);

/// Routes an `apply(receiver, code, action)` call to the handler of `action`, for a contract
/// without generated types (each handler reads its own [`message`]); aborts on an unknown
/// action, does nothing when the action was sent to another contract.
pub fn dispatch(receiver: u64, code: u64, action: u64, handlers: &[(Name, Handler)]) {
    if code != receiver {
        return;
    }
    let ctx = Context {
        receiver: Name(receiver),
        code: Name(code),
        action: Name(action),
    };
    match handlers.iter().find(|(n, _)| n.0 == action) {
        Some((_, handler)) => handler(&ctx),
        None => abort("unknown action"),
    }
}

/// Calls `contract`'s action with typed data (a struct `tally abigen` generated from the
/// callee's ABI), like [`call`], and decodes what it returns as the ABI says. Aborts if the
/// return data is not what the callee's ABI declares.
///
/// ```ignore
/// let paid = guest::call_action(token, &token_abi::Transfer { from: me, to, amount, memo }, 0);
/// ```
pub fn call_action<A: ActionData>(
    contract: Name,
    action: &A,
    fuel: u64,
) -> Result<A::Returns, CallFailed> {
    call(contract, A::NAME, &encode(action), fuel).map(|data| typed_return::<A>(&data))
}

/// Asks `contract` a typed query (a struct `tally abigen` generated from its ABI), like
/// [`query`], and decodes the answer as the ABI says. Aborts if the answer is not what the
/// callee's ABI declares.
///
/// ```ignore
/// let balance: u64 = guest::ask(token, &token_abi::BalanceQuery { owner }, 0)?;
/// ```
pub fn ask<Q: QueryData>(contract: Name, query: &Q, fuel: u64) -> Result<Q::Returns, CallFailed> {
    self::query(contract, Q::NAME, &encode(query), fuel).map(|data| typed_return::<Q>(&data))
}

fn typed_return<M: Message>(data: &[u8]) -> M::Returns {
    crate::message::read_exact(data)
        .unwrap_or_else(|_| abort("the callee's return data is not what its ABI declares"))
}

/// Sets the return data of the running action or query `to`, typed by its ABI entry:
/// `guest::reply(&query, &balance)` compiles only if `balance` is what the query returns.
pub fn reply<M: Message>(_to: &M, value: &M::Returns) {
    set_return(&encode(value));
}

/// Emits a typed event (a struct `tally abigen` generated from the ABI's "events").
pub fn emit_event<E: EventData>(event: &E) {
    emit(E::NAME, &encode(event));
}

/// Runs one `query(receiver, method)` call with generated query types: decodes the question
/// into `Q` (the `Query` enum of `tally abigen`) and calls `handler`, which answers with
/// [`reply`]. Aborts on an unknown query or malformed data. [`queries!`] calls it.
pub fn apply_query<Q: Queries>(receiver: u64, method: u64, handler: impl FnOnce(&Context, Q)) {
    let ctx = Context {
        receiver: Name(receiver),
        code: Name(receiver),
        action: Name(method),
    };
    match Q::decode(ctx.action, &message_bytes()) {
        Ok(decoded) => handler(&ctx, decoded),
        Err(DecodeError::UnknownAction(_)) => abort("unknown query"),
        Err(e) => abort(e.message()),
    }
}

/// The heap [`no_std_boilerplate!`] gives a contract unless told otherwise: 32 KiB, the arena
/// contracts/token-rs has run its benchmarks with. It keeps a contract within two 64 KiB pages
/// beside `tally build`'s 64 KiB stack (every page a contract starts with is memory the runtime
/// restores after each action). A message is copied to the heap before it is decoded, so a
/// contract taking messages of more than about half the heap needs a larger one; running out
/// of heap aborts the action with "out of heap" and how to raise it.
pub const DEFAULT_HEAP: usize = 32 * 1024;

/// A global allocator for `no_std` contracts: hands out memory from a fixed arena and never
/// frees. That is all a contract needs, because the runtime restores its memory (the arena and
/// the allocator's cursor included) after every action.
///
/// The cursor comes first and the whole allocator starts on a 1 KiB boundary, so an action's
/// first kilobyte of allocations and the cursor share one of the runtime's 1 KiB dirty chunks
/// ([`crate::limits::DIRTY_CHUNK_BYTES`]). Laid out by the compiler, the cursor sat after the
/// arena and the arena began mid-chunk: a token-rs action dirtied two chunks of heap and a
/// swap three, instead of one.
#[repr(C, align(1024))]
pub struct BumpAllocator<const ARENA: usize> {
    next: core::cell::Cell<usize>,
    arena: core::cell::UnsafeCell<[u8; ARENA]>,
}

const _: () =
    assert!(core::mem::align_of::<BumpAllocator<0>>() as u64 == crate::limits::DIRTY_CHUNK_BYTES);

// SAFETY: a contract instance runs one action at a time on one thread; wasm32 has no threads
// here (the runtime rejects shared memory).
unsafe impl<const ARENA: usize> Sync for BumpAllocator<ARENA> {}

impl<const ARENA: usize> BumpAllocator<ARENA> {
    /// An allocator over an `ARENA`-byte arena.
    pub const fn new() -> Self {
        Self {
            next: core::cell::Cell::new(0),
            arena: core::cell::UnsafeCell::new([0; ARENA]),
        }
    }
}

impl<const ARENA: usize> Default for BumpAllocator<ARENA> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every block returned lies inside the arena, is aligned as asked, and is never handed
// out twice; dealloc is a no-op.
unsafe impl<const ARENA: usize> core::alloc::GlobalAlloc for BumpAllocator<ARENA> {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        let base = self.arena.get() as usize;
        let start = (base + self.next.get() + layout.align() - 1) & !(layout.align() - 1);
        let end = start + layout.size();
        if end > base + ARENA {
            out_of_heap(ARENA, layout.size());
        }
        self.next.set(end - base);
        start as *mut u8
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: core::alloc::Layout) {}
}

/// The longest panic text a contract aborts with: the host keeps at most
/// `MAX_ASSERT_MESSAGE_LEN` (1 KiB) of an abort message, and a panic's location and message
/// fit in far less.
pub const MAX_PANIC_TEXT: usize = 256;

/// A fixed buffer that `core::fmt` writes into, cut at its capacity on a character boundary:
/// a panic's text without an allocation (the heap may be what ran out).
struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole characters are ever copied in (see write_str).
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("panic")
    }

    fn push_number(&mut self, mut n: usize) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let text = core::str::from_utf8(&digits[i..]).unwrap_or("?");
        let _ = core::fmt::Write::write_str(self, text);
    }
}

impl<const N: usize> core::fmt::Write for Text<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = N - self.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

/// Aborts with "out of heap", what the contract's arena holds and what it was asked for, and
/// what to do: built without `core::fmt`, since formatting must not allocate either.
#[cold]
fn out_of_heap(arena: usize, asked: usize) -> ! {
    use core::fmt::Write as _;
    let mut text = Text::<160>::new();
    let _ = text.write_str("out of heap: the contract's ");
    text.push_number(arena);
    let _ = text.write_str("-byte heap cannot give ");
    text.push_number(asked);
    let _ = text.write_str(" more bytes; raise it with `contract!(handler, heap = N)`");
    abort(text.as_str())
}

/// Aborts the action with a panic's message and where it happened (`panicked at
/// src/lib.rs:42:9: called `Option::unwrap()` on a `None` value`), at most
/// [`MAX_PANIC_TEXT`] bytes: the contract's own text, so a failed receipt says why. The
/// panic handler of [`no_std_boilerplate!`] calls it.
#[cold]
pub fn abort_panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write as _;
    let mut text = Text::<MAX_PANIC_TEXT>::new();
    let _ = text.write_str("panicked");
    if let Some(at) = info.location() {
        let _ = write!(text, " at {}:{}:{}", at.file(), at.line(), at.column());
    }
    let _ = write!(text, ": {}", info.message());
    abort(text.as_str())
}

/// The items every `no_std` contract needs: a global allocator ([`BumpAllocator`] over
/// [`DEFAULT_HEAP`] bytes, or `heap = BYTES`; running out aborts with "out of heap" and how to
/// raise it) and a panic handler that aborts the action with the panic's message and location
/// ([`abort_panic`]). [`contract!`] includes it; use it alone with your own `apply`.
///
/// `panic = terse` aborts every panic with just "panic". Formatting a panic's message keeps
/// `core::fmt` and every panic's text in the contract: measured on contracts/token-rs, 13 KiB
/// more code and 5 KiB more data (24 KiB instead of 6.5), and data is what each fresh
/// instance pays fuel for by the byte. A contract whose every failure is an explicit
/// `check`/`abort` loses nothing by it.
///
/// ```ignore
/// #![no_std]
/// tally_host_api::no_std_boilerplate!(heap = 64 * 1024);
/// tally_host_api::no_std_boilerplate!(heap = 64 * 1024, panic = terse);
/// ```
#[macro_export]
macro_rules! no_std_boilerplate {
    () => {
        $crate::no_std_boilerplate!(heap = $crate::guest::DEFAULT_HEAP);
    };
    (panic = terse) => {
        $crate::no_std_boilerplate!(heap = $crate::guest::DEFAULT_HEAP, panic = terse);
    };
    (heap = $bytes:expr) => {
        $crate::no_std_boilerplate!(@allocator $bytes);

        #[panic_handler]
        fn __tally_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::guest::abort_panic(info)
        }
    };
    (heap = $bytes:expr, panic = terse) => {
        $crate::no_std_boilerplate!(@allocator $bytes);

        #[panic_handler]
        fn __tally_panic(_: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::guest::abort("panic")
        }
    };
    (@allocator $bytes:expr) => {
        #[global_allocator]
        static __TALLY_ALLOCATOR: $crate::guest::BumpAllocator<{ $bytes }> =
            $crate::guest::BumpAllocator::new();
    };
}

/// A whole contract's entry point: exports `apply`, which decodes each action sent to the
/// contract into the generated `Action` enum and calls `handler(&Context, Action)` (see
/// [`guest::apply`](crate::guest::apply)), plus the [`no_std_boilerplate!`]. The heap and the
/// panic text are set as in that macro: `contract!(execute, heap = 64 * 1024)`,
/// `contract!(execute, panic = terse)`, `contract!(execute, heap = 64 * 1024, panic = terse)`.
///
/// ```ignore
/// tally_host_api::contract!(execute);
///
/// fn execute(ctx: &Context, action: abi::Action) { /* match action { … } */ }
/// ```
#[macro_export]
macro_rules! contract {
    ($handler:expr) => {
        $crate::contract!($handler, heap = $crate::guest::DEFAULT_HEAP);
    };
    ($handler:expr, $($options:tt)+) => {
        $crate::no_std_boilerplate!($($options)+);

        // In an anonymous block, so the contract may name its own function `apply`.
        const _: () = {
            #[unsafe(export_name = "apply")]
            extern "C" fn __tally_apply(receiver: u64, code: u64, action: u64) {
                $crate::guest::apply(receiver, code, action, $handler);
            }
        };
    };
}

/// Exports `query(receiver, method)` with generated query types, as [`contract!`] does for
/// actions: `handler(&Context, Query)` gets the decoded question (the `Query` enum of
/// `tally abigen`) and answers with [`guest::reply`](reply).
///
/// ```ignore
/// tally_host_api::queries!(answer);
///
/// fn answer(_: &Context, query: abi::Query) {
///     match query {
///         abi::Query::Balance(q) => guest::reply(&q, &guest::load::<u64>(&q.owner).unwrap_or(0)),
///     }
/// }
/// ```
#[macro_export]
macro_rules! queries {
    ($handler:expr) => {
        const _: () = {
            #[unsafe(export_name = "query")]
            extern "C" fn __tally_query(receiver: u64, method: u64) {
                $crate::guest::apply_query(receiver, method, $handler);
            }
        };
    };
}

/// Exports `query(receiver, method)`, the contract's read-only entry point
/// (docs/CONTRACTS.md): `handler(receiver, method)` reads the question with [`message`] and
/// answers with [`set_return`]. In it, every write, event and non-static call fails.
///
/// ```ignore
/// tally_host_api::query!(answer);
///
/// fn answer(_receiver: Name, method: Name) {
///     guest::check(method == guest::name("balance"), "unknown query");
///     let owner: Name = guest::message();
///     guest::set_return(&guest::load::<u64>(&owner).unwrap_or(0).to_le_bytes());
/// }
/// ```
#[macro_export]
macro_rules! query {
    ($handler:expr) => {
        const _: () = {
            #[unsafe(export_name = "query")]
            extern "C" fn __tally_query(receiver: u64, method: u64) {
                $handler($crate::Name(receiver), $crate::Name(method));
            }
        };
    };
}

/// Ordered reads of this contract's storage: raw and typed walks over `db_next`, both ways.
/// (Declared last, so that no line of this file moves: panic locations inside it are part
/// of the contracts built from it, whose committed builds must stay byte-identical.)
pub mod range;
