//! One call into a contract: what a caller asks to run, the fuel it runs with, the entry
//! point it enters, and how its end becomes a receipt.

use tally_host_api::{Abort, AbortCode, Name, NodeFault};
use wasmtime::{Store, Trap};

use crate::error::RuntimeError;
use crate::execute::{ActionCtx, collect_dirty};
use crate::instance::{EntryFns, TypedEntryPoints};
use crate::receipt::{Outcome, Receipt};
use crate::trace;

/// What a caller asks a contract to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `onInit`, once at deploy (a no-op success if the contract has none).
    Init,
    /// An action addressed to `code`, run by contract `receiver`.
    Action {
        /// The account whose contract runs.
        receiver: Name,
        /// The account the action is addressed to.
        code: Name,
        /// The action's name.
        action: Name,
    },
    /// A read-only query of contract `receiver`: its `query(receiver, method)` export, in
    /// static mode (the host refuses writes). A contract without one fails with `NoHandler`.
    Query {
        /// The account whose contract runs.
        receiver: Name,
        /// The method asked.
        method: Name,
    },
    /// `migrate()`, when `setcode` replaced the account's code (a no-op success if the new
    /// code has none).
    Migrate,
}

/// What one entry into a contract may spend, and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most fuel it may use (never more than the configured fuel per action).
    pub fuel: u64,
    /// Fuel charged up front, out of `fuel`, before any code runs: what the embedder prices
    /// the entry at (the chain's charge for a contract a transaction enters after its first).
    pub entry_fee: u64,
    /// The deterministic stack height it starts at: 0 for a top-level action, its caller's
    /// ([`tally_host_api::Call::stack_height`]) for a call, so one `MAX_STACK_BYTES` budget
    /// bounds the whole call stack, and the native stack it needs with it.
    pub stack_base: u32,
}

/// How one call into a contract runs: its entry, its fuel, and where its stack starts.
#[derive(Clone, Copy)]
pub(crate) struct Request<'a> {
    pub entry: Entry,
    /// The most fuel it may use, `up_front` of which is charged before any code runs.
    pub fuel: u64,
    pub up_front: u64,
    /// The deterministic stack height it starts at: 0 for a top-level action, its caller's
    /// for a call, so that one `MAX_STACK_BYTES` budget bounds the whole call stack.
    pub stack_base: u32,
    /// With a traced runtime, what a failure inside wasm is traced with.
    pub debug: Option<&'a trace::DebugInfo>,
}

/// Runs `request` in `store`'s instance. With a traced runtime, a failure inside wasm gets its
/// trace.
pub(crate) fn run(
    store: &mut Store<ActionCtx>,
    entries: &EntryFns,
    request: Request<'_>,
) -> Result<Receipt, RuntimeError> {
    let Request {
        entry,
        fuel,
        up_front,
        stack_base,
        debug,
    } = request;
    store.data_mut().state.clear();
    let Some(fuel_left) = fuel.checked_sub(up_front) else {
        return Ok(Receipt::failed(Abort::out_of_fuel(fuel), fuel));
    };
    let engine = |e: wasmtime::Error| RuntimeError::Engine(format!("{e:#}"));
    store.set_fuel(fuel_left).map_err(engine)?;
    let (outcome, trace, pending) = match enter(store, entries, entry, stack_base as i32) {
        Ok(pending) => (Outcome::Success, None, Some(pending as u32)),
        Err(e) => {
            // Read after the fact, from what wasmtime captured; the outcome never sees it.
            let trace = debug.and_then(|debug| {
                let backtrace = e.downcast_ref::<wasmtime::WasmBacktrace>()?;
                Some(Box::new(debug.trace(backtrace)))
            });
            let overflowed = shadow_stack_overflowed(store, &e);
            match classify(e, fuel) {
                Failure::Abort(abort) => {
                    (Outcome::Failure(overflowed.unwrap_or(abort)), trace, None)
                }
                Failure::Node(e) => return Err(e),
            }
        }
    };
    Ok(settle(store, outcome, fuel, trace, pending))
}

/// Calls the wrapper of the entry point `entry` asks for, its stack starting at `stack`;
/// returns the chunks the entry marked since its last charge point.
fn enter(
    store: &mut Store<ActionCtx>,
    entries: &EntryFns,
    entry: Entry,
    stack: i32,
) -> wasmtime::Result<i32> {
    match (entry, &entries.actions) {
        (Entry::Init, _) => match &entries.init {
            None => Ok(0),
            Some(init) => init.call(&mut *store, stack),
        },
        (Entry::Migrate, _) => match &entries.migrate {
            None => Ok(0),
            Some(migrate) => migrate.call(&mut *store, stack),
        },
        (Entry::Query { receiver, method }, _) => match &entries.query {
            None => Err(wasmtime::Error::new(Abort::new(
                AbortCode::NoHandler,
                format!("contract {receiver} answers no queries (it exports no `query`)"),
            ))),
            Some(query) => query.call(&mut *store, (stack, receiver.0 as i64, method.0 as i64)),
        },
        (
            Entry::Action {
                receiver,
                code,
                action,
            },
            TypedEntryPoints::Apply(apply),
        ) => apply.call(
            &mut *store,
            (stack, receiver.0 as i64, code.0 as i64, action.0 as i64),
        ),
        (Entry::Action { code, action, .. }, TypedEntryPoints::Legacy(handlers)) => {
            match handlers
                .iter()
                .find(|h| h.code == code && h.action == action)
            {
                Some(handler) => handler.export.call(&mut *store, stack),
                None => Err(wasmtime::Error::new(Abort::new(
                    AbortCode::NoHandler,
                    format!("the contract has no handler for action {action} of {code}"),
                ))),
            }
        }
    }
}

