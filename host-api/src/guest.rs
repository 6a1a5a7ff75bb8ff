//! The contract side of ABI v1, for contracts written in Rust (feature `guest`).
//!
//! Safe wrappers over the imports: the action's message, typed storage (borsh), authority
//! checks, aborts and console output, plus [`dispatch`] to route `apply` by action name.
//! Only `core` and `alloc` are used, so a contract may be `no_std` (it then provides a global
//! allocator; a bump allocator that never frees is enough, since the runtime restores the
//! contract's memory after every action).
//!
//! ```ignore
//! use tally_host_api::guest::{self, Name};
//!
//! #[unsafe(no_mangle)]
//! pub extern "C" fn apply(receiver: u64, code: u64, action: u64) {
//!     guest::dispatch(receiver, code, action, &[(guest::name("hello"), hello)]);
//! }
//!
//! fn hello() {
//!     let who: Name = guest::message();
//!     guest::require_auth(who);
//!     guest::store(&who, &1u64);
//! }
//! ```

use alloc::vec::Vec;
use borsh::{BorshDeserialize, BorshSerialize};

pub use crate::Name;

mod sys {
    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        pub fn read_message(dst: *mut u8, len: u32) -> i32;
        pub fn message_size() -> i32;
        pub fn load(key: *const u8, klen: u32, dst: *mut u8, dlen: u32) -> i32;
        pub fn store(key: *const u8, klen: u32, value: *const u8, vlen: u32);
        pub fn remove(key: *const u8, klen: u32);
        pub fn assert(cond: i32, msg: *const u8, mlen: u32);
        pub fn require_auth(account: i64);
        pub fn print(msg: *const u8, mlen: u32);
    }
}

/// A name from a string literal, checked at compile time when used in a `const`.
pub const fn name(s: &str) -> Name {
    match Name::from_str_const(s) {
        Ok(n) => n,
        Err(_) => panic!("not a valid name"),
    }
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

/// The action's raw data.
pub fn message_bytes() -> Vec<u8> {
    // SAFETY: no arguments.
    let len = unsafe { sys::message_size() }.max(0) as usize;
    let mut buf = Vec::with_capacity(len);
    // SAFETY: `buf` has room for `len` bytes; the host writes at most that many.
    unsafe {
        let n = sys::read_message(buf.as_mut_ptr(), len as u32);
        buf.set_len((n.max(0) as usize).min(len));
    }
    buf
}

/// The action's data decoded as `T`; aborts the action if it is not a valid `T`.
pub fn message<T: BorshDeserialize>() -> T {
    let bytes = message_bytes();
    T::try_from_slice(&bytes).unwrap_or_else(|_| abort("malformed action data"))
}

fn key_bytes<K: BorshSerialize + ?Sized>(key: &K) -> Vec<u8> {
    borsh::to_vec(key).unwrap_or_else(|_| abort("key cannot be encoded"))
}

/// The raw value of `key` in this contract's storage.
pub fn load_bytes(key: &[u8]) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(64);
    loop {
        // SAFETY: key and buffer pointers with their exact lengths.
        let full = unsafe {
            sys::load(
                key.as_ptr(),
                key.len() as u32,
                buf.as_mut_ptr(),
                buf.capacity() as u32,
            )
        };
        if full < 0 {
            return None;
        }
        let full = full as usize;
        if full <= buf.capacity() {
            // SAFETY: the host wrote `full` bytes.
            unsafe { buf.set_len(full) };
            return Some(buf);
        }
        buf.reserve_exact(full);
    }
}

/// The value of `key` decoded as `V`, or `None` if absent; aborts if it is not a valid `V`.
pub fn load<K: BorshSerialize + ?Sized, V: BorshDeserialize>(key: &K) -> Option<V> {
    let bytes = load_bytes(&key_bytes(key))?;
    Some(V::try_from_slice(&bytes).unwrap_or_else(|_| abort("stored value has another type")))
}

/// Sets the raw value of `key`.
pub fn store_bytes(key: &[u8], value: &[u8]) {
    // SAFETY: pointers with their exact lengths.
    unsafe {
        sys::store(
            key.as_ptr(),
            key.len() as u32,
            value.as_ptr(),
            value.len() as u32,
        )
    }
}

/// Sets `key` to `value`, both borsh-encoded.
pub fn store<K: BorshSerialize + ?Sized, V: BorshSerialize + ?Sized>(key: &K, value: &V) {
    let value = borsh::to_vec(value).unwrap_or_else(|_| abort("value cannot be encoded"));
    store_bytes(&key_bytes(key), &value);
}

/// Deletes `key`.
pub fn remove<K: BorshSerialize + ?Sized>(key: &K) {
    let key = key_bytes(key);
    // SAFETY: pointer with its exact length.
    unsafe { sys::remove(key.as_ptr(), key.len() as u32) }
}

/// Routes an `apply(receiver, code, action)` call to the handler of `action`, when the
/// action is addressed to this contract (`code == receiver`); aborts on an unknown action.
pub fn dispatch(receiver: u64, code: u64, action: u64, handlers: &[(Name, fn())]) {
    if code != receiver {
        return;
    }
    match handlers.iter().find(|(n, _)| n.0 == action) {
        Some((_, handler)) => handler(),
        None => abort("unknown action"),
    }
}

/// A global allocator for `no_std` contracts: hands out memory from a fixed arena and never
/// frees. That is all a contract needs, because the runtime restores its memory (the arena and
/// the allocator's cursor included) after every action.
pub struct BumpAllocator<const ARENA: usize> {
    arena: core::cell::UnsafeCell<[u8; ARENA]>,
    next: core::cell::Cell<usize>,
}

// SAFETY: a contract instance runs one action at a time on one thread; wasm32 has no threads
// here (the runtime rejects shared memory).
unsafe impl<const ARENA: usize> Sync for BumpAllocator<ARENA> {}

impl<const ARENA: usize> BumpAllocator<ARENA> {
    /// An allocator over an `ARENA`-byte arena.
    pub const fn new() -> Self {
        Self {
            arena: core::cell::UnsafeCell::new([0; ARENA]),
            next: core::cell::Cell::new(0),
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
            return core::ptr::null_mut();
        }
        self.next.set(end - base);
        start as *mut u8
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: core::alloc::Layout) {}
}
