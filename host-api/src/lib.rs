//! The Tally contract ABI, version 1: the one place both sides of the boundary agree on.
//!
//! A contract is a WebAssembly module that imports a handful of functions from module `env`
//! and exports an entry point. This crate fixes everything about that boundary:
//!
//! - [`abi`]: the import table (names, signatures) and the entry-point conventions;
//! - [`limits`]: every limit a contract runs under, each with where its number came from;
//! - [`error`]: why an action aborts, as stable numeric codes;
//! - [`name`]: EOS-style 64-bit account and action names;
//! - feature `borsh`: `message`, action data as borsh, and the traits of the types
//!   `tally abigen --lang rust` generates (for contracts, clients and tests alike);
//! - [`Host`]: what the node provides to a running action (its message and its state);
//! - feature `guest`: `guest`, the same imports as safe Rust for contracts, with the
//!   `contract!` macro for their entry point and `no_std` boilerplate;
//! - [`imports`]: what every import does, engine-free, and the macros that register them on
//!   any engine's linker; [`memory`]: the rules of guest memory (pointer bounds, dirty-chunk
//!   fuel, restoring chunks), which the runtime and every engine share;
//! - feature `testing`: `testing::MapHost`, a [`Host`] over a sorted map for tests;
//! - feature `host`: [`linker::add_to_linker`] registers every import on a wasmtime `Linker`,
//!   bounds-checking every guest pointer and charging fuel for every call.
//!
//! # Core concepts
//!
//! Pointers passed by a contract are offsets into its own linear memory, read as unsigned
//! 32-bit numbers. A bad pointer, an oversized length or a failed `assert` *aborts the action*:
//! the host function returns an [`Abort`] that the runtime turns into a failed receipt. It never
//! panics and never fails the node.
//!
//! ```
//! use tally_host_api::{abi, Name};
//!
//! let read_message = abi::import("read_message").unwrap();
//! assert_eq!(read_message.params, &[abi::ValType::I32, abi::ValType::I32]);
//! assert_eq!("simplecoin".parse::<Name>().unwrap().to_string(), "simplecoin");
//! ```
#![no_std]

extern crate alloc;
#[cfg(feature = "host")]
extern crate std;

pub mod abi;
pub mod error;
pub mod imports;
pub mod limits;
pub mod memory;
pub mod name;

#[cfg(feature = "guest")]
pub mod guest;
#[cfg(feature = "host")]
pub mod linker;
#[cfg(feature = "borsh")]
pub mod message;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{Abort, AbortCode, HostError, NodeFault};
pub use name::Name;

/// What an [`Host::upsert`] found under its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    /// The key did not exist: the write grows the state.
    Inserted,
    /// The key existed and now holds the new value.
    Updated,
}

/// Whether a call runs an action or a read-only query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// The callee's action, through its `apply` entry: it may write and emit.
    Action,
    /// The callee's query method, through its `query` entry, in static mode: any write, event
    /// or further non-static call fails with [`AbortCode::ReadOnly`].
    Query,
}

/// A call the running contract makes to another contract (docs/CONTRACTS.md).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The contract called.
    pub account: Name,
    /// The action (or, for a query, the method) called.
    pub entry: Name,
    /// Its data.
    pub data: &'a [u8],
    /// The most fuel the callee may use: what the caller had left, or less if it capped it.
    pub fuel: u64,
    /// An action or a query.
    pub kind: CallKind,
    /// The caller's deterministic stack height: the callee starts there, so one
    /// [`limits::MAX_STACK_BYTES`] budget bounds the whole call stack.
    pub stack_height: u32,
}

/// What a call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// Success, or why the callee failed (its writes and events were then rolled back).
    pub status: Result<(), Abort>,
    /// Fuel the callee used, which the caller pays.
    pub fuel_used: u64,
    /// The callee's return data (none if it failed).
    pub output: alloc::vec::Vec<u8>,
}

/// The block an action runs in: the header's, the same on every node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockInfo {
    /// Its time, ms since the Unix epoch.
    pub time_ms: u64,
    /// Its height.
    pub height: u64,
}

