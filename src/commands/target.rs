//! Where a signing command's transaction goes: a local chain (`--data DIR`), or a network
//! through one of its nodes (`--rpc URL`, signing with the keys of a wallet, `--wallet DIR`).
//!
//! A wallet is a directory holding `keystore.json` (account → secret key, as a data directory
//! keeps it) and `abi/NAME.json` (the ABIs of the contracts deployed with it). A local data
//! directory is one, and `tally devnet` makes its directory one, holding the key of the system
//! account `tally`. Keep one wallet per network: its ABIs are those of that network's
//! contracts.
//!
//! Over `--rpc`, a command signs with the wallet's keys, takes the reference block (TaPoS) and
//! the time from the node's head (ABCI query `head`), broadcasts a bundle of one transaction,
//! and waits for the block that commits it, reading the receipt back from the block's results
//! ([`crate::node::results`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ed25519_dalek::SigningKey;
use tally_chain::{Action, Name, SignedTransaction, Transaction, TxId};

use super::abi::Abi;
use super::local::{Keystore, Local, parse_name};
use super::receipt::Committed;
use crate::common::fs::write_atomic;
use crate::node::app::code;
use crate::node::bundle;
use crate::node::results::{BundleResult, events_of};
use crate::node::rpc::Rpc;

/// How long a transaction lives past the head block's time: a minute to be included, as a
/// local push allows; at most half of what the chain allows (`max_lifetime_ms`, 120 s by
/// default), so a node whose clock runs ahead still admits it.
pub const TX_LIFETIME_MS: u64 = 60_000;

/// Longest a command waits for its transaction's block after the node admitted it: blocks on
/// a 4-validator devnet come every 15-600 ms and committed transfers' p99 latency under load
/// was 1.9 s (README, "Run a 4-validator network"); a transaction not in a block after 30 s
/// waits on a network that is not making blocks.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between two looks at the node's height while waiting: blocks come every 10 ms at
/// the fastest (devnet's `timeout_commit`), so this adds at most 50 ms to the wait, for about
/// 20 small RPC calls a second.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A local chain or a network, for commands that sign and commit a transaction.
#[derive(Debug, clap::Args)]
pub struct Dest {
    /// The data directory of a local chain.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "rpc",
        conflicts_with = "rpc"
    )]
    pub data: Option<PathBuf>,
    /// Send the transaction to this node (CometBFT RPC) instead, and wait for its block.
    #[arg(long, value_name = "URL", requires = "wallet")]
    pub rpc: Option<String>,
    /// With --rpc: the wallet directory whose keys sign and where deployed contracts' ABIs are
    /// kept (a devnet's directory is one).
    #[arg(long, value_name = "DIR")]
    pub wallet: Option<PathBuf>,
}

/// A wallet directory: `keystore.json` and `abi/`.
pub struct Wallet {
    /// The directory.
    pub dir: PathBuf,
    /// Its keys.
    pub keystore: Keystore,
}

impl Wallet {
    /// Opens the wallet in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("keystore.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {}: a wallet is a directory with keystore.json (a devnet's \
                 directory, or a local chain's data directory)",
                path.display()
            )
        })?;
        let keystore = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid keystore", path.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            keystore,
        })
    }

    /// Writes its keystore back (owner-only permissions).
    pub fn save(&self) -> anyhow::Result<()> {
        write_atomic(
            &self.dir.join("keystore.json"),
            serde_json::to_string_pretty(&self.keystore)?.as_bytes(),
            0o600,
        )
    }
}

/// A network, reached through one node, and the wallet that signs for it.
pub struct Network {
    /// The node.
    pub rpc: Rpc,
    /// The wallet.
    pub wallet: Wallet,
    /// What its transactions offer to pay.
    pub offer: super::local::Offer,
}

/// A [`Dest`], opened.
pub enum Target {
    /// A local chain, open to push blocks.
    Local(Box<Local>),
    /// A network.
    Network(Network),
}

