//! One call into a contract: what a caller asks to run, the fuel it runs with, the entry
//! point it enters, and how its end becomes a receipt.

use tally_host_api::{Abort, AbortCode, Name, NodeFault};
use wasmtime::{Store, Trap, TypedFunc};

use crate::error::RuntimeError;
use crate::execute::{ActionCtx, collect_dirty};
use crate::instance::TypedEntryPoints;
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
}

/// The abort of an action that used all of its `fuel`.
fn out_of_fuel(fuel: u64) -> Abort {
    Abort::new(
        AbortCode::OutOfFuel,
        format!("the action used all of its {fuel} fuel"),
    )
}

/// Calls `entry` in `store`'s instance with `fuel`, of which `up_front` is charged before any
/// code runs. With `debug` (a traced runtime), a failure inside wasm gets its trace.
pub(crate) fn run(
    store: &mut Store<ActionCtx>,
    init: &Option<TypedFunc<(), ()>>,
    entry_points: &TypedEntryPoints,
    entry: Entry,
    fuel: u64,
    up_front: u64,
    debug: Option<&trace::DebugInfo>,
) -> Result<Receipt, RuntimeError> {
    store.data_mut().state.console.clear();
    let Some(fuel_left) = fuel.checked_sub(up_front) else {
        return Ok(Receipt {
            outcome: Outcome::Failure(out_of_fuel(fuel)),
            fuel_used: fuel,
            console: Vec::new(),
            trace: None,
        });
    };
    store
        .set_fuel(fuel_left)
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
    let (outcome, trace) = match enter(store, init, entry_points, entry) {
        Ok(()) => (Outcome::Success, None),
        Err(e) => {
            // Read after the fact, from what wasmtime captured; the outcome never sees it.
            let trace = debug.and_then(|debug| {
                let backtrace = e.downcast_ref::<wasmtime::WasmBacktrace>()?;
                Some(Box::new(debug.trace(backtrace)))
            });
            match classify(e, fuel) {
                Failure::Abort(abort) => (Outcome::Failure(abort), trace),
                Failure::Node(e) => return Err(e),
            }
        }
    };
    Ok(settle(store, outcome, fuel, trace))
}

/// Calls the entry point `entry` asks for.
fn enter(
    store: &mut Store<ActionCtx>,
    init: &Option<TypedFunc<(), ()>>,
    entry_points: &TypedEntryPoints,
    entry: Entry,
) -> wasmtime::Result<()> {
    match (entry, entry_points) {
        (Entry::Init, _) => match init {
            None => Ok(()),
            Some(init) => init.call(&mut *store, ()),
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
            (receiver.0 as i64, code.0 as i64, action.0 as i64),
        ),
        (Entry::Action { code, action, .. }, TypedEntryPoints::Legacy(handlers)) => {
            match handlers
                .iter()
                .find(|h| h.code == code && h.action == action)
            {
                Some(handler) => handler.export.call(&mut *store, ()),
                None => Err(wasmtime::Error::new(Abort::new(
                    AbortCode::NoHandler,
                    format!("the contract has no handler for action {action} of {code}"),
                ))),
            }
        }
    }
}

/// The receipt of a call that ended with `outcome`: the fuel it used, with what it still owes
/// for the memory it dirtied (the chunks after its last charge point, those only the host
/// wrote) and for reading the map; past the action's fuel it fails as if it had run out while
/// writing.
fn settle(
    store: &mut Store<ActionCtx>,
    mut outcome: Outcome,
    fuel: u64,
    trace: Option<Box<crate::TrapTrace>>,
) -> Receipt {
    let restore_fuel = collect_dirty(store, !matches!(outcome, Outcome::Success));
    let mut fuel_used = (fuel - store.get_fuel().unwrap_or(0)).saturating_add(restore_fuel);
    if fuel_used > fuel {
        fuel_used = fuel;
        if outcome == Outcome::Success {
            outcome = Outcome::Failure(out_of_fuel(fuel));
        }
    }
    Receipt {
        outcome,
        fuel_used,
        console: store.data_mut().state.console.take(),
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
        Trap::OutOfFuel => return Failure::Abort(out_of_fuel(fuel_limit)),
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
