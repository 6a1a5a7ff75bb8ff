//! The native system contract at account `tally`: creating accounts, deploying code and
//! moving native coins (which pay fees, [`crate::fee`]).

use borsh::{BorshDeserialize, BorshSerialize};
use std::sync::Arc;
use tally_host_api::limits::{FUEL_PER_CODE_BYTE, FUEL_PER_SYSTEM_ACTION};
use tally_host_api::{Abort, AbortCode, Name};

use tally_runtime::{Contract, Entry, PrepareError, Receipt};

use super::Exec;
use crate::error::ChainError;
use crate::state::keys;
use crate::tx::Action;

/// The system account. Its key is set at genesis.
pub const SYSTEM: Name = match Name::from_str_const("tally") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// `newaccount`: `creator` (who must authorize) creates `name` with public key `key`.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct NewAccount {
    /// The creating account; it must authorize the action.
    pub creator: Name,
    /// The new account's name.
    pub name: Name,
    /// Its ed25519 public key.
    pub key: [u8; 32],
}

/// `setcode`: deploys `code` (WebAssembly) to `account`, which must authorize it; the
/// contract's `onInit` runs in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SetCode {
    /// The account receiving the contract.
    pub account: Name,
    /// The module.
    pub code: Vec<u8>,
}

/// The `newaccount` action name.
pub const NEWACCOUNT: Name = match Name::from_str_const("newaccount") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// The `setcode` action name.
pub const SETCODE: Name = match Name::from_str_const("setcode") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// `transfer`: moves `amount` native coins from `from` (who must authorize) to the existing
/// account `to`.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct NativeTransfer {
    /// The sender; it must authorize the action.
    pub from: Name,
    /// The recipient, an existing account.
    pub to: Name,
    /// Coins moved.
    pub amount: u64,
}

/// The `transfer` action name (of native coins).
pub const TRANSFER: Name = match Name::from_str_const("transfer") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

impl NativeTransfer {
    /// The system action that makes this transfer, authorized by `from`: what a client
    /// pushes (a wallet, `tally account`, tests).
    pub fn action(&self) -> Action {
        Action {
            account: SYSTEM,
            name: TRANSFER,
            authorization: vec![self.from],
            data: borsh::to_vec(self).expect("encoding into a Vec cannot fail"),
        }
    }
}

/// A system action, decoded: `apply` runs what this gives and `native_spend` reads it, so
/// the pool and the block agree on what a system action is and who must sign it.
enum SystemAction {
    NewAccount(NewAccount),
    Transfer(NativeTransfer),
    SetCode(SetCode),
}

impl SystemAction {
    /// Decodes `action` (addressed to [`SYSTEM`]) and checks that the account it acts for
    /// authorized it. `Err` is the abort of its failed receipt.
    fn authorized(action: &Action) -> Result<Self, Abort> {
        fn data<T: BorshDeserialize>(action: &Action, what: &str) -> Result<T, Abort> {
            borsh::from_slice(&action.data).map_err(|_| invalid(format!("bad {what} data")))
        }
        let decoded = match action.name {
            NEWACCOUNT => Self::NewAccount(data(action, "newaccount")?),
            TRANSFER => Self::Transfer(data(action, "transfer")?),
            SETCODE => Self::SetCode(data(action, "setcode")?),
            name => {
                return Err(Abort::new(
                    AbortCode::NoHandler,
                    format!("the system contract has no action {name}"),
                ));
            }
        };
        let signer = match &decoded {
            Self::NewAccount(new) => new.creator,
            Self::Transfer(t) => t.from,
            Self::SetCode(set) => set.account,
        };
        if !action.authorization.contains(&signer) {
            return Err(Abort::new(
                AbortCode::Unauthorized,
                format!("missing authority of {signer}"),
            ));
        }
        Ok(decoded)
    }
}

/// The native coins `action` may move out of an account's balance: for a system `transfer`
/// that decodes and that its sender authorizes, the sender and the amount (whether the
/// transfer then succeeds depends on state). No other action moves native coins: contracts
/// cannot call the system contract. What the mempool counts against a balance besides fees.
pub fn native_spend(action: &Action) -> Option<(Name, u64)> {
    // Named first, so the pool decodes no other system action's data (a setcode's module).
    if action.account != SYSTEM || action.name != TRANSFER {
        return None;
    }
    match SystemAction::authorized(action) {
        Ok(SystemAction::Transfer(t)) => Some((t.from, t.amount)),
        _ => None,
    }
}

/// The system's own failures, as receipts.
pub(crate) fn invalid(message: impl Into<String>) -> Abort {
    Abort::new(AbortCode::InvalidAction, message)
}

/// Runs a system action with at most `fuel`.
pub(crate) fn apply(env: &mut Exec<'_>, action: &Action, fuel: u64) -> Result<Receipt, ChainError> {
    if fuel < FUEL_PER_SYSTEM_ACTION {
        return Ok(Receipt::failed(Abort::out_of_fuel(fuel), fuel));
    }
    let done = |result: Result<(), Abort>| match result {
        Ok(()) => Receipt::success(FUEL_PER_SYSTEM_ACTION),
        Err(abort) => Receipt::failed(abort, FUEL_PER_SYSTEM_ACTION),
    };
    match SystemAction::authorized(action) {
        Err(abort) => Ok(done(Err(abort))),
        Ok(SystemAction::NewAccount(new)) => new_account(env, &new).map(done),
        Ok(SystemAction::Transfer(t)) => native_transfer(env, &t).map(done),
        Ok(SystemAction::SetCode(set)) => set_code(env, set.account, &set.code, fuel),
    }
}