impl Dest {
    /// Opens the local chain, or the wallet for the node.
    pub fn open(&self) -> anyhow::Result<Target> {
        match (&self.rpc, &self.data, &self.wallet) {
            (Some(url), _, Some(wallet)) => Ok(Target::Network(Network {
                rpc: Rpc::new(url),
                wallet: Wallet::open(wallet)?,
                offer: Default::default(),
            })),
            (Some(_), _, None) => bail!(
                "--rpc signs with the keys of a wallet directory: add --wallet DIR (a devnet's \
                 directory is one: `--wallet ./net`)"
            ),
            (None, Some(dir), _) => Ok(Target::Local(Box::new(Local::open(dir)?))),
            (None, None, _) => bail!("give --data DIR, or --rpc URL and --wallet DIR"),
        }
    }
}

impl Target {
    /// The keys that sign.
    pub fn keystore(&mut self) -> &mut Keystore {
        match self {
            Target::Local(local) => &mut local.keystore,
            Target::Network(net) => &mut net.wallet.keystore,
        }
    }

    /// Writes the keystore back.
    pub fn save_keystore(&self) -> anyhow::Result<()> {
        match self {
            Target::Local(local) => local.save_keystore(),
            Target::Network(net) => net.wallet.save(),
        }
    }

    /// Where deployed contracts' ABIs are kept: the data directory's or the wallet's `abi/`.
    fn abi_dir(&self) -> PathBuf {
        match self {
            Target::Local(local) => local.dir.join("abi"),
            Target::Network(net) => net.wallet.dir.join("abi"),
        }
    }

    /// The sha256 of the code `account` runs, if any.
    pub fn code_hash(&self, account: Name) -> anyhow::Result<Option<[u8; 32]>> {
        match self {
            Target::Local(local) => Ok(local.chain.code_hash(account)?),
            Target::Network(net) => super::query::code_hash(&net.rpc, account),
        }
    }

    /// Whether `account` exists (has a registered key).
    pub fn account_exists(&self, account: Name) -> anyhow::Result<bool> {
        match self {
            Target::Local(local) => Ok(local.chain.account_key(account)?.is_some()),
            Target::Network(net) => super::state::account_exists(&net.rpc, account),
        }
    }

    /// Fails, saying what to do, unless `contract` runs a contract.
    pub fn require_contract(&self, contract: Name) -> anyhow::Result<()> {
        super::state::require_contract(contract, self.code_hash(contract)?.is_some(), || {
            self.account_exists(contract)
        })
    }

    /// Keeps the ABI of the contract just deployed to `account`, whose code has sha256
    /// `code_hash`, for later pushes and queries; or forgets an older one if it has none.
    pub fn save_abi(
        &self,
        account: Name,
        abi: Option<&[u8]>,
        code_hash: &[u8; 32],
    ) -> anyhow::Result<()> {
        save_abi(&self.abi_dir(), account, abi, code_hash)
    }

    /// The ABI to encode `contract`'s arguments with ([`find_abi`]).
    pub fn abi(&self, contract: Name, given: &[AbiFile]) -> anyhow::Result<Abi> {
        find_abi(&self.abi_dir(), contract, given, |c| self.code_hash(c))
    }

    /// `actions` as one transaction signed with the keys of `signers`, as [`Target::push`]
    /// would send it (`tally push --dry-run`).
    pub fn sign(
        &self,
        actions: Vec<Action>,
        signers: &[Name],
    ) -> anyhow::Result<SignedTransaction> {
        match self {
            Target::Local(local) => local.sign(actions, signers),
            Target::Network(net) => net.sign(actions, signers),
        }
    }

    /// Makes its transactions offer `offer` (payer, max fee, tip).
    pub fn set_offer(&mut self, offer: super::local::Offer) {
        match self {
            Target::Local(local) => local.offer = offer,
            Target::Network(net) => net.offer = offer,
        }
    }

