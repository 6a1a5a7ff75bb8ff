//! An in-process chain for testing contracts (cargo feature `testing`): named accounts whose
//! keys it holds, deploys, signed pushes and state reads, in memory, in a few lines.
//!
//! ```
//! use tally_chain::testing::TestChain;
//! use tally_chain::Transfer;
//!
//! let mut chain = TestChain::new();
//! // contracts/simplecoin.wasm: `onInit` gives 1,000,000 coins to `simplecoin`.
//! chain.deploy("simplecoin", include_bytes!("../../contracts/simplecoin.wasm"));
//! let transfer = Transfer {
//!     from: "simplecoin".parse().unwrap(),
//!     to: "alice".parse().unwrap(),
//!     amount: 100,
//!     memo: "hi".into(),
//! };
//! let receipt = chain.push("simplecoin", "simplecoin", "transfer", &transfer);
//! assert!(receipt.is_success(), "{}", receipt.report());
//! assert_eq!(chain.balance("simplecoin", "alice"), Some(100));
//! ```
//!
//! Every push is a signed transaction in a block of its own (or with others, through
//! [`TestChain::push_block`]) run by [`Chain::run_block`], the path a node runs: the same
//! validation, signature checks, fuel, receipts and state checksum. The runtime traces
//! ([`RuntimeConfig::trace`]), so receipts carry each action's fuel, console and, for a
//! failure, the wasm function and offset where it stopped ([`TxReceipt::trace`],
//! [`TxReceipt::report`]).
//!
//! Accounts are created by the system account `tally` with signed `newaccount` actions;
//! contracts are deployed by their account's signed `setcode`. Keys derive from account
//! names, so a test is the same on every run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use borsh::{BorshDeserialize, BorshSerialize};
use ed25519_dalek::SigningKey;
use tally_host_api::Name;
use tally_runtime::{Runtime, RuntimeConfig};

use crate::chain::Chain;
use crate::config::ChainConfig;
use crate::crypto::derived_key;
use crate::genesis::Genesis;
use crate::receipt::{ExecutedBlock, TxReceipt, TxResult};
use crate::store::memory::MemoryStore;
use crate::system::{NEWACCOUNT, NewAccount, SETCODE, SYSTEM, SetCode};
use crate::tx::{Action, SignedTransaction, Transaction};

/// Seed of the harness's keys: each account's key is `derived_key(KEY_SEED, name)`.
const KEY_SEED: u64 = u64::from_le_bytes(*b"tallytst");

/// Blocks a [`MemoryStore`] of the harness keeps (the chain's default retention).
const RETAINED_BLOCKS: u64 = 512;

/// Something that names an account or action: a [`Name`] or its text. Text that is not a valid
/// name panics, with the reason: in a test, that is the test's bug.
pub trait IntoName {
    /// The name.
    fn into_name(self) -> Name;
}

impl IntoName for Name {
    fn into_name(self) -> Name {
        self
    }
}

impl IntoName for &str {
    fn into_name(self) -> Name {
        self.parse()
            .unwrap_or_else(|e| panic!("{self:?} is not a valid name: {e}"))
    }
}

impl IntoName for &String {
    fn into_name(self) -> Name {
        self.as_str().into_name()
    }
}

/// An in-memory chain for tests; see the [module docs](self).
pub struct TestChain {
    chain: Chain,
    keys: BTreeMap<Name, SigningKey>,
    /// Transactions built so far: each gets its own expiration, so two pushes of the same
    /// actions are two transactions, not a duplicate.
    built: u64,
}

impl Default for TestChain {
    fn default() -> Self {
        Self::new()
    }
}

impl TestChain {
    /// A chain with only the system account, on a memory store, with signatures checked and
    /// the runtime tracing.
    pub fn new() -> Self {
        Self::with_config(ChainConfig::default())
    }

    /// [`TestChain::new`] with other chain parameters.
    pub fn with_config(config: ChainConfig) -> Self {
        let runtime = Runtime::new(RuntimeConfig {
            trace: true,
            ..RuntimeConfig::default()
        })
        .expect("the runtime starts");
        let system = key_of(SYSTEM);
        let mut genesis = Genesis::with_system_key(system.verifying_key().to_bytes());
        genesis.accounts[0].balance = Self::SUPPLY;
        let chain = Chain::create(
            Arc::new(runtime),
            Box::new(MemoryStore::new(RETAINED_BLOCKS)),
            config,
            &genesis,
        )
        .expect("a genesis with one account commits");
        Self {
            chain,
            keys: BTreeMap::from([(SYSTEM, system)]),
            built: 0,
        }
    }