/// Creates the account `new` names, if its creator exists and it does not.
fn new_account(env: &mut Exec<'_>, new: &NewAccount) -> Result<Result<(), Abort>, ChainError> {
    let mut exists = |name: Name| -> Result<bool, ChainError> {
        Ok(env.journal.get(env.store, &keys::account(name))?.is_some())
    };
    if !exists(new.creator)? {
        return Ok(Err(invalid(format!(
            "creator {} does not exist",
            new.creator
        ))));
    }
    if exists(new.name)? {
        return Ok(Err(invalid(format!("account {} already exists", new.name))));
    }
    let key = keys::account(new.name);
    if let Err(abort) = env.journal.set(&key, Some(&new.key)) {
        return Ok(Err(abort));
    }
    env.journal
        .count_new_key((key.len() + new.key.len()) as u64);
    Ok(Ok(()))
}

/// Moves native coins as `t` says, within the running transaction (a failure later in it
/// moves them back). The payer's max fee is already set aside, so a transaction cannot move
/// away the coins its fee needs.
fn native_transfer(
    env: &mut Exec<'_>,
    t: &NativeTransfer,
) -> Result<Result<(), Abort>, ChainError> {
    if t.from == t.to {
        return Ok(Err(invalid("a transfer to oneself moves nothing")));
    }
    if env.journal.get(env.store, &keys::account(t.to))?.is_none() {
        return Ok(Err(invalid(format!(
            "account {} does not exist: create it first",
            t.to
        ))));
    }
    let balance = |env: &mut Exec<'_>, account: Name| -> Result<u64, ChainError> {
        let value = env.journal.get(env.store, &keys::balance(account))?;
        crate::phase::finalize::read_balance(value, account)
    };
    let from = balance(env, t.from)?;
    let Some(left) = from.checked_sub(t.amount) else {
        return Ok(Err(invalid(format!(
            "{} has {from} coins (its transaction's max fee set aside), less than {}",
            t.from, t.amount
        ))));
    };
    let to_is_new = env.journal.get(env.store, &keys::balance(t.to))?.is_none();
    let to = balance(env, t.to)?;
    // Every coin was in a genesis balance, whose sum fits in a u64.
    let to = to.saturating_add(t.amount);
    for (account, coins) in [(t.from, left), (t.to, to)] {
        let key = keys::balance(account);
        if let Err(abort) = env.journal.set(&key, Some(&coins.to_le_bytes())) {
            return Ok(Err(abort));
        }
    }
    if to_is_new {
        env.journal
            .count_new_key((keys::balance(t.to).len() + 8) as u64);
    }
    Ok(Ok(()))
}

/// Validates and compiles `code`, records it for `account` and runs its `onInit`, with at
/// most `fuel`. Compilation is paid for by the byte before it starts, so a module that is
/// refused still costs what checking it cost.
pub(crate) fn set_code(
    env: &mut Exec<'_>,
    account: Name,
    code: &[u8],
    fuel: u64,
) -> Result<Receipt, ChainError> {
    let deploy_fuel = FUEL_PER_SYSTEM_ACTION
        .saturating_add((code.len() as u64).saturating_mul(FUEL_PER_CODE_BYTE));
    if fuel < deploy_fuel {
        return Ok(Receipt::failed(Abort::out_of_fuel(fuel), fuel));
    }
    let contract = match env.runtime.prepare(code) {
        Ok(c) => c,
        // Only the deterministic reason enters the receipt; a node fault is no verdict.
        Err(PrepareError::Rejected(e)) => {
            return Ok(Receipt::failed(invalid(e.reason()), deploy_fuel));
        }
        Err(PrepareError::Node(e)) => return Err(e.into()),
    };
    let mut receipt = install(env, account, code, contract, fuel - deploy_fuel)?;
    receipt.fuel_used += deploy_fuel;
    Ok(receipt)
}

/// Records compiled `contract` (of `code`) as `account`'s code and runs its `onInit` (or, when
/// it replaces code, its `migrate`) with at most `fuel`.
pub(crate) fn install(
    env: &mut Exec<'_>,
    account: Name,
    code: &[u8],
    contract: Arc<Contract>,
    fuel: u64,
) -> Result<Receipt, ChainError> {
    let hash = *contract.code_hash();
    // Code replacing code is an upgrade: the new code's `migrate` runs against the old state
    // instead of `onInit` (docs/CONTRACTS.md), and if it fails the transaction fails with it,
    // so the old code and state stay.
    let upgrade = env
        .journal
        .get(env.store, &keys::code_hash(account))?
        .is_some();
    let code_key = keys::code(&hash);
    let code_is_new = env.journal.get(env.store, &code_key)?.is_none();
    for (key, value, new) in [
        (keys::code_hash(account).to_vec(), &hash[..], !upgrade),
        (code_key, code, code_is_new),
    ] {
        if let Err(abort) = env.journal.set(&key, Some(value)) {
            return Ok(Receipt::failed(abort, 0));
        }
        if new {
            env.journal.count_new_key((key.len() + value.len()) as u64);
        }
    }
    let executor = env.code.map().deployed(account, contract.clone());
    env.journal.set_code(account, executor);
    let entry = match upgrade {
        true => Entry::Migrate,
        false => Entry::Init,
    };
    env.run_wasm(&contract, account, entry, fuel)
}