    /// Signs `actions` with the keys of `signers`, commits them as one transaction, and
    /// returns its receipt. `Err` when it could not be committed: refused by the node,
    /// rejected by its block, or not in a block within [`COMMIT_TIMEOUT`].
    pub fn push(&mut self, actions: Vec<Action>, signers: &[Name]) -> anyhow::Result<Committed> {
        match self {
            Target::Local(local) => local.push(actions, signers),
            Target::Network(net) => net.push(actions, signers),
        }
    }
}

impl Network {
    /// `actions` referencing the node's head, signed with the wallet's keys of `signers`.
    fn sign(&self, actions: Vec<Action>, signers: &[Name]) -> anyhow::Result<SignedTransaction> {
        let head = self.rpc.head()?;
        let mut tx = Transaction::new(
            head.time_ms + TX_LIFETIME_MS.min(head.max_lifetime_ms / 2),
            (head.ref_block_num, head.ref_block_prefix),
            actions,
        );
        self.offer.apply(&mut tx);
        let keys = super::local::with_payer(signers, tx.payer)
            .iter()
            .map(|s| Ok((*s, self.wallet.keystore.key(*s)?)))
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| format!("wallet {}", self.wallet.dir.display()))?;
        let refs: Vec<(Name, &SigningKey)> = keys.iter().map(|(n, k)| (*n, k)).collect();
        // A signer whose committed key is the one that signs leaves it out (32 bytes less a
        // signature, issue 26); one the node does not know yet (an account created in this
        // transaction) carries it.
        let mut carry = Vec::new();
        for (name, key) in &keys {
            let registered = super::state::registered_key(&self.rpc, *name)?;
            if registered != Some(key.verifying_key().to_bytes()) {
                carry.push(*name);
            }
        }
        Ok(SignedTransaction::sign_with(tx, &refs, |n| {
            carry.contains(&n)
        }))
    }

    fn push(&mut self, actions: Vec<Action>, signers: &[Name]) -> anyhow::Result<Committed> {
        let names = actions.iter().map(|a| (a.account, a.name)).collect();
        let signed = self.sign(actions, signers)?;
        let id = signed.transaction.id();
        let bundle = bundle::join([signed.encode().as_slice()]);
        let hash = bundle::hash(&bundle);
        // The transaction cannot be in a block the node had finished before it arrived.
        let next = self.rpc.height()? + 1;
        let answer = self.rpc.broadcast(&bundle)?;
        if answer.code != code::OK {
            bail!(
                "{} refused transaction {} (CheckTx code {}): {}",
                self.rpc.url(),
                hex::encode(id),
                answer.code,
                answer.log
            );
        }
        match self.wait(id, &hash, next, names) {
            Ok(result) => result,
            Err(why) => Err(Unconfirmed {
                id: hex::encode(id),
                url: self.rpc.url().to_string(),
                why: format!("{why:#}"),
            }
            .into()),
        }
    }

    /// Reads the blocks from height `next` on until one holds the bundle `hash` (transaction
    /// `id`): `Ok` with its receipt, or with why its block rejected it; `Err` when nobody
    /// knows yet whether it committed.
    fn wait(
        &self,
        id: TxId,
        hash: &[u8; 32],
        mut next: u64,
        names: Vec<(Name, Name)>,
    ) -> anyhow::Result<anyhow::Result<Committed>> {
        let deadline = Instant::now() + COMMIT_TIMEOUT;
        loop {
            let tip = self.rpc.height()?;
            while next <= tip {
                let Some(results) = self.rpc.results(next)? else {
                    break;
                };
                if let Some(result) = results.into_iter().find(|r| r.data.starts_with(hash)) {
                    let summary = BundleResult::decode(&result.data)
                        .and_then(|b| b.txs.into_iter().next())
                        .with_context(|| {
                            format!("block {next}: the result of the bundle is not Tally's")
                        })?;
                    let events = events_of(&result.events, 0)?;
                    // CometBFT stores a block's results before the application commits it:
                    // wait for the commit, so what the command reports is what the node's
                    // queries now answer, and the next transaction references a newer block
                    // (the same actions signed twice on one head would be one transaction,
                    // and the second a duplicate).
                    while self.rpc.head()?.height < next {
                        if Instant::now() >= deadline {
                            bail!("block {next} holds it, but the node has not committed it");
                        }
                        std::thread::sleep(POLL_INTERVAL);
                    }
                    return Ok(match summary.into_receipt(id, events) {
                        Ok(receipt) => Ok(Committed::new(next, names, receipt)),
                        Err(reason) => Err(anyhow::anyhow!(
                            "transaction {} was rejected in block {next}: {reason}",
                            hex::encode(id)
                        )),
                    });
                }
                next += 1;
            }
            if Instant::now() >= deadline {
                bail!(
                    "it is in no block after {} s (up to height {}): is the network making blocks?",
                    COMMIT_TIMEOUT.as_secs(),
                    next - 1
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

/// A transaction the node admitted, of which it is not known whether it committed: the wait
/// timed out or the node stopped answering. It may still commit until it expires.
#[derive(Debug, thiserror::Error)]
#[error(
    "transaction {id} was admitted by {url}, but whether it committed is not known: {why}; it \
     may still commit until it expires: look for it with `tally tx {id} --rpc {url}`"
)]
pub struct Unconfirmed {
    /// The transaction id, hex.
    pub id: String,
    /// The node.
    pub url: String,
    /// What went wrong while waiting.
    pub why: String,
}

/// An ABI file named on the command line: `--abi PATH` (for the one contract a command
/// touches) or `--abi CONTRACT=PATH`.
#[derive(Debug, Clone)]
pub struct AbiFile {
    /// The contract it is for; `None` for a bare path.
    pub contract: Option<Name>,
    /// The file.
    pub path: PathBuf,
}

impl std::str::FromStr for AbiFile {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s.split_once('=') {
            Some((contract, path)) => Ok(Self {
                contract: Some(parse_name(contract)?),
                path: path.into(),
            }),
            None => Ok(Self {
                contract: None,
                path: s.into(),
            }),
        }
    }
}

/// The file beside an ABI in `abi/` that records the sha256 of the code it was deployed
/// with, hex.
fn code_file(dir: &Path, account: Name) -> PathBuf {
    dir.join(format!("{account}.code"))
}

fn save_abi(
    dir: &Path,
    account: Name,
    abi: Option<&[u8]>,
    code_hash: &[u8; 32],
) -> anyhow::Result<()> {
    let path = dir.join(format!("{account}.json"));
    match abi {
        Some(bytes) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            write_atomic(&path, bytes, 0o644)?;
            write_atomic(
                &code_file(dir, account),
                hex::encode(code_hash).as_bytes(),
                0o644,
            )
        }
        // New code without an ABI: the old ABI describes other code.
        None => {
            for stale in [path, code_file(dir, account)] {
                match std::fs::remove_file(&stale) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing {}", stale.display()));
                    }
                    _ => {}
                }
            }
            Ok(())
        }
    }
}