/// The receipt of a call that ended with `outcome`: the fuel it used, with what it still owes
/// for the memory it dirtied (the chunks after its last charge point, `pending` when its
/// wrapper returned them, and those only the host wrote) and for reading the map; past the
/// action's fuel it fails as if it had run out while writing.
fn settle(
    store: &mut Store<ActionCtx>,
    mut outcome: Outcome,
    fuel: u64,
    trace: Option<Box<crate::TrapTrace>>,
    pending: Option<u32>,
) -> Receipt {
    let restore_fuel = collect_dirty(store, !matches!(outcome, Outcome::Success), pending);
    let mut fuel_used = (fuel - store.get_fuel().unwrap_or(0)).saturating_add(restore_fuel);
    if fuel_used > fuel {
        fuel_used = fuel;
        if outcome == Outcome::Success {
            outcome = Outcome::Failure(Abort::out_of_fuel(fuel));
        }
    }
    let state = &mut store.data_mut().state;
    // A failed call hands back no return data.
    let output = match outcome {
        Outcome::Success => std::mem::take(&mut state.output),
        Outcome::Failure(_) => Vec::new(),
    };
    Receipt {
        outcome,
        fuel_used,
        console: state.console.take(),
        output,
        trace,
    }
}

/// What a failed call into wasm means.
pub(crate) enum Failure {
    /// The contract failed: a receipt.
    Abort(Abort),
    /// The node failed: no receipt.
    Node(RuntimeError),
}

/// The abort of a call that failed because the contract's own stack ran out: an
/// out-of-bounds access or a bad pointer while its stack pointer lies above where it started
/// and past the memory, which only a stack run below address 0 leaves it (see [`crate::instrument::ShadowStack`]).
/// Without this, a C contract's deep recursion or large local array read as a bad pointer.
fn shadow_stack_overflowed(store: &mut Store<ActionCtx>, err: &wasmtime::Error) -> Option<Abort> {
    let wild_access = matches!(err.downcast_ref::<Trap>(), Some(Trap::MemoryOutOfBounds))
        || err
            .downcast_ref::<Abort>()
            .is_some_and(|abort| abort.code == AbortCode::BadPointer);
    if !wild_access {
        return None;
    }
    let (global, top) = store.data().shadow_stack?;
    let pointer = global.get(&mut *store).i32()? as u32;
    // Wrapped below 0, the pointer lies past the whole memory (at most `MAX_MEMORY_PAGES`,
    // 33 MiB, against 4 GiB): a global 0 that is some counter rather than a stack pointer
    // never gets there, and one that stayed inside the memory did not overflow.
    let memory = store.data().memory?.data_size(&*store) as u64;
    // A stack's top lies inside the memory, above 0: a global 0 that starts elsewhere is not
    // one.
    let a_stack = top > 0 && u64::from(top) <= memory;
    (a_stack && pointer > top && u64::from(pointer) >= memory).then(|| {
        Abort::new(
            AbortCode::StackOverflow,
            format!(
                "the contract's stack (the first {top} bytes of its memory) ran out; keep large \
                 arrays out of locals (static or stored), recurse less deeply, or build with a \
                 bigger stack (tally build --stack-size BYTES)"
            ),
        )
    })
}

/// Turns an error from a call into wasm into a deterministic abort, or into the node fault it
/// is. Only the error's type and trap code are read, never wasmtime's text.
pub(crate) fn classify(err: wasmtime::Error, fuel_limit: u64) -> Failure {
    let err = match err.downcast::<NodeFault>() {
        Ok(fault) => return Failure::Node(RuntimeError::Host(fault)),
        Err(err) => err,
    };
    if let Some(abort) = err.downcast_ref::<Abort>() {
        return Failure::Abort(abort.clone());
    }
    let Some(trap) = err.downcast_ref::<Trap>() else {
        // Not a trap and not from a host function: the engine itself failed, which no
        // contract can cause on purpose, and which another node may not see.
        return Failure::Node(RuntimeError::Engine(format!("{err:#}")));
    };
    let (code, text) = match trap {
        Trap::OutOfFuel => return Failure::Abort(Abort::out_of_fuel(fuel_limit)),
        // The deterministic limit (`stack_exhausted`) always comes first; reaching the native
        // backstop means that proof failed, and the message says so.
        Trap::StackOverflow => (AbortCode::StackOverflow, "native stack exhausted"),
        Trap::MemoryOutOfBounds => (AbortCode::Trap, "out-of-bounds memory access"),
        Trap::HeapMisaligned => (AbortCode::Trap, "misaligned memory access"),
        Trap::TableOutOfBounds => (AbortCode::Trap, "out-of-bounds table access"),
        Trap::IndirectCallToNull => (AbortCode::Trap, "indirect call to a null element"),
        Trap::BadSignature => (AbortCode::Trap, "indirect call signature mismatch"),
        Trap::IntegerOverflow => (AbortCode::Trap, "integer overflow"),
        Trap::IntegerDivisionByZero => (AbortCode::Trap, "integer division by zero"),
        Trap::BadConversionToInteger => (AbortCode::Trap, "invalid conversion to integer"),
        Trap::UnreachableCodeReached => (AbortCode::Trap, "unreachable executed"),
        _ => (AbortCode::Trap, "trap"),
    };
    Failure::Abort(Abort::new(code, text))
}