/// One ordered read of a contract's namespace ([`Host::next`]): the first key between `lo`
/// and `hi` (byte order) walking forward, or the last one walking `backward`. Stateless: to
/// walk on, ask again with the key found as the exclusive bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk<'a> {
    /// The lower bound, relative to the contract's namespace.
    pub lo: core::ops::Bound<&'a [u8]>,
    /// The upper bound, relative to the contract's namespace.
    pub hi: core::ops::Bound<&'a [u8]>,
    /// Walk from `hi` down.
    pub backward: bool,
    /// The most keys deleted by the pending block the walk may step over: as many further
    /// seeks as the fuel left pays for ([`limits::FUEL_PER_KEY_SEEK`] each). Past it the host
    /// stops and reports one more skip than it allowed, which the charge then refuses: the
    /// node never steps over keys the contract cannot pay for.
    pub max_skips: u32,
}

/// What [`Host::next`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Next {
    /// The key (relative to the namespace) and its value, if the range holds one.
    pub entry: Option<(alloc::vec::Vec<u8>, alloc::vec::Vec<u8>)>,
    /// Keys the pending block deleted that the read stepped over, each a further seek the
    /// contract pays for ([`limits::FUEL_PER_KEY_SEEK`]).
    pub skipped: u32,
}

/// What a node provides to one running action.
///
/// Keys are relative to the running contract: the implementation namespaces them by the
/// contract's account, so a contract can never reach another's state. Methods that can refuse
/// return a [`HostError`]: an [`Abort`] fails the action (a receipt), a [`NodeFault`] fails the
/// node's work on the block (never a receipt).
pub trait Host {
    /// The action's data, as the transaction carried it.
    fn message(&self) -> &[u8];

    /// The value stored under `key` in this contract's namespace, if any.
    ///
    /// Takes `&mut self` so that an implementation may cache what it read from a slower store.
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError>;

    /// Sets `key` to `value` in this contract's namespace.
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError>;

    /// Sets `key` like [`Host::store`], and says whether the key is new, which prices state
    /// growth ([`limits::FUEL_PER_NEW_KEY`]). The runtime calls this, not `store`.
    ///
    /// The default looks the key up first; a host that learns it while writing (a journal
    /// insert returns the old entry) should override it to save the second lookup.
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Upsert, HostError> {
        let existed = self.load(key)?.is_some();
        self.store(key, value)?;
        Ok(if existed {
            Upsert::Updated
        } else {
            Upsert::Inserted
        })
    }

    /// Deletes `key` from this contract's namespace (a no-op if absent).
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError>;

    /// The first entry of this contract's namespace in `walk`'s range and direction, as the
    /// action sees it (its own writes and deletes included). The default keeps no order: the
    /// contract aborts.
    fn next(&mut self, walk: Walk<'_>) -> Result<Next, HostError> {
        let _ = walk;
        Err(Abort::new(AbortCode::NoHandler, "this host keeps no ordered storage").into())
    }

    /// Whether this action is authorized by `account`: a signer of the transaction for a
    /// top-level action, only the calling contract for a call.
    fn is_authorized(&self, account: Name) -> bool;

    /// Runs `call` and returns what it did. The default runs none: the caller aborts.
    fn call(&mut self, call: Call<'_>) -> Result<CallResult, HostError> {
        Err(Abort::new(
            AbortCode::NoHandler,
            alloc::format!("this host runs no calls (to {})", call.account),
        )
        .into())
    }

    /// Records event `name` with `data`, emitted by this contract. The default keeps nothing.
    fn emit(&mut self, name: Name, data: &[u8]) -> Result<(), HostError> {
        let _ = (name, data);
        Ok(())
    }

    /// The contract that called this action, or `Name(0)` for a top-level action.
    fn caller(&self) -> Name {
        Name(0)
    }

    /// The block this action runs in.
    fn block(&self) -> BlockInfo {
        BlockInfo::default()
    }

    /// Whether `account` exists.
    fn is_account(&mut self, account: Name) -> Result<bool, HostError> {
        let _ = account;
        Ok(false)
    }

    /// Sees what the action prints. The runtime already collects (and bounds) the console
    /// into the receipt; override this to also stream it somewhere.
    fn print(&mut self, text: &[u8]) -> Result<(), HostError> {
        let _ = text;
        Ok(())
    }
}
