//! The [`Host`] an action sees: its contract's namespace of the journal, the calls it makes to
//! other contracts, the events it emits and the block it runs in. The one implementation in
//! the chain: in-order and speculative runs differ only in the journal it is given, and a call
//! from one contract to another runs through the same executor as a top-level action
//! (docs/CONTRACTS.md).

use std::ops::Bound;
use tally_host_api::limits::MAX_CALL_DEPTH;

use tally_host_api::{
    Abort, AbortCode, BlockInfo, Call, CallKind, CallResult, Host, HostError, Name, Next,
    NodeFault, Upsert, Walk,
};
use tally_runtime::{Entry, Outcome};

use super::Exec;
use super::system::SYSTEM;
use crate::receipt::{CallTrace, Event};
use crate::state::keys;
use crate::store::{Direction, KeyRange, prefix_end};

/// Contract storage keys are the state's keys past this many bytes: [`keys::CONTRACT`] and
/// the account's name, big-endian.
const NAMESPACE_LEN: usize = 9;

/// Who authorizes a running contract.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Authority<'a> {
    /// A top-level action: the accounts in its authorization, each of which signed.
    Signers(&'a [Name]),
    /// A call: only the calling contract. The signers' authority does not flow into a call
    /// (the confused-deputy rule, SECURITY.md).
    Caller(Name),
}

/// What one running contract is: the account whose code runs, what it was sent, who called it
/// and what it may do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    /// The account whose contract runs, and whose namespace it reads and writes.
    pub(crate) contract: Name,
    /// The action's (or call's, or query's) data.
    pub(crate) message: &'a [u8],
    pub(crate) authority: Authority<'a>,
    /// The calling contract, or `Name(0)` at the top level.
    pub(crate) caller: Name,
    /// A query, or anything a query called: writes, events and non-static calls fail with
    /// [`AbortCode::ReadOnly`].
    pub(crate) read_only: bool,
}

impl<'a> Frame<'a> {
    /// The frame of a top-level action of `contract`, authorized by `signers`.
    pub(crate) fn top(contract: Name, message: &'a [u8], signers: &'a [Name]) -> Self {
        Self {
            contract,
            message,
            authority: Authority::Signers(signers),
            caller: Name(0),
            read_only: false,
        }
    }
}

/// The contracts on the call stack, outermost first: at most [`MAX_CALL_DEPTH`], and each at
/// most once (no contract is re-entered mid-action). A fixed array, so a transaction without
/// calls allocates nothing for it.
#[derive(Debug, Default)]
pub(crate) struct CallStack {
    accounts: [Name; MAX_CALL_DEPTH as usize],
    len: usize,
}

impl CallStack {
    /// Why `account` may not be called now, if it may not.
    fn refuse(&self, account: Name) -> Option<Abort> {
        let on_stack = &self.accounts[..self.len];
        if on_stack.contains(&account) {
            return Some(Abort::new(
                AbortCode::Reentry,
                format!("contract {account} is already on the call stack and cannot be re-entered"),
            ));
        }
        if self.len >= MAX_CALL_DEPTH as usize {
            return Some(Abort::new(
                AbortCode::CallDepth,
                format!("calls may nest at most {MAX_CALL_DEPTH} contracts deep"),
            ));
        }
        None
    }

    /// Enters `account` (the caller checked [`CallStack::refuse`] or it is the top level).
    pub(crate) fn push(&mut self, account: Name) {
        self.accounts[self.len] = account;
        self.len += 1;
    }

    pub(crate) fn pop(&mut self) {
        self.len -= 1;
    }

    /// Contracts on the stack.
    pub(crate) fn depth(&self) -> usize {
        self.len
    }
}

/// One running contract's view of the chain.
pub(crate) struct ActionHost<'a, 'e> {
    pub(crate) exec: &'a mut Exec<'e>,
    pub(crate) frame: Frame<'a>,
}