    /// The chain, to read anything the harness does not wrap.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The chain, to run blocks of your own.
    pub fn chain_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }

    /// The signing key of `account`, if the harness created it.
    pub fn key(&self, account: impl IntoName) -> Option<&SigningKey> {
        self.keys.get(&account.into_name())
    }

    /// Whether `account` exists on the chain.
    pub fn exists(&self, account: impl IntoName) -> bool {
        let account = account.into_name();
        self.chain
            .account_key(account)
            .expect("a memory store cannot fail")
            .is_some()
    }

    /// The native coins the system account holds at genesis: every coin of the chain.
    pub const SUPPLY: u64 = 1 << 60;

    /// The native coins [`TestChain::create_account`] gives each new account from the system
    /// account's: enough for a million transfers at the standard schedule's starting prices.
    pub const FUNDS: u64 = 1 << 40;

    /// Creates `account` (signed by the system account) with a key the harness keeps, and
    /// gives it [`TestChain::FUNDS`] native coins to pay its fees.
    ///
    /// # Panics
    /// If the account exists already.
    pub fn create_account(&mut self, account: impl IntoName) -> Name {
        let account = account.into_name();
        let key = key_of(account);
        let new = NewAccount {
            creator: SYSTEM,
            name: account,
            key: key.verifying_key().to_bytes(),
        };
        let action = Action {
            account: SYSTEM,
            name: NEWACCOUNT,
            authorization: vec![SYSTEM],
            data: borsh::to_vec(&new).expect("encoding into a Vec cannot fail"),
        };
        let fund = crate::system::NativeTransfer {
            from: SYSTEM,
            to: account,
            amount: Self::FUNDS,
        }
        .action();
        self.keys.insert(account, key);
        let receipt = self.push_actions(vec![action, fund]);
        assert!(
            receipt.is_success(),
            "creating account {account}: {}",
            receipt.report()
        );
        account
    }

    /// Deploys `wasm` to `account` (created first if it does not exist) and runs its
    /// `onInit`.
    ///
    /// # Panics
    /// If the module is refused or its `onInit` fails; [`TestChain::try_deploy`] returns
    /// that receipt instead.
    pub fn deploy(&mut self, account: impl IntoName, wasm: impl AsRef<[u8]>) -> TxReceipt {
        let account = account.into_name();
        let receipt = self.try_deploy(account, wasm);
        assert!(
            receipt.is_success(),
            "deploying to {account}: {}",
            receipt.report()
        );
        receipt
    }

    /// [`TestChain::deploy`] of the module in file `path`.
    pub fn deploy_file(&mut self, account: impl IntoName, path: impl AsRef<Path>) -> TxReceipt {
        let path = path.as_ref();
        let wasm = std::fs::read(path)
            .unwrap_or_else(|e| panic!("cannot read contract {}: {e}", path.display()));
        self.deploy(account, wasm)
    }

    /// Deploys `wasm` to `account` (created first if need be) and returns the receipt,
    /// successful or not.
    pub fn try_deploy(&mut self, account: impl IntoName, wasm: impl AsRef<[u8]>) -> TxReceipt {
        let account = account.into_name();
        if !self.exists(account) {
            self.create_account(account);
        }
        let set = SetCode {
            account,
            code: wasm.as_ref().to_vec(),
        };
        let action = Action {
            account: SYSTEM,
            name: SETCODE,
            authorization: vec![account],
            data: borsh::to_vec(&set).expect("encoding into a Vec cannot fail"),
        };
        self.push_actions(vec![action])
    }

    /// An action of `contract` named `action`, authorized by `signer`, with `data` encoded
    /// with borsh.
    pub fn action(
        signer: impl IntoName,
        contract: impl IntoName,
        action: impl IntoName,
        data: &impl BorshSerialize,
    ) -> Action {
        Self::raw_action(
            signer,
            contract,
            action,
            borsh::to_vec(data).expect("encoding into a Vec cannot fail"),
        )
    }

    /// [`TestChain::action`] with data as given.
    pub fn raw_action(
        signer: impl IntoName,
        contract: impl IntoName,
        action: impl IntoName,
        data: Vec<u8>,
    ) -> Action {
        Action {
            account: contract.into_name(),
            name: action.into_name(),
            authorization: vec![signer.into_name()],
            data,
        }
    }

    /// Pushes one action as `signer`, with `data` encoded with borsh, in a transaction and
    /// block of its own, and returns its receipt.
    ///
    /// # Panics
    /// If the transaction is not even included (see [`TestChain::push_actions`]).
    pub fn push(
        &mut self,
        signer: impl IntoName,
        contract: impl IntoName,
        action: impl IntoName,
        data: &impl BorshSerialize,
    ) -> TxReceipt {
        self.push_actions(vec![Self::action(signer, contract, action, data)])
    }

    /// [`TestChain::push`] with data as given (for contracts whose data is not borsh, or to
    /// send malformed data on purpose).
    pub fn push_raw(
        &mut self,
        signer: impl IntoName,
        contract: impl IntoName,
        action: impl IntoName,
        data: impl Into<Vec<u8>>,
    ) -> TxReceipt {
        self.push_actions(vec![Self::raw_action(
            signer,
            contract,
            action,
            data.into(),
        )])
    }

    /// Pushes `actions` as one transaction (all apply or none does), signed by every account
    /// that authorizes one of them, in a block of its own.
    ///
    /// # Panics
    /// If the transaction is rejected rather than included (an authorizing account the
    /// harness has no key for, say): the message says why.
    pub fn push_actions(&mut self, actions: Vec<Action>) -> TxReceipt {
        match self.push_block(vec![actions]).pop() {
            Some(TxResult::Included(receipt)) => receipt,
            Some(TxResult::Rejected(e)) => panic!("the transaction was rejected: {e}"),
            None => unreachable!("a block gives one result per transaction"),
        }
    }

    /// Pushes several transactions, each given as its actions, in one block, and returns
    /// what happened to each.
    pub fn push_block(&mut self, transactions: Vec<Vec<Action>>) -> Vec<TxResult> {
        let signed = transactions
            .into_iter()
            .map(|actions| self.transaction(actions))
            .collect();
        self.run_block(signed).results
    }

    /// Runs signed transactions (from [`TestChain::transaction`], or built by hand to test
    /// rejections) as the next block.
    pub fn run_block(&mut self, transactions: Vec<SignedTransaction>) -> ExecutedBlock {
        self.chain
            .run_block(transactions)
            .expect("a memory store cannot fail")
    }

    /// A transaction of `actions` for the next block, paid for by the first account that
    /// authorizes one (the system account if none does), signed by the payer and every
    /// account that authorizes one of them (those the harness has no key for are left
    /// unsigned).
    pub fn transaction(&mut self, actions: Vec<Action>) -> SignedTransaction {
        let (ref_block_num, ref_block_prefix) = self.chain.tapos();
        // Up to half the lifetime later than the shortest expiration: a different one for
        // each of many transactions, all within the lifetime a block accepts.
        let lifetime = self.chain.config().max_tx_lifetime_ms;
        let spread = (lifetime / 2).max(1);
        let expiration_ms =
            self.chain.next_block_time_ms() + lifetime - spread + self.built % spread;
        self.built += 1;
        let transaction =
            Transaction::new(expiration_ms, (ref_block_num, ref_block_prefix), actions);
        let mut signers: Vec<Name> = transaction.signers().collect();
        signers.sort();
        signers.dedup();
        let keys: Vec<(Name, &SigningKey)> = signers
            .into_iter()
            .filter_map(|s| Some((s, self.keys.get(&s)?)))
            .collect();
        SignedTransaction::sign(transaction, &keys)
    }

    /// The committed value of `contract`'s storage key `key`.
    pub fn get(&self, contract: impl IntoName, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.chain
            .get(contract.into_name(), key.as_ref())
            .expect("a memory store cannot fail")
    }

    /// The committed value of `contract`'s key `key`, decoded with borsh.
    ///
    /// # Panics
    /// If the value is not a `T`.
    pub fn get_as<T: BorshDeserialize>(
        &self,
        contract: impl IntoName,
        key: impl AsRef<[u8]>,
    ) -> Option<T> {
        let key = key.as_ref();
        let value = self.get(contract, key)?;
        Some(borsh::from_slice(&value).unwrap_or_else(|e| {
            panic!(
                "the value under key {} is not a {}: {e}",
                hex::encode(key),
                std::any::type_name::<T>()
            )
        }))
    }

    /// `account`'s balance in a token that keeps simplecoin's layout (contracts/simplecoin.c,
    /// contracts/token-rs): a little-endian u64 under the account's 8-byte name.
    pub fn balance(&self, contract: impl IntoName, account: impl IntoName) -> Option<u64> {
        self.get_as(contract, account.into_name().0.to_le_bytes())
    }
}

/// The harness's key of `account`.
fn key_of(account: Name) -> SigningKey {
    derived_key(KEY_SEED, account.0)
}