/// The ABI of `contract`: the one given for it on the command line (`--abi CONTRACT=PATH`,
/// or a bare `--abi PATH` when it is the only one given), else the one kept in `dir` when it
/// was deployed, provided the contract still runs the code it was kept for (`code_hash`).
pub fn find_abi(
    dir: &Path,
    contract: Name,
    given: &[AbiFile],
    code_hash: impl Fn(Name) -> anyhow::Result<Option<[u8; 32]>>,
) -> anyhow::Result<Abi> {
    let named = given.iter().find(|a| a.contract == Some(contract));
    let bare = match given {
        [one] if one.contract.is_none() => Some(one),
        _ => None,
    };
    if let Some(file) = named.or(bare) {
        return Abi::read(&file.path);
    }
    if let Some(file) = given.iter().find(|a| a.contract.is_none()) {
        bail!(
            "--abi {} names no contract, and several ABIs are given: write --abi CONTRACT=PATH",
            file.path.display()
        );
    }
    let path = dir.join(format!("{contract}.json"));
    if !path.exists() {
        let on_chain = code_hash(contract)?;
        bail!(
            "no ABI for {contract} in {}: {}",
            dir.display(),
            match on_chain {
                None => format!(
                    "{contract} runs no contract (deploy one with `tally deploy {contract} FILE`)"
                ),
                Some(_) => "pass --abi PATH (the .abi.json beside its .wasm), deploy it with its \
                            ABI, or pass --data-hex"
                    .to_string(),
            }
        );
    }
    if let Ok(kept) = std::fs::read_to_string(code_file(dir, contract)) {
        let now = code_hash(contract)?.map(hex::encode);
        if now.as_deref() != Some(kept.trim()) {
            bail!(
                "the ABI kept in {} is for the code {contract} ran when it was deployed ({}), \
                 but it now runs {}: pass --abi PATH for the code it runs now",
                path.display(),
                &kept.trim()[..kept.trim().len().min(16)],
                now.map_or("no contract".to_string(), |h| h[..16].to_string())
            );
        }
    }
    Abi::read(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        s.parse().unwrap()
    }

    const ABI: &str = r#"{ "actions": { "hit": [{ "name": "who", "type": "name" }] } }"#;

    #[test]
    fn a_kept_abi_is_used_only_while_the_contract_runs_the_code_it_was_kept_for() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("abi");
        let hash = [1u8; 32];
        save_abi(&dir, name("counter"), Some(ABI.as_bytes()), &hash).unwrap();
        let found = find_abi(&dir, name("counter"), &[], |_| Ok(Some(hash))).unwrap();
        assert!(found.actions.contains_key("hit"));
        let err = find_abi(&dir, name("counter"), &[], |_| Ok(Some([2u8; 32]))).unwrap_err();
        assert!(format!("{err:#}").contains("pass --abi PATH"), "{err:#}");
        // Deployed again without an ABI: the old one is forgotten.
        save_abi(&dir, name("counter"), None, &[2u8; 32]).unwrap();
        let err = find_abi(&dir, name("counter"), &[], |_| Ok(Some([2u8; 32]))).unwrap_err();
        assert!(format!("{err:#}").contains("no ABI for counter"), "{err:#}");
    }

    #[test]
    fn a_missing_abi_says_whether_the_account_runs_a_contract() {
        let tmp = tempfile::tempdir().unwrap();
        let err = find_abi(tmp.path(), name("nobody"), &[], |_| Ok(None)).unwrap_err();
        assert!(format!("{err:#}").contains("runs no contract"), "{err:#}");
        let err = find_abi(tmp.path(), name("coin"), &[], |_| Ok(Some([0; 32]))).unwrap_err();
        assert!(format!("{err:#}").contains("--abi PATH"), "{err:#}");
    }

    #[test]
    fn abi_files_on_the_command_line_go_to_their_contracts() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("x.abi.json");
        std::fs::write(&file, ABI).unwrap();
        let bare: AbiFile = file.to_str().unwrap().parse().unwrap();
        let named: AbiFile = format!("coin={}", file.display()).parse().unwrap();
        let none = |_| Ok(None);
        assert!(find_abi(tmp.path(), name("any"), std::slice::from_ref(&bare), none).is_ok());
        assert!(find_abi(tmp.path(), name("coin"), std::slice::from_ref(&named), none).is_ok());
        let err = find_abi(tmp.path(), name("any"), &[bare, named], none).unwrap_err();
        assert!(format!("{err:#}").contains("CONTRACT=PATH"), "{err:#}");
    }
}