impl ActionHost<'_, '_> {
    /// When the runtime traces, opens `call`'s entry in the call tree (filled in when it
    /// returns): the events so far and its place in the tree.
    fn trace_call(&mut self, call: &Call<'_>) -> (usize, Option<usize>) {
        let Some(calls) = &mut self.exec.calls else {
            return (0, None);
        };
        calls.push(CallTrace {
            depth: self.exec.stack.depth() as u32,
            contract: call.account,
            entry: call.entry,
            query: call.kind == CallKind::Query,
            fuel_used: 0,
            failure: None,
            events: 0,
            console: Vec::new(),
        });
        (self.exec.journal.event_count(), Some(calls.len() - 1))
    }

    /// Fails the running contract if it is read-only.
    fn writable(&self, what: &str) -> Result<(), HostError> {
        match self.frame.read_only {
            false => Ok(()),
            true => Err(Abort::new(
                AbortCode::ReadOnly,
                format!("a query cannot {what} (contract {})", self.frame.contract),
            )
            .into()),
        }
    }
}

impl Host for ActionHost<'_, '_> {
    fn message(&self) -> &[u8] {
        self.frame.message
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        let exec = &mut *self.exec;
        keys::contract_into(exec.key, self.frame.contract, key);
        // A store that fails is the node's fault, never the contract's: the block stops.
        Ok(exec
            .journal
            .load(exec.store, exec.key)
            .map_err(NodeFault::new)??)
    }

    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.writable("write")?;
        let exec = &mut *self.exec;
        keys::contract_into(exec.key, self.frame.contract, key);
        Ok(exec.journal.set(exec.key, Some(value))?)
    }

    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Upsert, HostError> {
        self.writable("write")?;
        let exec = &mut *self.exec;
        keys::contract_into(exec.key, self.frame.contract, key);
        let existed = exec
            .journal
            .upsert(exec.store, exec.key, value)
            .map_err(NodeFault::new)??;
        Ok(if existed {
            Upsert::Updated
        } else {
            Upsert::Inserted
        })
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.writable("remove a key")?;
        let exec = &mut *self.exec;
        keys::contract_into(exec.key, self.frame.contract, key);
        Ok(exec.journal.set(exec.key, None)?)
    }

    fn next(&mut self, walk: Walk<'_>) -> Result<Next, HostError> {
        let contract = self.frame.contract;
        // Both bounds inside the namespace: every key between two keys that start with it
        // starts with it, so a contract never sees another's keys (nor the chain's).
        let namespace = keys::contract(contract, &[]);
        let end = prefix_end(&namespace);
        let (lo, hi) = (
            walk.lo.map(|k| keys::contract(contract, k)),
            walk.hi.map(|k| keys::contract(contract, k)),
        );
        let range = KeyRange::new(
            match &lo {
                Bound::Unbounded => Bound::Included(namespace.as_slice()),
                bound => bound.as_ref().map(Vec::as_slice),
            },
            match &hi {
                Bound::Unbounded => end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                bound => bound.as_ref().map(Vec::as_slice),
            },
        );
        let dir = match walk.backward {
            false => Direction::Forward,
            true => Direction::Backward,
        };
        let exec = &mut *self.exec;
        // A store that fails is the node's fault, never the contract's: the block stops.
        let seek = exec
            .journal
            .seek(exec.store, range, dir, walk.max_skips)
            .map_err(NodeFault::new)?;
        // The seek and every key it stepped over, and the entry's bytes: what the fee's read
        // dimension pays for (the fuel charge counts the same).
        exec.journal.count_read(
            1 + u64::from(seek.skipped),
            seek.entry.as_ref().map_or(0, |(k, v)| {
                (k.len().saturating_sub(NAMESPACE_LEN) + v.len()) as u64
            }),
        )?;
        let entry = match seek.entry {
            // Every backend bounds a seek to its range; a key outside the namespace would be
            // another contract's, so a store that returned one is broken, and the block stops
            // rather than hand it over.
            Some((key, _)) if !key.starts_with(&namespace) => {
                return Err(NodeFault::new(std::io::Error::other(
                    "a store seek returned a key outside the range it was given",
                ))
                .into());
            }
            Some((mut key, value)) => {
                key.drain(..NAMESPACE_LEN);
                Some((key, value))
            }
            None => None,
        };
        Ok(Next {
            entry,
            skipped: seek.skipped,
        })
    }

    fn is_authorized(&self, account: Name) -> bool {
        match self.frame.authority {
            Authority::Signers(signers) => signers.contains(&account),
            Authority::Caller(caller) => caller == account,
        }
    }

    fn call(&mut self, call: Call<'_>) -> Result<CallResult, HostError> {
        if call.kind == CallKind::Action {
            self.writable("call an action")?;
        }
        let refused = |abort: Abort| CallResult {
            status: Err(abort),
            fuel_used: 0,
            output: Vec::new(),
        };
        if call.account == SYSTEM {
            return Ok(refused(Abort::new(
                AbortCode::NoHandler,
                "the system contract takes no calls from contracts: send it an action",
            )));
        }
        if let Some(abort) = self.exec.stack.refuse(call.account) {
            return Ok(refused(abort));
        }
        let executor = self.exec.executor(call.account).map_err(NodeFault::new)?;
        let Some(executor) = executor else {
            return Ok(refused(Abort::new(
                AbortCode::NoHandler,
                format!("account {} has no contract", call.account),
            )));
        };
        let frame = Frame {
            contract: call.account,
            message: call.data,
            authority: Authority::Caller(self.frame.contract),
            caller: self.frame.contract,
            read_only: self.frame.read_only || call.kind == CallKind::Query,
        };
        let entry = match call.kind {
            CallKind::Action => Entry::Action {
                receiver: call.account,
                code: call.account,
                action: call.entry,
            },
            CallKind::Query => Entry::Query {
                receiver: call.account,
                method: call.entry,
            },
        };
        // A call is a journal checkpoint: a callee that fails leaves nothing behind, its own
        // callees' changes and events included, and its caller goes on.
        let mark = self.exec.journal.mark();
        let (events_before, traced) = self.trace_call(&call);
        self.exec.stack.push(call.account);
        let receipt = self
            .exec
            .run_frame(&executor, frame, entry, call.fuel, call.stack_height);
        self.exec.stack.pop();
        let mut receipt = receipt.map_err(NodeFault::new)?;
        if receipt.outcome != Outcome::Success {
            self.exec.journal.revert_to(mark);
        }
        if let (Some(at), Some(calls)) = (traced, &mut self.exec.calls) {
            let frame = &mut calls[at];
            frame.fuel_used = receipt.fuel_used;
            frame.failure = receipt.failure().cloned();
            frame.events = self.exec.journal.event_count() - events_before;
            frame.console = std::mem::take(&mut receipt.console);
        }
        let status = match receipt.outcome {
            Outcome::Success => Ok(()),
            Outcome::Failure(abort) => Err(abort),
        };
        Ok(CallResult {
            status,
            fuel_used: receipt.fuel_used,
            output: receipt.output,
        })
    }

    fn emit(&mut self, name: Name, data: &[u8]) -> Result<(), HostError> {
        self.writable("emit an event")?;
        Ok(self.exec.journal.emit(Event {
            contract: self.frame.contract,
            name,
            data: data.to_vec(),
        })?)
    }

    fn caller(&self) -> Name {
        self.frame.caller
    }

    fn block(&self) -> BlockInfo {
        self.exec.block
    }

    fn is_account(&mut self, account: Name) -> Result<bool, HostError> {
        let exec = &mut *self.exec;
        let found = exec
            .journal
            .get(exec.store, &keys::account(account))
            .map_err(NodeFault::new)?
            .is_some();
        // A key looked up like any `load`: the read dimension pays for it.
        exec.journal.count_read(1, 0)?;
        Ok(found)
    }
}
