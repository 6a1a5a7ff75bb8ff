//! The node's mempool: what it knows of the bundles in CometBFT's mempool and in the block
//! being decided. A bundle is decoded once, where it first arrives (CheckTx, or
//! ProcessProposal for one this node never saw), and its verified transactions are kept until
//! FinalizeBlock takes them into the block: FinalizeBlock decodes again only what it has not
//! seen.
//!
//! Admission applies the chain's own rules, at the time the next block has at the earliest
//! (the last block's time + 1 ms: CometBFT's block times increase by at least a millisecond,
//! and `Ledger::execute` enforces it). A transaction is valid in a block at time `T` while
//! `T < expiration_ms <= T + max_lifetime_ms` (chain/src/phase/validate.rs), so a bundle is
//! refused when one of its transactions could not be included in the next block: expired, or
//! expiring further ahead than a transaction may live.
//!
//! Fees: the pool keeps, per account, what its pending transactions (admitted, not yet
//! committed) may spend of its native balance, their max fees and their native transfers out
//! of it ([`asked`]), and refuses a bundle whose accounts' committed native balances cannot
//! cover what they already have pending plus what the bundle asks: one account cannot queue
//! more than it can pay for (the block would reject the excess with `TxError::CannotPay`),
//! nor move away, in one transaction, the coins the others' fees need. An account's entry
//! lives exactly as long as one of its bundles does, so the map is bounded by the pool.
//! Committed balances only change at commit: the pool keeps each pending account's balance
//! as read at a height, and asks for it again after a commit.

use std::collections::{BTreeMap, HashSet, VecDeque};

use prost::bytes::Bytes;
use tally_chain::crypto::{self, KeySource, Need};
use tally_chain::phase::validate::check_expiration;
use tally_chain::{Check, Name, PreparedTx, SignedTransaction, TxError, TxId};

use super::app::code;
use super::bundle;
use super::ledger::{TxFacts, facts};

/// Maps keyed by bundle hashes and transaction ids, which senders choose: a seeded hash, so
/// none can send bundles that collide in them.
type KeyedMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// How much later than the last block the next block is, at the least: CometBFT's block times
/// increase by at least a millisecond (its votes' times are the parent's time + 1 ms at the
/// earliest), and the ledger keeps them increasing (`Ledger::execute`).
const MIN_BLOCK_STEP_MS: u64 = 1;

/// How many blocks ahead of this node's head a transaction's reference block may be and still
/// be admitted, to wait in the pool for this node to commit it. A client takes its reference
/// from whichever node it asks (`tally load` asks one validator and sends to all), and a
/// validator in step with the network is a block or two behind the others at most; one
/// further behind is catching up, and refusing until then costs the sender a resend. A
/// reference no block up to this far ahead can match is refused: the block would reject its
/// transaction for no fee (`TxError::UnknownReferenceBlock`).
pub const MAX_REFERENCE_LEAD: u16 = 16;

/// The most transaction bytes the pool keeps in bundles waiting for a reference block
/// ([`awaitable`]): 32 MiB, about 200,000 signed transfers of 165 bytes, five one-second
/// blocks at the highest rate one devnet validator commits here (40,163 transfers a second).
/// A validator in step waits for a block or two at most. A waiting bundle whose reference
/// never comes leaves the pool without paying anything (the chain would reject it for no
/// fee), so this room is what anyone can fill for free, for the max fees it reserves while
/// it waits; when it is full a bundle that would wait is refused with `code::TRY_LATER`, and
/// nothing else is.
pub const MAX_AWAITING_BYTES: usize = 32 << 20;

/// The most of [`MAX_AWAITING_BYTES`] one payer's transactions may take: a sixty-fourth,
/// 512 KiB, about 3,200 transfers, so that no one payer fills the room alone.
pub const MAX_AWAITING_BYTES_PER_PAYER: usize = MAX_AWAITING_BYTES / 64;

/// The least room a waiting bundle takes, however small: 64 KiB, so that at most 512 bundles
/// wait, a tenth of the 5,000 CometBFT's mempool holds by default (`mempool.size`), and at
/// most 8 that one payer alone pays for. CometBFT counts a bundle as one transaction whatever
/// its size, so without it small waiting bundles could fill its mempool for free. The payers
/// who named its blocks pay what a bundle lacks of it ([`waiting_bytes`]); a bundle of a
/// thousand transfers is larger anyway.
pub const MIN_AWAITING_BUNDLE_BYTES: usize = MAX_AWAITING_BYTES / 512;

/// How many blocks a payer's transactions may not wait for a reference block after one of
/// them named a block that never came (another block took its height): 600, ten minutes of
/// one-second blocks. CometBFT's blocks are final, so a reference a client took from a node
/// that committed it always comes; one that does not was made up, and its payer signed it.
/// Without this, 64 funded payers could keep the room for waiting bundles full for ever, for
/// the max fees they reserve; with it, each may fill its share once in 600 blocks.
pub const SUSPENDED_BLOCKS: u64 = 600;

/// The most payers suspended at once ([`SUSPENDED_BLOCKS`]): 65,536, about 2 MiB. When it is
/// full, no bundle waits: one that would is refused (`code::TRY_LATER`), as if the room were
/// full, rather than its payers escaping suspension.
pub const MAX_SUSPENDED_PAYERS: usize = 1 << 16;

/// The most claims the pool keeps that a block will come ([`Mempool::claims`]): 262,144, about
/// 8 MiB, more than the waiting room holds transactions (32 MiB of transfers of 165 bytes is
/// about 203,000). A claim outlives its bundle until its height is committed, so that a bundle
/// that leaves first (expired, displaced) does not take its payer's claim with it; a payer
/// has at most one a height, so at most [`MAX_REFERENCE_LEAD`] at once, and filling them
/// takes 16,384 funded payers. When they are full, no more bundles wait.
pub const MAX_CLAIMS: usize = 1 << 18;

/// What admission makes of a transaction's reference block `(num, prefix)` that the committed
/// window does not know, at head `head_height`: `Ok` when `num` names a block up to
/// [`MAX_REFERENCE_LEAD`] ahead, which the pool waits for; else the chain's error.
pub fn awaitable(num: u16, prefix: u32, head_height: u64) -> Result<(), TxError> {
    if within_lead(num, head_height) {
        Ok(())
    } else {
        Err(TxError::UnknownReferenceBlock { num, prefix })
    }
}

/// How many blocks after `head_height` block number `num` (a height's low 16 bits) may be:
/// `None` when it is at or before the head, on the nearer reading of the wrapping numbers
/// (within 32,767 blocks). A reference further ahead than [`MAX_REFERENCE_LEAD`] does not
/// wait, but the node that refuses it may be the one behind: the refusal says so, and that a
/// resend may be admitted (`code::TRY_LATER`). One at or behind the head that the committed
/// window does not know never will be.
pub fn blocks_ahead(num: u16, head_height: u64) -> Option<u16> {
    let ahead = num.wrapping_sub(head_height as u16);
    (1..0x8000).contains(&ahead).then_some(ahead)
}

/// Whether block number `num` (a height's low 16 bits) is 1 to [`MAX_REFERENCE_LEAD`] blocks
/// after `head_height`.
fn within_lead(num: u16, head_height: u64) -> bool {
    (1..=MAX_REFERENCE_LEAD).contains(&num.wrapping_sub(head_height as u16))
}

/// Why a bundle is refused: a CheckTx code (`app::code`) and a log for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The CheckTx code.
    pub code: u32,
    /// What to tell the sender.
    pub log: String,
}

impl Refusal {
    /// A refusal with result code `code` (`super::app::code`) and `log` for the client.
    pub fn new(code: u32, log: impl Into<String>) -> Self {
        Self {
            code,
            log: log.into(),
        }
    }
}

/// Splits and decodes a bundle: each transaction within Tally's size and structure limits,
/// signatures not yet verified. The one decoder of CheckTx and ProcessProposal.
pub fn decode(bytes: &[u8]) -> Result<Vec<PreparedTx>, Refusal> {
    let parts =
        bundle::split(bytes).map_err(|e| Refusal::new(code::MALFORMED_BUNDLE, e.to_string()))?;
    parts
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            PreparedTx::decode(b)
                .map_err(|e| Refusal::new(code::REFUSED, format!("transaction {i}: {e}")))
        })
        .collect()
}

/// Verifies every signature of `txs` in one batched call, one without its key against the
/// key `keys` gives (the committed state's: [`super::ledger::Ledger::committed_keys_of`]): the
/// first refusal, if any.
///
/// A signature without its key must verify under the committed key of its account, which must
/// exist, in CheckTx and in ProcessProposal alike. The pool admits nothing that only a pending
/// block could make valid, and a committed key never changes (there is no action that
/// re-keys an account), so an honest proposal never carries such a signature. Accepting one
/// would let a proposer fill its block with signatures every node must verify again, one at a
/// time, at execution (an account created earlier in the block has no batched check). A
/// node that executes a block it did not vote on still applies the chain's rule there.
///
/// A signature that carries its key must carry its account's committed key, for the same
/// reason: one that differs can never pass execution ([`TxError::WrongKey`]), and one of an
/// account that does not exist yet only a pending block could make valid. A transaction
/// rejected at execution pays no fee, so without this check a funded payer could have every
/// block carry transactions that cost it nothing (a second signer with a key of its own
/// choosing). It needs state only, so it runs before any signature is verified: a bundle
/// refused by it costs no verification.
///
/// Verification stops at the first transaction it refuses ([`Need::UpToFirstInvalid`]): one
/// refuses the whole bundle (or proposal), and a bundle of invalid signatures, which anyone
/// can send for free, then costs about two batch checks to refuse, not a single check of
/// each signature.
pub fn verify(txs: &mut [PreparedTx], keys: &dyn KeySource) -> Result<(), Refusal> {
    // Keys before signatures: nothing after the first transaction refused for its keys is
    // verified.
    let mut end = txs.len();
    for (i, t) in txs.iter_mut().enumerate() {
        if t.check != Check::Admitted {
            continue;
        }
        if let Some(e) = carried_key_refusal(&t.tx, keys) {
            t.check = Check::Refused(e);
            end = i;
            break;
        }
    }
    tally_chain::pipeline::verify_batched(&mut txs[..end], keys, Need::UpToFirstInvalid);
    let refusal = |t: &PreparedTx| -> Option<TxError> {
        match &t.check {
            Check::Refused(e) => Some(e.clone()),
            // What the batch left to execution: no committed key, or not valid under it.
            _ => t
                .keys
                .iter()
                .zip(&t.tx.signatures)
                .find(|(key, _)| key.is_none())
                .map(|(_, sig)| match keys.registered_key(sig.account) {
                    None => TxError::UnknownAccount(sig.account),
                    Some(_) => TxError::BadSignature(sig.account),
                }),
        }
    };
    // Transactions still `Admitted` come after the first refusal, unchecked.
    match txs
        .iter()
        .take_while(|t| t.check != Check::Admitted)
        .enumerate()
        .find_map(|(i, t)| refusal(t).map(|e| (i, e)))
    {
        Some((i, e)) => Err(Refusal::new(code::REFUSED, format!("transaction {i}: {e}"))),
        None => Ok(()),
    }
}

/// Why a signature of `tx` that carries its key cannot be admitted, if one cannot: its
/// account has no committed key, or another one (the chain's rule, [`crypto::required_key`],
/// against committed keys).
fn carried_key_refusal(tx: &SignedTransaction, keys: &dyn KeySource) -> Option<TxError> {
    tx.signatures
        .iter()
        .filter(|sig| sig.public_key.is_some())
        .find_map(|sig| crypto::required_key(sig, keys.registered_key(sig.account)).err())
}

/// What a bundle may spend of each account's native balance: the max fees of the
/// transactions it pays for, and the coins its native transfers move out of it
/// ([`tally_chain::system::native_spend`]; only one the account signed counts, so nobody can
/// charge another's balance in the pool). A `BTreeMap`: its order, the refusal's wording,
/// does not depend on a hash seed.
///
/// Transfers count because a transaction whose payer an earlier one in the block drained is
/// rejected without a fee (`TxError::CannotPay`): counting fees alone, a payer could move its
/// coins away in one transaction and have the others of the block carried, verified and
/// rejected by every node for nothing.
pub fn asked(txs: &[PreparedTx]) -> BTreeMap<Name, u64> {
    let mut asked = BTreeMap::new();
    let mut spend = |account: Name, coins: u64| {
        let sum: &mut u64 = asked.entry(account).or_default();
        *sum = sum.saturating_add(coins);
    };
    for t in txs {
        let tx = &t.tx.transaction;
        spend(tx.payer, tx.max_fee);
        for (from, amount) in tx
            .actions
            .iter()
            .filter_map(tally_chain::system::native_spend)
        {
            spend(from, amount);
        }
    }
    asked
}

/// Which bundles of a proposal, in its order, the committed `balances` cover: each asks
/// ([`asked`]) at most what the bundles taken before it left of each account. A bundle
/// without what it asks (`None`), or asking of an account `balances` lacks, is not covered.
/// The sum rule holds for any subset taken later, in any order: what a transaction spends
/// of a balance is at most its max fee and the transfers it signed, and incoming coins only
/// add.
pub fn affordable(
    asked: &[Option<&BTreeMap<Name, u64>>],
    mut balances: BTreeMap<Name, u64>,
) -> Vec<bool> {
    asked
        .iter()
        .map(|asked| {
            let Some(asked) = asked else {
                return false;
            };
            let covered = asked
                .iter()
                .all(|(a, wants)| balances.get(a).is_some_and(|has| has >= wants));
            if covered {
                for (a, wants) in *asked {
                    *balances.get_mut(a).expect("covered") -= wants;
                }
            }
            covered
        })
        .collect()
}

/// The tips a bundle offers, summed: what PrepareProposal ranks it by, per byte.
pub fn tips(txs: &[PreparedTx]) -> u64 {
    txs.iter()
        .map(|t| t.tx.transaction.tip)
        .fold(0, u64::saturating_add)
}

/// What a transaction offers for its fee, kept while it waits: its signed size and its max
/// fee, all that the chain's max-fee rule reads ([`tally_chain::fee::check_max_fee_of`]), so
/// the pool can apply the rule again at every block's prices without the transaction.
#[derive(Debug, Clone, Copy)]
struct Offer {
    bytes: u64,
    max_fee: u64,
}

impl Offer {
    fn of(t: &PreparedTx) -> Self {
        Self {
            bytes: t.bytes.len() as u64,
            max_fee: t.tx.transaction.max_fee,
        }
    }
}

/// The first of `offers` whose max fee cannot pay for its own size and intrinsic fuel at
/// `prices`, as a refusal: what the chain rejects with `TxError::MaxFeeTooLow`.
fn underpaid(
    prices: &tally_chain::fee::Prices,
    offers: impl IntoIterator<Item = Offer>,
) -> Result<(), Refusal> {
    for (i, o) in offers.into_iter().enumerate() {
        if let Err(e) = tally_chain::fee::check_max_fee_of(prices, o.bytes, o.max_fee) {
            return Err(Refusal::new(
                code::MAX_FEE_TOO_LOW,
                format!("transaction {i}: {e}"),
            ));
        }
    }
    Ok(())
}

/// A payer with pending transactions.
#[derive(Debug, Clone, Copy, Default)]
struct Payer {
    /// The sum of the max fees of its pending transactions.
    pending: u64,
    /// How many pooled bundles it pays in: the entry leaves with the last.
    bundles: u32,
    /// The bytes of its transactions in bundles that wait for a reference block.
    awaiting_bytes: usize,
    /// Its committed native balance and the height it was read at.
    balance: Option<(u64, u64)>,
}

/// A bundle that passed CheckTx and is in CometBFT's mempool.
struct Pooled {
    ids: Vec<TxId>,
    /// The earliest expiration among its transactions: it leaves once a block reaches it.
    expires_ms: u64,
    /// Its verified transactions, until FinalizeBlock takes them.
    txs: Option<Vec<PreparedTx>>,
    /// What each of its payers may spend on it ([`asked`]).
    asked: BTreeMap<Name, u64>,
    /// Its transactions' tips summed ([`tips`]).
    tips: u64,
    /// What each of its transactions offers for its fee, in order.
    offers: Vec<Offer>,
    /// The reference blocks its transactions name, sorted, once each: a commit of another
    /// block at one's number makes it one the chain can never take ([`Mempool::committed`]).
    refs: Vec<(u16, u32)>,
}

/// How many commits the pool remembers what they included ([`Mempool::recent`]): a bundle
/// whose admission read committed state more commits ago than this is refused with
/// `code::TRY_LATER` rather than checked against them. Admission reads state, verifies the
/// bundle's signatures (milliseconds) and then takes the pool's lock, so one commit between
/// is common under load and several are rare; four cost at most four blocks' ids (about 1.3
/// MiB for blocks of 10,000 transactions).
const RECENT_COMMITS: usize = 4;

/// One of the last commits, as admission checks a bundle against it ([`Mempool::recent`]).
struct RecentCommit {
    height: u64,
    /// The new head's `(ref_block_num, ref_block_prefix)`.
    reference: (u16, u32),
    /// The ids of the transactions it included, sorted.
    included: Vec<TxId>,
}

/// A pooled bundle that waits for reference blocks this node has not committed.
struct Waiting {
    /// The references it waits for, sorted, once each.
    refs: Vec<(u16, u32)>,
    /// The room it takes, by payer ([`waiting_bytes`]).
    bytes: BTreeMap<Name, usize>,
}

/// The payers of the transactions of `txs` that name a reference block of `awaited` (sorted),
/// with that reference, sorted, once each: who signed for a block that may never come.
fn namers(txs: &[PreparedTx], awaited: &[(u16, u32)]) -> Vec<((u16, u32), Name)> {
    let mut namers: Vec<((u16, u32), Name)> = txs
        .iter()
        .map(|t| {
            let tx = &t.tx.transaction;
            ((tx.ref_block_num, tx.ref_block_prefix), tx.payer)
        })
        .filter(|(r, _)| awaited.binary_search(r).is_ok())
        .collect();
    namers.sort_unstable();
    namers.dedup();
    namers
}

/// What a bundle of `txs` that waits takes of the room for waiting bundles
/// ([`MAX_AWAITING_BYTES`]), by payer: each payer the signed bytes of its own transactions,
/// and the payers who named a block it waits for (`namers`, the payers a made-up reference
/// suspends) what the bundle lacks of [`MIN_AWAITING_BUNDLE_BYTES`], shared. Each payer pays
/// for its own: copying another's waiting transaction into a bundle does not spend its room.
fn waiting_bytes(txs: &[PreparedTx], namers: &[((u16, u32), Name)]) -> BTreeMap<Name, usize> {
    let mut bytes: BTreeMap<Name, usize> = BTreeMap::new();
    for t in txs {
        *bytes.entry(t.tx.transaction.payer).or_default() += t.bytes.len();
    }
    let total: usize = bytes.values().sum();
    let mut short: Vec<Name> = namers.iter().map(|&(_, p)| p).collect();
    if short.is_empty() {
        // Not a bundle that waits: all its payers share the floor.
        short = bytes.keys().copied().collect();
    }
    short.sort_unstable();
    short.dedup();
    let share = MIN_AWAITING_BUNDLE_BYTES
        .saturating_sub(total)
        .div_ceil(short.len().max(1));
    for p in short {
        *bytes.entry(p).or_default() += share;
    }
    bytes
}

/// The bundles this node verified and has not yet seen committed.
#[derive(Default)]
pub struct Mempool {
    /// Verified bundles in CometBFT's mempool, by CometBFT hash.
    bundles: KeyedMap<[u8; 32], Pooled>,
    /// Ids of the transactions in them.
    ids: KeyedMap<TxId, [u8; 32]>,
    /// The payers of their transactions: at most one entry per transaction in the pool.
    payers: KeyedMap<Name, Payer>,
    /// Pooled bundles with a transaction whose reference block this node had not committed
    /// when it admitted them ([`awaitable`]), and those references: PrepareProposal leaves
    /// them out until the head is each one; a commit of another block at its height drops
    /// the bundle.
    awaiting: KeyedMap<[u8; 32], Waiting>,
    /// The bytes of the transactions of the bundles in `awaiting`: at most
    /// [`MAX_AWAITING_BYTES`].
    awaiting_bytes: usize,
    /// Payers whose transactions may not wait for a reference block before the head reaches
    /// the height given ([`SUSPENDED_BLOCKS`]): at most [`MAX_SUSPENDED_PAYERS`].
    suspended: KeyedMap<Name, u64>,
    /// Claims that a block will come: by the height a waiting bundle's transaction named, its
    /// payer and the prefix it named (one per payer and height: an honest payer names the one
    /// block there is). The commit of that height suspends the payers of the
    /// prefixes it is not, whatever became of their bundles meanwhile; a jump of the head
    /// (a restored snapshot) forgets them. At most [`MAX_CLAIMS`], counted in `claim_count`.
    claims: BTreeMap<u64, BTreeMap<Name, u32>>,
    claim_count: usize,
    /// Bundles of the proposal being decided that ProcessProposal verified (not in the
    /// mempool), for FinalizeBlock.
    proposed: KeyedMap<[u8; 32], Vec<PreparedTx>>,
    /// Last committed block's height and time, and the longest transaction lifetime.
    head_height: u64,
    head_time_ms: u64,
    max_lifetime_ms: u64,
    /// `(ref_block_num, ref_block_prefix)` of the blocks the last commits set as the head,
    /// newest last, at most [`MAX_REFERENCE_LEAD`]: blocks a bundle admitted across those
    /// commits may name as ahead.
    recent_heads: VecDeque<(u16, u32)>,
    /// The last [`RECENT_COMMITS`] commits, oldest first: what a bundle admission checked
    /// against an older head is checked against too.
    recent: VecDeque<RecentCommit>,
    /// The next block's fee prices (zero before the first block is known).
    prices: tally_chain::fee::Prices,
}

impl Mempool {
    /// An empty mempool over a chain whose last block has height `head_height` and time
    /// `head_time_ms`, and whose next block's fee prices are `prices`.
    pub fn new(
        head_height: u64,
        head_time_ms: u64,
        max_lifetime_ms: u64,
        prices: tally_chain::fee::Prices,
    ) -> Self {
        Self {
            head_height,
            head_time_ms,
            max_lifetime_ms,
            prices,
            ..Self::default()
        }
    }

    /// The time the chain's rules are applied at: the next block's, at the earliest.
    fn next_block_ms(&self) -> u64 {
        self.head_time_ms + MIN_BLOCK_STEP_MS
    }

    /// The checks that need the mempool but no signature: expiration, a max fee that cannot
    /// pay for the transaction's own size and intrinsic fuel at the next block's prices (the
    /// chain would reject it: `TxError::MaxFeeTooLow`), and duplicates (within the bundle and
    /// against the mempool, but for bundles waiting for a reference block, which a bundle
    /// that does not wait displaces: [`Mempool::admit_awaiting`]). Run before verification,
    /// so a flood of stale, unpaid or duplicate bundles costs none.
    pub fn screen(&self, txs: &[PreparedTx]) -> Result<(), Refusal> {
        let time_ms = self.next_block_ms();
        let mut seen = HashSet::with_capacity(txs.len());
        for (i, t) in txs.iter().enumerate() {
            if let Err(e) = check_expiration(
                t.tx.transaction.expiration_ms,
                time_ms,
                self.max_lifetime_ms,
            ) {
                // Expiring too far ahead of this node's clock is valid later, or now on a node
                // that is not behind.
                let code = match e {
                    TxError::ExpirationTooFar { .. } => code::TRY_LATER,
                    _ => code::EXPIRED,
                };
                return Err(Refusal::new(code, format!("transaction {i}: {e}")));
            }
            if let Err(e) = tally_chain::fee::check_max_fee(&self.prices, t) {
                return Err(Refusal::new(
                    code::MAX_FEE_TOO_LOW,
                    format!("transaction {i}: {e}"),
                ));
            }
            let held = self
                .ids
                .get(&t.id)
                .is_some_and(|h| !self.awaiting.contains_key(h));
            if !seen.insert(t.id) || held {
                return Err(Refusal::new(
                    code::DUPLICATE,
                    format!(
                        "transaction {i}: duplicate transaction {}: it is already in the mempool",
                        hex::encode(t.id)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The payers among `asked` whose committed balance the pool does not know at its head:
    /// what the caller must read ([`Balances`]) before [`Mempool::admit`] or
    /// [`Mempool::recheck`].
    pub fn unknown_balances<'a>(&self, asked: impl IntoIterator<Item = &'a Name>) -> Vec<Name> {
        asked
            .into_iter()
            .filter(|p| self.fresh_balance(p).is_none())
            .copied()
            .collect()
    }

    /// The payers of the pooled bundle `hash` whose balance the pool does not know at its
    /// head; `None` if the bundle is not pooled.
    pub fn unknown_balances_of(&self, hash: &[u8; 32]) -> Option<Vec<Name>> {
        let p = self.bundles.get(hash)?;
        Some(self.unknown_balances(p.asked.keys()))
    }

    fn fresh_balance(&self, payer: &Name) -> Option<u64> {
        match self.payers.get(payer)?.balance {
            Some((balance, at)) if at == self.head_height => Some(balance),
            _ => None,
        }
    }

    /// `payer`'s committed balance and the height it is known at: as known at the head, else
    /// as just read, else as known at an older height (a commit came between the read and
    /// this call: the block re-checks it, `TxError::CannotPay`), else none (0).
    fn balance_of(&mut self, payer: Name, read: &Balances) -> (u64, u64) {
        if let Some(b) = self.fresh_balance(&payer) {
            return (b, self.head_height);
        }
        let known = self.payers.get(&payer).and_then(|p| p.balance);
        match read.balances.get(&payer) {
            Some(&b) if known.is_none_or(|(_, at)| at <= read.height) => {
                if let Some(p) = self.payers.get_mut(&payer) {
                    p.balance = Some((b, read.height));
                }
                (b, read.height)
            }
            _ => known.unwrap_or((0, 0)),
        }
    }

    /// Keeps the balances of `read` of the accounts the pool has pending, as
    /// [`Mempool::balance_of`] would: what PrepareProposal read, so that CometBFT's recheck
    /// after the commit need not read them again.
    pub fn learn(&mut self, read: &Balances) {
        for &payer in read.balances.keys() {
            if self.payers.contains_key(&payer) {
                self.balance_of(payer, read);
            }
        }
    }

    /// Admits a verified bundle whose reference blocks are all committed:
    /// [`Mempool::admit_awaiting`] with none awaited.
    #[cfg(test)]
    fn admit(
        &mut self,
        hash: [u8; 32],
        txs: Vec<PreparedTx>,
        read: &Balances,
    ) -> Result<(), Refusal> {
        self.admit_now(hash, txs, read, Vec::new())
    }

    /// [`Mempool::admit_awaiting`] of a bundle whose admission read committed state at the
    /// pool's head.
    #[cfg(test)]
    fn admit_now(
        &mut self,
        hash: [u8; 32],
        txs: Vec<PreparedTx>,
        read: &Balances,
        awaited: Vec<(u16, u32)>,
    ) -> Result<(), Refusal> {
        let head = self.head_height;
        self.admit_awaiting(hash, txs, read, awaited, head)
    }

    /// Admits a verified bundle that waits for the reference blocks `awaited` (those of its
    /// transactions this node has not committed yet, [`awaitable`]; none: it may be proposed
    /// now), unless a transaction of it arrived meanwhile in another, or a payer's committed
    /// balance (as known, or `read`) cannot cover its pending max fees plus this bundle's.
    /// Admission checked its references and duplicates against committed state at height
    /// `checked_at`; the commits since, which the pool saw and the bundle did not, are checked
    /// here ([`Mempool::check_since`]).
    ///
    /// The bundles that hold a transaction of it give way ([`Mempool::may_wait`]), once it is
    /// admitted: what they asked of their payers, and the room they took waiting, is counted
    /// as free for it.
    pub fn admit_awaiting(
        &mut self,
        hash: [u8; 32],
        txs: Vec<PreparedTx>,
        read: &Balances,
        awaited: Vec<(u16, u32)>,
        checked_at: u64,
    ) -> Result<(), Refusal> {
        if checked_at < self.head_height {
            self.check_since(&txs, &awaited, checked_at)?;
        }
        let awaited = self.still_ahead(awaited);
        if let Some(&(num, _)) = awaited
            .iter()
            .find(|&&(num, _)| !within_lead(num, self.head_height))
        {
            // Committed since admission read the state, and not the block it names.
            return Err(Refusal::new(
                code::TRY_LATER,
                format!(
                    "a transaction names block number {num}, which this node committed another \
                     block at since the bundle arrived; send it again"
                ),
            ));
        }
        let displaced = self.may_wait(&txs, &awaited)?;
        let asked = asked(&txs);
        let mut balances = Vec::with_capacity(asked.len());
        for (&payer, &wants) in &asked {
            let (balance, at) = self.balance_of(payer, read);
            let freed: u64 = displaced
                .iter()
                .filter_map(|h| self.bundles.get(h)?.asked.get(&payer))
                .sum();
            let pending = self
                .payers
                .get(&payer)
                .map_or(0, |p| p.pending)
                .saturating_sub(freed);
            if pending.saturating_add(wants) > balance {
                return Err(Refusal::new(
                    code::CANNOT_PAY,
                    format!(
                        "the account {payer} has {balance} coins committed; its pending \
                         transactions may spend {pending} and this bundle asks {wants} in max \
                         fees and native transfers: wait for them to commit, fund it, or lower \
                         the max fee (`tally fees` shows the prices)"
                    ),
                ));
            }
            balances.push((payer, balance, at));
        }
        for h in &displaced {
            self.remove(h);
        }
        let expires_ms = txs
            .iter()
            .map(|t| t.tx.transaction.expiration_ms)
            .min()
            .unwrap_or(0);
        let ids: Vec<TxId> = txs.iter().map(|t| t.id).collect();
        for id in &ids {
            self.ids.insert(*id, hash);
        }
        let mut refs: Vec<(u16, u32)> = txs
            .iter()
            .map(|t| {
                (
                    t.tx.transaction.ref_block_num,
                    t.tx.transaction.ref_block_prefix,
                )
            })
            .collect();
        refs.sort_unstable();
        refs.dedup();
        for (payer, balance, at) in balances {
            let p = self.payers.entry(payer).or_default();
            p.pending = p.pending.saturating_add(asked[&payer]);
            p.bundles += 1;
            p.balance = Some((balance, at));
        }
        if !awaited.is_empty() {
            let namers = namers(&txs, &awaited);
            let bytes = waiting_bytes(&txs, &namers);
            self.claim(&namers);
            self.await_references(hash, awaited, bytes);
        }
        self.bundles.insert(
            hash,
            Pooled {
                ids,
                expires_ms,
                tips: tips(txs.as_slice()),
                offers: txs.iter().map(Offer::of).collect(),
                txs: Some(txs),
                asked,
                refs,
            },
        );
        Ok(())
    }

    /// CheckTx's recheck of a bundle after a commit: `None` if this node does not know it (it
    /// restarted), else whether it stays. An expired bundle leaves, so does one with a
    /// transaction whose max fee no longer pays for its size at the next block's prices, and
    /// so does one whose payer's committed balance (as known, or `read`) no longer covers what its pending
    /// transactions may spend (bundles leave in the order CometBFT rechecks them, its
    /// mempool's order, until the rest fit).
    pub fn recheck(&mut self, hash: &[u8; 32], read: &Balances) -> Option<Result<(), Refusal>> {
        let time_ms = self.next_block_ms();
        let p = self.bundles.get(hash)?;
        if let Err(e) = check_expiration(p.expires_ms, time_ms, u64::MAX) {
            self.remove(hash);
            return Some(Err(Refusal::new(code::EXPIRED, e.to_string())));
        }
        if let Err(refusal) = underpaid(&self.prices, p.offers.iter().copied()) {
            self.remove(hash);
            return Some(Err(refusal));
        }
        let payers: Vec<Name> = p.asked.keys().copied().collect();
        for payer in payers {
            let (balance, _) = self.balance_of(payer, read);
            let pending = self.payers.get(&payer).map_or(0, |p| p.pending);
            if pending > balance {
                self.remove(hash);
                return Some(Err(Refusal::new(
                    code::CANNOT_PAY,
                    format!(
                        "the account {payer} has {balance} coins committed, less than the \
                         {pending} its pending transactions may spend in max fees and native \
                         transfers: fund it, or send again once they commit"
                    ),
                )));
            }
        }
        Some(Ok(()))
    }

    /// The pooled bundles a bundle of `txs` waiting for the reference blocks `awaited`
    /// ([`Mempool::still_ahead`]; none: it may be proposed now) displaces, or why it is
    /// refused: a transaction of it is held by a bundle that does not give way, or it would
    /// wait and the room for waiting bundles is full, or its payers' share of it.
    ///
    /// A bundle gives way to one that holds one of its transactions and waits for fewer
    /// reference blocks: for none (it may be proposed now), or for a strict part of what it
    /// waits for. Else anyone could copy another's transaction from gossip into a bundle
    /// naming a block 16 ahead, and keep it out of blocks (a bundle is proposed whole) for
    /// nothing, again and again: such a copy names every block the transaction names, and
    /// one more. A bundle that gives way is CometBFT's to recheck: admitted from scratch, it
    /// is refused for the transaction it shares. So resending one transaction of a waiting
    /// bundle alone takes it out of that bundle, and the bundle's other transactions must be
    /// sent again; a client that gives all transactions of a bundle one reference block
    /// (`tally load` does) never waits for a strict part of another's.
    ///
    /// The room ([`MAX_AWAITING_BYTES`], [`MAX_AWAITING_BYTES_PER_PAYER`]) counts what the
    /// displaced bundles free, which all wait.
    pub fn may_wait(
        &self,
        txs: &[PreparedTx],
        awaited: &[(u16, u32)],
    ) -> Result<Vec<[u8; 32]>, Refusal> {
        let mut displaced: Vec<[u8; 32]> = Vec::new();
        for t in txs {
            let Some(&other) = self.ids.get(&t.id) else {
                continue;
            };
            let gives_way = self.awaiting.get(&other).is_some_and(|theirs| {
                awaited.len() < theirs.refs.len() && awaited.iter().all(|r| theirs.refs.contains(r))
            });
            if !gives_way {
                return Err(Refusal::new(
                    code::DUPLICATE,
                    "a transaction is already in the mempool",
                ));
            }
            if !displaced.contains(&other) {
                displaced.push(other);
            }
        }
        if !awaited.is_empty() {
            let namers = namers(txs, awaited);
            self.suspension(&namers)?;
            self.room_to_wait(txs, &namers, &displaced)?;
        }
        Ok(displaced)
    }

    /// Refuses a bundle one of whose `namers` ([`namers`]) is suspended ([`SUSPENDED_BLOCKS`])
    /// or claims another block at a height, or any bundle that would wait when the pool could
    /// not suspend its payers: the claims or the suspended payers are as many as it keeps.
    fn suspension(&self, namers: &[((u16, u32), Name)]) -> Result<(), Refusal> {
        if self.claim_count + namers.len() > MAX_CLAIMS
            || self.suspended.len() >= MAX_SUSPENDED_PAYERS
        {
            return Err(Refusal::new(
                code::TRY_LATER,
                "this node keeps as many claims that a block will come as it can; send the \
                 bundle again once it has the block it names, or to another node",
            ));
        }
        let mut named: BTreeMap<(u64, Name), u32> = BTreeMap::new();
        for &((num, prefix), payer) in namers {
            let height = self.claim_height(num);
            let earlier = self
                .claims
                .get(&height)
                .and_then(|c| c.get(&payer))
                .copied();
            let earlier = earlier.or_else(|| named.insert((height, payer), prefix));
            if earlier.is_some_and(|p| p != prefix) {
                return Err(Refusal::new(
                    code::TRY_LATER,
                    format!(
                        "the payer {payer} signed transactions naming two different blocks at \
                         height {height}: one of them will never come, and this node waits \
                         for the first only"
                    ),
                ));
            }
        }
        for &(_, payer) in namers {
            if let Some(&until) = self.suspended.get(&payer) {
                return Err(Refusal::new(
                    code::TRY_LATER,
                    format!(
                        "the payer {payer} signed a transaction naming a block that never came; \
                         until block {until} its transactions may only name blocks this node \
                         has committed, as its `head` query gives"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The height block number `num` names, 1 to [`MAX_REFERENCE_LEAD`] after the head for a
    /// reference a bundle may wait for ([`Mempool::admit_awaiting`] refuses any other).
    fn claim_height(&self, num: u16) -> u64 {
        self.head_height + u64::from(num.wrapping_sub(self.head_height as u16))
    }

    /// Records the claims of `namers` ([`Mempool::suspension`] refused any that conflicts with
    /// one recorded).
    fn claim(&mut self, namers: &[((u16, u32), Name)]) {
        for &((num, prefix), payer) in namers {
            let height = self.claim_height(num);
            if let std::collections::btree_map::Entry::Vacant(e) =
                self.claims.entry(height).or_default().entry(payer)
            {
                e.insert(prefix);
                self.claim_count += 1;
            }
        }
    }

    /// Whether a bundle of `txs`, named by `namers`, fits the room for waiting bundles and
    /// each of its payers' share of it, once the waiting bundles `displaced` left.
    fn room_to_wait(
        &self,
        txs: &[PreparedTx],
        namers: &[((u16, u32), Name)],
        displaced: &[[u8; 32]],
    ) -> Result<(), Refusal> {
        let freed = |payer: Option<&Name>| -> usize {
            displaced
                .iter()
                .filter_map(|h| self.awaiting.get(h))
                .map(|w| match payer {
                    None => w.bytes.values().sum(),
                    Some(p) => w.bytes.get(p).copied().unwrap_or(0),
                })
                .sum()
        };
        let full = |what: String| {
            Err(Refusal::new(
                code::TRY_LATER,
                format!(
                    "{what}: this node cannot keep more transactions waiting for a reference \
                     block it has not committed; send them again once it has the block, or to \
                     another node"
                ),
            ))
        };
        let bytes = waiting_bytes(txs, namers);
        let total: usize = bytes.values().sum();
        if self.awaiting_bytes.saturating_sub(freed(None)) + total > MAX_AWAITING_BYTES {
            return full(format!(
                "{} bytes of transactions already wait, and the bundle's {total} would pass \
                 the {MAX_AWAITING_BYTES} this node keeps",
                self.awaiting_bytes
            ));
        }
        for (payer, &wants) in &bytes {
            let waiting = self.payers.get(payer).map_or(0, |p| p.awaiting_bytes);
            if waiting.saturating_sub(freed(Some(payer))) + wants > MAX_AWAITING_BYTES_PER_PAYER {
                return full(format!(
                    "{waiting} bytes of the payer {payer}'s transactions already wait, and the \
                     bundle's {wants} would pass the {MAX_AWAITING_BYTES_PER_PAYER} one payer \
                     may keep waiting"
                ));
            }
        }
        Ok(())
    }

    /// The reference blocks of `awaited` a bundle still waits for, sorted, once each: all but
    /// those committed since (commits may come between admission's read of committed state
    /// and the pool's update).
    pub fn still_ahead(&self, mut awaited: Vec<(u16, u32)>) -> Vec<(u16, u32)> {
        awaited.retain(|r| !self.recent_heads.contains(r));
        awaited.sort_unstable();
        awaited.dedup();
        awaited
    }

    /// Checks `txs`, whose admission read committed state at height `checked_at`, against the
    /// commits since, as [`Mempool::committed`] checked the pooled bundles at each: a
    /// transaction one of them included, or one naming a committed block whose number one of
    /// them took for another, is one no block can take, and refuses the bundle. (A reference
    /// of `awaited`, ahead then, is [`Mempool::admit_awaiting`]'s to check.) Without this, a
    /// bundle checked across a commit stayed pooled, reserving its payers' balances and
    /// holding its transactions' ids against other bundles, until it expired. More commits
    /// since than the pool remembers ([`RECENT_COMMITS`]): `code::TRY_LATER`.
    fn check_since(
        &self,
        txs: &[PreparedTx],
        awaited: &[(u16, u32)],
        checked_at: u64,
    ) -> Result<(), Refusal> {
        let behind = self.head_height - checked_at;
        let since: Vec<&RecentCommit> = self
            .recent
            .iter()
            .filter(|c| c.height > checked_at)
            .collect();
        if since.len() as u64 != behind {
            return Err(Refusal::new(
                code::TRY_LATER,
                format!(
                    "this node committed {behind} blocks while it checked the bundle; send it \
                     again"
                ),
            ));
        }
        for (i, t) in txs.iter().enumerate() {
            let reference = (
                t.tx.transaction.ref_block_num,
                t.tx.transaction.ref_block_prefix,
            );
            for c in &since {
                let e = if c.included.binary_search(&t.id).is_ok() {
                    (code::DUPLICATE, TxError::Duplicate(hex::encode(t.id)))
                } else if reference.0 == c.reference.0
                    && reference != c.reference
                    && !awaited.contains(&reference)
                {
                    let (num, prefix) = reference;
                    (
                        code::REFUSED,
                        TxError::UnknownReferenceBlock { num, prefix },
                    )
                } else {
                    continue;
                };
                return Err(Refusal::new(e.0, format!("transaction {i}: {}", e.1)));
            }
        }
        Ok(())
    }

    /// Marks the pooled bundle `hash` as waiting for the reference blocks `refs`, taking the
    /// room `bytes` by payer.
    fn await_references(
        &mut self,
        hash: [u8; 32],
        refs: Vec<(u16, u32)>,
        bytes: BTreeMap<Name, usize>,
    ) {
        for (payer, &b) in &bytes {
            if let Some(p) = self.payers.get_mut(payer) {
                p.awaiting_bytes += b;
            }
            self.awaiting_bytes += b;
        }
        self.awaiting.insert(hash, Waiting { refs, bytes });
    }

    /// The bundle `hash` no longer waits: the room it took is free.
    fn stop_waiting(&mut self, hash: &[u8; 32]) {
        let Some(w) = self.awaiting.remove(hash) else {
            return;
        };
        // The counts are what the waiting bundles hold (`room_to_wait` relies on it); a
        // miscount must not take the node down, so it saturates, and the tests check them.
        for (payer, b) in w.bytes {
            if let Some(p) = self.payers.get_mut(&payer) {
                debug_assert!(p.awaiting_bytes >= b, "{payer}'s waiting bytes");
                p.awaiting_bytes = p.awaiting_bytes.saturating_sub(b);
            }
            debug_assert!(self.awaiting_bytes >= b, "waiting bytes");
            self.awaiting_bytes = self.awaiting_bytes.saturating_sub(b);
        }
    }

    /// Whether the pooled bundle `hash` may go into a block at `time_ms`: none of its
    /// transactions has expired by then, and every reference block it names is committed.
    /// `None` if it is not pooled. What PrepareProposal asks besides [`Mempool::pays`]: a
    /// transaction the block would reject pays no fee, and takes the block's room for nothing.
    pub fn ready(&self, hash: &[u8; 32], time_ms: u64) -> Option<bool> {
        let p = self.bundles.get(hash)?;
        Some(
            check_expiration(p.expires_ms, time_ms, u64::MAX).is_ok()
                && !self.awaiting.contains_key(hash),
        )
    }

    /// Whether a pooled bundle holds the transaction `id`.
    pub fn holds(&self, id: &TxId) -> bool {
        self.ids.contains_key(id)
    }

    /// Bundles and transactions in the pool.
    pub fn size(&self) -> (usize, usize) {
        (self.bundles.len(), self.ids.len())
    }

    /// What the committed window decides about the pooled bundle `hash`'s transactions
    /// ([`facts`]); `None` if it is not pooled, or FinalizeBlock has taken them.
    pub fn facts_of(&self, hash: &[u8; 32]) -> Option<Vec<TxFacts>> {
        self.bundles.get(hash)?.txs.as_deref().map(facts)
    }

    /// What the pooled bundle `hash` may spend of each account's native balance ([`asked`]);
    /// `None` if it is not pooled.
    pub fn asked_of(&self, hash: &[u8; 32]) -> Option<&BTreeMap<Name, u64>> {
        self.bundles.get(hash).map(|p| &p.asked)
    }

    /// The committed native balance of `account` as the pool knows it at its head, if it does.
    pub fn balance_at_head(&self, account: &Name) -> Option<u64> {
        self.fresh_balance(account)
    }

    /// The tips a pooled bundle offers, summed; `None` if it is not pooled.
    pub fn tips_of(&self, hash: &[u8; 32]) -> Option<u64> {
        self.bundles.get(hash).map(|p| p.tips)
    }

    /// What `payer`'s pending transactions may spend in max fees (0 without any).
    #[cfg(test)]
    fn pending_of(&self, payer: Name) -> u64 {
        self.payers.get(&payer).map_or(0, |p| p.pending)
    }

    /// Whether the max fee of every transaction of the bundle `hash` pays for its own size
    /// and intrinsic fuel at the next block's prices (the chain's rule, `fee::check_max_fee`):
    /// `None` if this node has not verified the bundle. What PrepareProposal keeps and
    /// ProcessProposal accepts.
    pub fn pays(&self, hash: &[u8; 32]) -> Option<Result<(), Refusal>> {
        if let Some(p) = self.bundles.get(hash) {
            return Some(underpaid(&self.prices, p.offers.iter().copied()));
        }
        let txs = self.proposed.get(hash)?;
        Some(self.pay(txs))
    }

    /// [`Mempool::pays`] for decoded transactions.
    pub fn pay(&self, txs: &[PreparedTx]) -> Result<(), Refusal> {
        underpaid(&self.prices, txs.iter().map(Offer::of))
    }

    /// Whether the bundle was verified here (in the mempool, or in the proposal).
    #[cfg(test)]
    fn knows(&self, hash: &[u8; 32]) -> bool {
        self.bundles.contains_key(hash) || self.proposed.contains_key(hash)
    }

    /// Remembers the verified bundles of a proposal, for FinalizeBlock.
    pub fn proposed(&mut self, bundles: impl IntoIterator<Item = ([u8; 32], Vec<PreparedTx>)>) {
        self.proposed.extend(bundles);
    }

    /// The verified transactions of a bundle, once: FinalizeBlock takes them into the block.
    /// `None` if this node has not verified it, or they were taken already.
    pub fn take(&mut self, hash: &[u8; 32]) -> Option<Vec<PreparedTx>> {
        if let Some(txs) = self.proposed.remove(hash) {
            return Some(txs);
        }
        self.bundles.get_mut(hash)?.txs.take()
    }

    /// After a commit of height `head_height` at `head_time_ms`: the block's bundles leave,
    /// and so does every bundle holding a transaction the block included (`included`: the
    /// same transaction in another bundle, its key added or stripped, which the next block
    /// would reject as a duplicate, for no fee) and every bundle the chain's rule says has
    /// expired (CometBFT's recheck would drop it anyway; this bounds what a bundle CometBFT
    /// forgot costs). The balances the pool knows are now a block old: they are read again
    /// when next needed.
    pub fn committed(
        &mut self,
        head_height: u64,
        head_time_ms: u64,
        head_reference: (u16, u32),
        prices: tally_chain::fee::Prices,
        block: &[[u8; 32]],
        included: &[TxId],
    ) {
        self.head_height = head_height;
        self.head_time_ms = head_time_ms;
        if self.recent_heads.len() == usize::from(MAX_REFERENCE_LEAD) {
            self.recent_heads.pop_front();
        }
        self.recent_heads.push_back(head_reference);
        if self.recent.len() == RECENT_COMMITS {
            self.recent.pop_front();
        }
        let mut sorted = included.to_vec();
        sorted.sort_unstable();
        self.recent.push_back(RecentCommit {
            height: head_height,
            reference: head_reference,
            included: sorted,
        });
        self.prices = prices;
        for h in block {
            self.remove(h);
        }
        for id in included {
            if let Some(h) = self.ids.get(id).copied() {
                self.remove(&h);
            }
        }
        let time_ms = self.next_block_ms();
        // Expired, or underpaid at the new prices: the next block would reject it.
        let expired: Vec<[u8; 32]> = self
            .bundles
            .iter()
            .filter(|(_, p)| {
                p.expires_ms <= time_ms
                    || underpaid(&self.prices, p.offers.iter().copied()).is_err()
            })
            .map(|(h, _)| *h)
            .collect();
        for h in &expired {
            self.remove(h);
        }
        // A committed block a bundle names, whose number the new head took, is gone from the
        // chain's window (it holds one block a number: this one, 65,536 blocks later): no
        // block can take the bundle now. Waiting bundles too: one that waits for this head may
        // name the older block of its number in another transaction, and would stop waiting
        // below.
        let replaced: Vec<[u8; 32]> = self
            .bundles
            .iter()
            .filter(|(_, p)| {
                p.refs
                    .iter()
                    .any(|&(num, prefix)| num == head_reference.0 && prefix != head_reference.1)
            })
            .map(|(h, _)| *h)
            .collect();
        for h in &replaced {
            self.remove(h);
        }
        // A reference the new head is, is known from now on; one that can no longer be a
        // block ahead (another block has this height, or the head moved past it, as a
        // restored snapshot does) never will be. Such a bundle leaves: CometBFT's recheck
        // admits it again from scratch, and admission refuses it, before any signature.
        let (mut dead, mut ready) = (Vec::new(), Vec::new());
        for (h, w) in &mut self.awaiting {
            w.refs.retain(|r| *r != head_reference);
            if w.refs
                .iter()
                .any(|&(num, _)| !within_lead(num, head_height))
            {
                dead.push(*h);
            } else if w.refs.is_empty() {
                ready.push(*h);
            }
        }
        for h in &ready {
            self.stop_waiting(h);
        }
        for h in &dead {
            self.remove(h);
        }
        self.settle_claims(head_height, head_reference.1);
        self.proposed.clear();
    }

    /// The commit of `height`, whose id's prefix is `prefix`: the payers who claimed another
    /// block at this height are suspended, and suspensions that end here end.
    fn settle_claims(&mut self, height: u64, prefix: u32) {
        self.suspended.retain(|_, until| *until > height);
        // Heights increase by one a commit: a claim below this one, which nothing proves wrong,
        // cannot be, but would leave here too.
        let later = self.claims.split_off(&(height + 1));
        let settled = std::mem::replace(&mut self.claims, later);
        self.claim_count -= settled.values().map(BTreeMap::len).sum::<usize>();
        let Some(named) = settled.get(&height) else {
            return;
        };
        for (&payer, &named) in named {
            if named != prefix && self.suspended.len() < MAX_SUSPENDED_PAYERS {
                self.suspended
                    .insert(payer, height.saturating_add(SUSPENDED_BLOCKS));
            }
        }
    }

    /// Sets the head after InitChain or a restored snapshot, and the next block's prices
    /// (which the pool's fee rule reads: zero until set would admit any max fee).
    pub fn set_head(
        &mut self,
        head_height: u64,
        head_time_ms: u64,
        max_lifetime_ms: u64,
        prices: tally_chain::fee::Prices,
    ) {
        self.head_height = head_height;
        self.head_time_ms = head_time_ms;
        // A jump of the head proves no claim right or wrong.
        self.recent_heads.clear();
        self.recent.clear();
        self.claims.clear();
        self.claim_count = 0;
        self.max_lifetime_ms = max_lifetime_ms;
        self.prices = prices;
    }

    fn remove(&mut self, hash: &[u8; 32]) {
        self.stop_waiting(hash);
        if let Some(p) = self.bundles.remove(hash) {
            for id in p.ids {
                self.ids.remove(&id);
            }
            for (payer, asked) in p.asked {
                if let Some(e) = self.payers.get_mut(&payer) {
                    e.pending = e.pending.saturating_sub(asked);
                    e.bundles -= 1;
                    if e.bundles == 0 {
                        self.payers.remove(&payer);
                    }
                }
            }
        }
    }
}

/// Committed native balances read at one height, for [`Mempool::admit`] and
/// [`Mempool::recheck`].
#[derive(Debug, Clone, Default)]
pub struct Balances {
    /// The height they were read at.
    pub height: u64,
    /// Each payer's balance.
    pub balances: BTreeMap<Name, u64>,
}

/// A bundle PrepareProposal may take: its size, the fuel it is expected to use and the tips
/// it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Its bytes (at least its transactions' bytes: what the bandwidth dimension counts).
    pub bytes: u64,
    /// The fuel it is expected to use.
    pub fuel: u64,
    /// Its transactions' tips, summed.
    pub tips: u64,
}

/// Whether all candidates fit `max_bytes` and `fuel_budget`, in order (the first bundle is
/// taken whatever its fuel: a bundle larger than the budget must still be proposed some day).
/// Their tips are not looked at.
pub fn all_fit(candidates: &[Candidate], max_bytes: u64, fuel_budget: u64) -> bool {
    let mut used = (0u64, 0u64);
    candidates.iter().enumerate().all(|(i, c)| {
        let ok = fits(used, c, i == 0, max_bytes, fuel_budget);
        used = (
            used.0.saturating_add(c.bytes),
            used.1.saturating_add(c.fuel),
        );
        ok
    })
}

fn fits(used: (u64, u64), c: &Candidate, first: bool, max_bytes: u64, fuel_budget: u64) -> bool {
    used.0.saturating_add(c.bytes) <= max_bytes
        && (first || used.1.saturating_add(c.fuel) <= fuel_budget)
}

/// Which candidates a proposal takes, in order, within `max_bytes` and `fuel_budget`. When
/// [`all_fit`], all in their order (CometBFT's mempool order, arrival); otherwise the highest
/// tips per byte first, ties in arrival order, each that still fits.
pub fn propose(candidates: &[Candidate], max_bytes: u64, fuel_budget: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    if all_fit(candidates, max_bytes, fuel_budget) {
        return order;
    }
    // a before b when a.tips / a.bytes > b.tips / b.bytes, compared without division;
    // `sort_by` is stable, so equal ratios keep arrival order.
    order.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a], &candidates[b]);
        let lhs = u128::from(a.tips) * u128::from(b.bytes.max(1));
        let rhs = u128::from(b.tips) * u128::from(a.bytes.max(1));
        rhs.cmp(&lhs)
    });
    let mut used = (0u64, 0u64);
    let mut taken = Vec::new();
    for i in order {
        let c = &candidates[i];
        if fits(used, c, taken.is_empty(), max_bytes, fuel_budget) {
            used = (used.0 + c.bytes, used.1.saturating_add(c.fuel));
            taken.push(i);
        }
    }
    taken
}

/// The hashes of a block's bundles.
pub fn hashes(txs: &[Bytes]) -> Vec<[u8; 32]> {
    txs.iter().map(|t| bundle::hash(t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_chain::{Action, Name, SignedTransaction, Transaction};

    const HEAD_MS: u64 = 1_000_000;
    const LIFETIME_MS: u64 = 120_000;

    fn tx(expiration_ms: u64, nonce: u8) -> PreparedTx {
        PreparedTx::new(SignedTransaction::unsigned(Transaction::new(
            expiration_ms,
            (0, 0),
            vec![Action {
                account: Name::from_str_const("simplecoin").unwrap(),
                name: Name::from_str_const("transfer").unwrap(),
                authorization: vec![],
                data: vec![nonce],
            }],
        )))
    }

    const HEIGHT: u64 = 7;

    fn pool() -> Mempool {
        Mempool::new(HEIGHT, HEAD_MS, LIFETIME_MS, [0; 5])
    }

    /// Balances read at the pool's head: every payer rich but `system`'s.
    fn rich() -> Balances {
        Balances {
            height: HEIGHT,
            balances: [(tally_chain::system::SYSTEM, u64::MAX)].into(),
        }
    }

    fn read(height: u64, payer: Name, balance: u64) -> Balances {
        Balances {
            height,
            balances: [(payer, balance)].into(),
        }
    }

    /// A transaction paid by `payer` offering `max_fee` and `tip`.
    fn paid(payer: &str, max_fee: u64, tip: u64, nonce: u8) -> PreparedTx {
        let mut t = Transaction::new(
            HEAD_MS + 60_000,
            (0, 0),
            vec![Action {
                account: Name::from_str_const("simplecoin").unwrap(),
                name: Name::from_str_const("transfer").unwrap(),
                authorization: vec![],
                data: vec![nonce],
            }],
        );
        t.payer = payer.parse().unwrap();
        t.max_fee = max_fee;
        t.tip = tip;
        PreparedTx::new(SignedTransaction::unsigned(t))
    }

    /// A simplecoin transfer by `who` signed with `key`, carrying it (or not: `registered`),
    /// its signature corrupted if `corrupt`; `data` tells transactions apart.
    fn signed_by(
        who: Name,
        key: &ed25519_dalek::SigningKey,
        registered: bool,
        corrupt: bool,
        data: u8,
    ) -> PreparedTx {
        let t = Transaction::new(
            HEAD_MS + 60_000,
            (0, 0),
            vec![Action {
                account: Name::from_str_const("simplecoin").unwrap(),
                name: Name::from_str_const("transfer").unwrap(),
                authorization: vec![who],
                data: vec![data],
            }],
        );
        let mut signed = match registered {
            true => SignedTransaction::sign_registered(t, &[(who, key)]),
            false => SignedTransaction::sign(t, &[(who, key)]),
        };
        if corrupt {
            signed.signatures[0].signature[3] ^= 1;
        }
        PreparedTx::decode(signed.encode()).unwrap()
    }

    /// Admission's log for a bundle refused at transaction `i` for `e`.
    fn refused_at(i: usize, e: TxError) -> Result<(), String> {
        Err(format!("transaction {i}: {e}"))
    }

    /// Issue 26: CheckTx and ProcessProposal verify a signature without its key against the
    /// committed key and refuse it when that does not verify it (another key, or no account
    /// yet).
    #[test]
    fn issue_26_a_signature_without_its_key_needs_the_committed_key() {
        let (alice, other) = (
            tally_chain::crypto::derived_key(26, 0),
            tally_chain::crypto::derived_key(26, 1),
        );
        let name_of = |s: &str| -> Name { s.parse().unwrap() };
        let signed = |who: &str, key| signed_by(name_of(who), key, true, false, 1);
        let committed =
            |account: Name| (account == name_of("alice")).then(|| alice.verifying_key().to_bytes());
        let code_of = |t: PreparedTx| verify(&mut [t], &committed).map_err(|r| (r.code, r.log));
        assert_eq!(code_of(signed("alice", &alice)), Ok(()));
        let wrong = code_of(signed("alice", &other)).unwrap_err();
        assert_eq!(wrong.0, code::REFUSED);
        assert!(wrong.1.contains("signature"), "{}", wrong.1);
        let unknown = code_of(signed("carol", &other)).unwrap_err();
        assert_eq!(unknown.0, code::REFUSED);
        assert!(unknown.1.contains("carol"), "{}", unknown.1);
    }

    /// A bundle is refused naming its first transaction with a bad signature, as when every
    /// signature was settled, whether the bad ones carry their key or use the committed one;
    /// a bundle whose every signature is bad names its first.
    #[test]
    fn a_bundle_is_refused_for_its_first_bad_signature() {
        let key = tally_chain::crypto::derived_key(28, 0);
        let alice: Name = "alice".parse().unwrap();
        let committed = |account: Name| (account == alice).then(|| key.verifying_key().to_bytes());
        let bundle = |bad: &[usize], registered: bool| -> Vec<PreparedTx> {
            (0..100u8)
                .map(|i| signed_by(alice, &key, registered, bad.contains(&(i as usize)), i))
                .collect()
        };
        for registered in [false, true] {
            assert_eq!(
                verify(&mut bundle(&[], registered), &committed).map_err(|r| r.log),
                Ok(())
            );
            for (bad, first) in [
                (vec![0], 0),
                (vec![99], 99),
                (vec![40, 41, 90], 40),
                ((0..100).collect::<Vec<_>>(), 0),
                ((30..100).collect(), 30),
            ] {
                let refusal = verify(&mut bundle(&bad, registered), &committed).unwrap_err();
                assert_eq!(refusal.code, code::REFUSED);
                assert!(
                    refusal
                        .log
                        .starts_with(&format!("transaction {first}: bad signature")),
                    "{registered}, {bad:?}: {}",
                    refusal.log
                );
            }
        }
    }

    /// A signature that carries its key must carry its account's committed key: another key
    /// (even one it verifies under) is refused as the wrong key, and so is any key of an
    /// account that does not exist yet, before any signature is verified.
    #[test]
    fn a_carried_key_must_be_the_accounts_committed_key() {
        let (alice_key, other) = (
            tally_chain::crypto::derived_key(29, 0),
            tally_chain::crypto::derived_key(29, 1),
        );
        let (alice, carol): (Name, Name) = ("alice".parse().unwrap(), "carol".parse().unwrap());
        let committed =
            |account: Name| (account == alice).then(|| alice_key.verifying_key().to_bytes());
        let signed = |who, key, corrupt| signed_by(who, key, false, corrupt, 1);
        let log_of = |mut txs: Vec<PreparedTx>| verify(&mut txs, &committed).map_err(|r| r.log);
        assert_eq!(log_of(vec![signed(alice, &alice_key, false)]), Ok(()));
        assert_eq!(
            log_of(vec![signed(alice, &other, false)]),
            refused_at(0, TxError::WrongKey(alice))
        );
        assert_eq!(
            log_of(vec![signed(carol, &other, false)]),
            refused_at(0, TxError::UnknownAccount(carol))
        );
        // The first refusal in order, whichever check finds it.
        let bad_signature_first = vec![
            signed(alice, &alice_key, false),
            signed(alice, &alice_key, true),
            signed(alice, &other, false),
        ];
        assert_eq!(
            log_of(bad_signature_first),
            refused_at(1, TxError::BadSignature(alice))
        );
        let wrong_key_first = vec![
            signed(alice, &alice_key, false),
            signed(alice, &other, true),
            signed(alice, &alice_key, true),
        ];
        assert_eq!(
            log_of(wrong_key_first),
            refused_at(1, TxError::WrongKey(alice))
        );
    }

    /// A reference block up to `MAX_REFERENCE_LEAD` blocks ahead of the head may wait in the
    /// pool (its node is behind the client's); anything else the window does not know is
    /// refused, as the block would reject it for no fee.
    #[test]
    fn a_reference_block_ahead_of_the_head_may_wait_and_no_other_unknown_one() {
        let head = 65_530u64; // block numbers wrap at 2^16
        let unknown = |num: u16| TxError::UnknownReferenceBlock { num, prefix: 9 };
        for lead in 1..=u64::from(MAX_REFERENCE_LEAD) {
            assert_eq!(awaitable((head + lead) as u16, 9, head), Ok(()), "{lead}");
        }
        for num in [head as u16, (head - 1) as u16, (head + 17) as u16, 0x8000] {
            assert_eq!(awaitable(num, 9, head), Err(unknown(num)), "{num}");
        }
        // Further ahead, this node may be the one behind; at or behind the head, it is not.
        for (num, ahead) in [
            ((head + 1) as u16, Some(1)),
            ((head + 17) as u16, Some(17)),
            ((head + 0x7fff) as u16, Some(0x7fff)),
            ((head + 0x8000) as u16, None),
            (head as u16, None),
            ((head - 1) as u16, None),
        ] {
            assert_eq!(blocks_ahead(num, head), ahead, "{num}");
        }
    }

    /// A bundle waiting for reference blocks is not proposed until the head is each one, and
    /// leaves the pool once another block takes one's height; an expired one is not proposed
    /// at a block time it has reached.
    #[test]
    fn a_bundle_is_proposable_once_its_reference_blocks_are_committed_and_before_it_expires() {
        let mut pool = pool();
        let (next, after) = (((HEIGHT + 1) as u16, 0xaa), ((HEIGHT + 2) as u16, 0xbb));
        for (hash, nonce, awaited) in [
            ([1; 32], 1, vec![next, after, next]),
            ([2; 32], 2, vec![(next.0, 0xcc)]),
            ([3; 32], 3, vec![]),
        ] {
            pool.admit_now(hash, vec![paid("alice", 0, 0, nonce)], &rich(), awaited)
                .unwrap();
        }
        let expires = HEAD_MS + 60_000;
        assert_eq!(pool.ready(&[1; 32], HEAD_MS + 1), Some(false));
        assert_eq!(pool.ready(&[2; 32], HEAD_MS + 1), Some(false));
        assert_eq!(pool.ready(&[3; 32], HEAD_MS + 1), Some(true));
        assert_eq!(
            pool.ready(&[3; 32], expires),
            Some(false),
            "expired by then"
        );
        assert_eq!(pool.ready(&[4; 32], HEAD_MS + 1), None, "not pooled");

        // The next block is `next`: the bundle naming another block at its height leaves.
        pool.committed(HEIGHT + 1, HEAD_MS + 500, next, [0; 5], &[], &[]);
        assert_eq!(
            pool.ready(&[1; 32], HEAD_MS + 501),
            Some(false),
            "waits for `after`"
        );
        assert_eq!(pool.ready(&[2; 32], HEAD_MS + 501), None, "dropped");
        assert_eq!(
            pool.recheck(&[2; 32], &rich()),
            None,
            "admitted again from scratch"
        );
        pool.committed(HEIGHT + 2, HEAD_MS + 1_000, after, [0; 5], &[], &[]);
        assert_eq!(pool.ready(&[1; 32], HEAD_MS + 1_001), Some(true));
        assert_eq!(pool.size(), (2, 2));
        // Admission read the state before those commits, and waits for blocks committed since.
        pool.admit_now(
            [6; 32],
            vec![paid("alice", 0, 0, 6)],
            &rich(),
            vec![after, next],
        )
        .unwrap();
        assert_eq!(pool.ready(&[6; 32], HEAD_MS + 1_001), Some(true));
        pool.remove(&[6; 32]);

        // A head that jumps past a reference (a restored snapshot) drops its bundle too.
        let far = vec![((HEIGHT + 3) as u16, 1)];
        pool.admit_now([5; 32], vec![paid("alice", 0, 0, 5)], &rich(), far)
            .unwrap();
        pool.committed(
            HEIGHT + 40,
            HEAD_MS + 2_000,
            ((HEIGHT + 40) as u16, 2),
            [0; 5],
            &[],
            &[],
        );
        assert_eq!(pool.ready(&[5; 32], HEAD_MS + 2_001), None);
        assert!(pool.awaiting.is_empty());
    }

    /// A transaction paid by `payer` naming `reference`; `nonce` tells transactions apart.
    fn naming(payer: &str, reference: (u16, u32), nonce: u8) -> PreparedTx {
        let mut t = paid(payer, 0, 0, nonce).tx.transaction;
        (t.ref_block_num, t.ref_block_prefix) = reference;
        PreparedTx::new(SignedTransaction::unsigned(t))
    }

    /// A committed block a pooled bundle names leaves the chain's window when a commit takes
    /// its number (one block a number: 65,536 blocks later): the bundle can never be taken,
    /// and leaves the pool at that commit rather than holding its ids and its payer's balance
    /// until it expires.
    #[test]
    fn a_bundle_naming_a_block_whose_number_a_commit_took_leaves() {
        let mut pool = pool();
        let num = (HEIGHT + 1) as u16;
        let (old, new) = ((num, 0xaa), (num, 0xbb));
        let stale = naming("alice", old, 1);
        let (stale_id, fine_id) = (stale.id, naming("bob", (0, 0), 2).id);
        // Admitted as not waiting: at head HEIGHT, number HEIGHT + 1 was an older block's.
        pool.admit([1; 32], vec![stale], &rich()).unwrap();
        pool.admit([2; 32], vec![naming("bob", (0, 0), 2)], &rich())
            .unwrap();
        pool.admit([3; 32], vec![naming("carol", new, 3)], &rich())
            .unwrap();
        pool.committed(HEIGHT + 1, HEAD_MS + 500, new, [0; 5], &[], &[]);
        assert_eq!(pool.recheck(&[1; 32], &rich()), None, "dropped");
        assert!(!pool.holds(&stale_id));
        assert!(pool.holds(&fine_id));
        assert_eq!(
            pool.ready(&[3; 32], HEAD_MS + 501),
            Some(true),
            "names the new head"
        );
        assert_eq!(pool.size(), (2, 2));

        // One that waited for the new head, and names the older block of its number too,
        // leaves rather than stop waiting (helper-42's case).
        let num = (HEIGHT + 2) as u16;
        let (old, new) = ((num, 0xaa), (num, 0xbb));
        let stale = naming("dave", old, 4);
        let stale_id = stale.id;
        let waits = vec![naming("dave", new, 5), stale];
        pool.admit_now([4; 32], waits, &rich(), vec![new]).unwrap();
        pool.committed(HEIGHT + 2, HEAD_MS + 1_000, new, [0; 5], &[], &[]);
        assert!(!pool.holds(&stale_id));
        assert_eq!(pool.ready(&[4; 32], HEAD_MS + 1_001), None, "dropped");
        assert!(pool.awaiting.is_empty());
    }

    /// Admission reads committed state, verifies, then takes the pool's lock: a bundle
    /// checked against an older head is checked against the commits since, as the pool's
    /// bundles were at each. One holding a transaction a commit since included, or naming a
    /// committed block whose number one took, is refused; further behind than the pool
    /// remembers, it is sent again.
    #[test]
    fn a_bundle_checked_before_a_commit_is_checked_against_it() {
        let mut pool = pool();
        let included = naming("alice", (0, 0), 1);
        let num = (HEIGHT + 1) as u16;
        let head = (num, 0xbb);
        pool.committed(HEIGHT + 1, HEAD_MS + 500, head, [0; 5], &[], &[included.id]);
        let code = |r: Result<(), Refusal>| r.map_err(|r| r.code);
        let admit = |pool: &mut Mempool, hash, tx: PreparedTx, checked_at| {
            code(pool.admit_awaiting(hash, vec![tx], &rich(), Vec::new(), checked_at))
        };
        assert_eq!(
            admit(&mut pool, [1; 32], included.clone(), HEIGHT),
            Err(code::DUPLICATE)
        );
        assert_eq!(
            admit(&mut pool, [2; 32], naming("bob", (num, 0xaa), 2), HEIGHT),
            Err(code::REFUSED),
            "its block's number now holds the head"
        );
        // Waiting for the block that came: admitted, no longer waiting.
        let waited = naming("bob", head, 3);
        assert_eq!(
            code(pool.admit_awaiting([3; 32], vec![waited], &rich(), vec![head], HEIGHT)),
            Ok(())
        );
        assert_eq!(pool.ready(&[3; 32], HEAD_MS + 501), Some(true));
        assert_eq!(
            admit(&mut pool, [4; 32], naming("carol", (0, 0), 4), HEIGHT),
            Ok(())
        );
        // Checked at the head: nothing to check since.
        assert_eq!(
            admit(
                &mut pool,
                [5; 32],
                naming("dave", (num, 0xaa), 5),
                HEIGHT + 1
            ),
            Ok(()),
            "at the head, admission's read of the window decides"
        );
        for h in 2..=RECENT_COMMITS as u64 + 1 {
            let reference = ((HEIGHT + h) as u16, 1);
            pool.committed(HEIGHT + h, HEAD_MS + 500 * h, reference, [0; 5], &[], &[]);
        }
        assert_eq!(
            admit(&mut pool, [6; 32], naming("erin", (0, 0), 6), HEIGHT),
            Err(code::TRY_LATER),
            "more commits since than the pool remembers"
        );
        assert_eq!(
            admit(&mut pool, [7; 32], naming("erin", (0, 0), 7), HEIGHT + 1),
            Ok(())
        );
    }

    /// A bundle waiting for a reference block cannot hold another's transaction hostage: a
    /// bundle holding one of its transactions and waiting for fewer blocks (none, or a strict
    /// part of its own) displaces it, once admitted. Any other is refused as a duplicate.
    #[test]
    fn a_bundle_waiting_for_a_reference_block_gives_way_to_one_that_waits_for_less() {
        let mut pool = pool();
        let (real, bogus) = (((HEIGHT + 1) as u16, 0x600d), ((HEIGHT + 16) as u16, 0xbad));
        let (victim, attacker) = (paid("alice", 5, 0, 1), paid("mallory", 7, 0, 2));
        let hostage = vec![attacker.clone(), victim.clone()];
        let refused = |r: Result<(), Refusal>| r.map_err(|r| r.code);
        // Each payer's balance covers exactly the max fees of one bundle.
        let exact = Balances {
            height: HEIGHT,
            balances: [("alice", 5), ("mallory", 7)]
                .map(|(p, b)| (p.parse().unwrap(), b))
                .into(),
        };
        // The copy names the victim's block and a bogus one.
        pool.admit_now([1; 32], hostage.clone(), &exact, vec![bogus, real])
            .unwrap();
        assert_eq!(pool.pending_of("mallory".parse().unwrap()), 7);
        for same in [vec![bogus, real], vec![real, bogus, real]] {
            assert_eq!(
                refused(pool.admit_now([2; 32], vec![victim.clone()], &exact, same)),
                Err(code::DUPLICATE),
                "no more than it waits for"
            );
        }
        // A displacing bundle whose payer cannot pay displaces nothing.
        let more = vec![victim.clone(), paid("alice", 1, 0, 3)];
        assert_eq!(
            refused(pool.admit_now([2; 32], more, &exact, vec![real])),
            Err(code::CANNOT_PAY)
        );
        assert_eq!(
            pool.ready(&[1; 32], HEAD_MS + 1),
            Some(false),
            "still pooled"
        );
        assert_eq!(pool.pending_of("alice".parse().unwrap()), 5);
        // What the displaced bundle asked of the payer is free for the displacing one.
        assert_eq!(
            refused(pool.admit_now([2; 32], vec![victim.clone()], &exact, vec![real])),
            Ok(())
        );
        assert_eq!(pool.ready(&[1; 32], HEAD_MS + 1), None, "displaced");
        assert_room_counted(&pool);
        assert_eq!(pool.pending_of("mallory".parse().unwrap()), 0);
        assert_eq!(pool.pending_of("alice".parse().unwrap()), 5);
        assert_eq!(pool.size(), (1, 1));
        // A bundle that does not wait displaces the victim's own waiting one too.
        assert_eq!(refused(pool.screen(std::slice::from_ref(&victim))), Ok(()));
        assert_eq!(
            refused(pool.admit([3; 32], vec![victim.clone()], &rich())),
            Ok(())
        );
        assert_eq!(pool.ready(&[3; 32], HEAD_MS + 1), Some(true));
        assert!(pool.awaiting.is_empty());
        assert_eq!(pool.size(), (1, 1));
        // Held by a bundle that does not wait: refused, waiting or not.
        assert_eq!(
            refused(pool.screen(&[attacker, victim.clone()])),
            Err(code::DUPLICATE)
        );
        assert_eq!(
            refused(pool.admit_now([4; 32], vec![victim.clone()], &rich(), vec![real])),
            Err(code::DUPLICATE)
        );
        assert_eq!(
            refused(pool.admit([4; 32], vec![victim], &rich())),
            Err(code::DUPLICATE)
        );
    }

    /// A transaction paid by `payer` naming the reference block `r`, whose signed encoding is
    /// about `bytes` long.
    fn sized(payer: &str, bytes: usize, nonce: u16, r: (u16, u32)) -> PreparedTx {
        let mut t = paid(payer, 0, 0, 0);
        let mut tx = t.tx.transaction.clone();
        (tx.ref_block_num, tx.ref_block_prefix) = r;
        tx.actions[0].data = nonce.to_le_bytes().repeat(bytes / 2);
        t = PreparedTx::new(SignedTransaction::unsigned(tx));
        t
    }

    /// The room the pool counts for waiting bundles, in total and by payer, is what the
    /// waiting bundles hold.
    fn assert_room_counted(pool: &Mempool) {
        let mut by_payer: BTreeMap<Name, usize> = BTreeMap::new();
        for w in pool.awaiting.values() {
            for (p, b) in &w.bytes {
                *by_payer.entry(*p).or_default() += b;
            }
        }
        assert_eq!(pool.awaiting_bytes, by_payer.values().sum::<usize>());
        for (name, p) in &pool.payers {
            assert_eq!(
                p.awaiting_bytes,
                by_payer.get(name).copied().unwrap_or(0),
                "{name}"
            );
        }
    }

    /// A waiting bundle whose reference never comes pays nothing, so what waits is bounded:
    /// one payer's transactions take at most its share of the room, all of them at most the
    /// room, each bundle at least its floor, and a bundle past a bound is refused with
    /// `TRY_LATER` (one that does not wait is not). The room is free again once the bundles
    /// stop waiting, leave, or give way to one that waits for less.
    #[test]
    fn the_room_for_bundles_waiting_for_a_reference_block_is_bounded_per_payer_and_in_all() {
        const TX: usize = 60 << 10;
        // 8: a bundle takes at least MIN_AWAITING_BUNDLE_BYTES, 64 KiB.
        let per_payer = MAX_AWAITING_BYTES_PER_PAYER / MIN_AWAITING_BUNDLE_BYTES;
        let mut pool = pool();
        let next = ((HEIGHT + 1) as u16, 0x600d);
        let mut hash = 0u32;
        let mut admit = |pool: &mut Mempool, txs: Vec<PreparedTx>, awaited: Vec<(u16, u32)>| {
            hash += 1;
            let mut h = [0; 32];
            h[..4].copy_from_slice(&hash.to_le_bytes());
            let admitted = pool.admit_now(h, txs, &rich(), awaited);
            assert_room_counted(pool);
            admitted.map_err(|r| r.code)
        };
        for n in 0..per_payer as u16 {
            assert_eq!(
                admit(&mut pool, vec![sized("alice", TX, n, next)], vec![next]),
                Ok(())
            );
        }
        let over = sized("alice", TX, 100, next);
        assert_eq!(
            admit(&mut pool, vec![over.clone()], vec![next]),
            Err(code::TRY_LATER),
            "past alice's share"
        );
        assert_eq!(
            admit(&mut pool, vec![sized("bob", TX, 0, next)], vec![next]),
            Ok(()),
            "another payer's share is its own"
        );
        assert_eq!(
            admit(&mut pool, vec![over.clone()], vec![]),
            Ok(()),
            "a bundle that does not wait takes no room"
        );

        // The commit of the awaited block ends the wait: the room is free again.
        pool.committed(HEIGHT + 1, HEAD_MS + 500, next, [0; 5], &[], &[]);
        assert_eq!(pool.awaiting_bytes, 0);
        assert_room_counted(&pool);
        let (next, later) = (((HEIGHT + 2) as u16, 0x600d), ((HEIGHT + 3) as u16, 0x600d));

        // Small bundles take the floor each: a payer's share holds 8 of them.
        let small: Vec<PreparedTx> = (0..per_payer as u16)
            .map(|n| sized("carol", 100, 300 + n, next))
            .collect();
        for t in &small {
            assert_eq!(admit(&mut pool, vec![t.clone()], vec![next, later]), Ok(()));
        }
        assert_eq!(
            admit(&mut pool, vec![sized("carol", 100, 1, next)], vec![next]),
            Err(code::TRY_LATER),
            "past carol's share, by the floor"
        );
        // One that waits for less displaces a bundle and takes the room it frees.
        assert_eq!(admit(&mut pool, vec![small[0].clone()], vec![next]), Ok(()));
        assert_eq!(pool.awaiting_bytes, per_payer * MIN_AWAITING_BUNDLE_BYTES);

        // 63 more payers fill the whole room; past it, even a payer with its share left
        // waits no more.
        for i in 1..MAX_AWAITING_BYTES / MAX_AWAITING_BYTES_PER_PAYER {
            let name = format!(
                "pay{}{}",
                (b'a' + (i / 8) as u8) as char,
                (b'a' + (i % 8) as u8) as char
            );
            for n in 0..per_payer as u16 {
                let t = sized(&name, 100, 400 + n, next);
                assert_eq!(admit(&mut pool, vec![t], vec![next]), Ok(()), "{name}");
            }
        }
        assert_eq!(pool.awaiting_bytes, MAX_AWAITING_BYTES);
        assert_eq!(
            admit(&mut pool, vec![sized("dave", 100, 1, next)], vec![next]),
            Err(code::TRY_LATER),
            "past the room"
        );
        assert_eq!(
            admit(&mut pool, vec![sized("dave", 100, 1, next)], vec![]),
            Ok(()),
            "a bundle that does not wait takes no room"
        );

        // Bundles that leave (here: their block took another reference) free their room.
        pool.committed(
            HEIGHT + 2,
            HEAD_MS + 1_000,
            (next.0, 0xbad),
            [0; 5],
            &[],
            &[],
        );
        assert_eq!(pool.awaiting_bytes, 0);
        assert_room_counted(&pool);
        assert_eq!(
            pool.size(),
            (per_payer + 2, per_payer + 2),
            "those that stopped waiting at the first commit stay, as does the one that never \
             waited for it; dave's, which did not wait either but names the block this commit \
             replaced, leaves too"
        );
    }

    /// A payer that signed a transaction naming a block that never came (another took its
    /// height) may have no transaction wait for a block for SUSPENDED_BLOCKS, even if its
    /// bundle left the pool before that block (expired, displaced); nor is anyone else
    /// suspended: a payer whose transaction shared the bundle, or one whose claim a jump of
    /// the head (a restored snapshot) left unproven. A rider pays the room for its own bytes,
    /// the namer what the bundle lacks of the floor; a payer claims one block a height.
    #[test]
    fn a_payer_that_named_a_block_that_never_came_may_not_wait_for_a_while() {
        let mut pool = pool();
        let refused = |r: Result<(), Refusal>| r.map_err(|r| r.code);
        let at = |height: u64, prefix: u32| (height as u16, prefix);
        let with_ref = |payer: &str, nonce: u8, r: (u16, u32), expires_ms: u64| {
            let mut t = paid(payer, 0, 0, nonce).tx.transaction;
            (t.ref_block_num, t.ref_block_prefix) = r;
            t.expiration_ms = expires_ms;
            PreparedTx::new(SignedTransaction::unsigned(t))
        };
        let late = HEAD_MS + 60_000;
        let (real, made_up) = (at(HEIGHT + 2, 0x600d), at(HEIGHT + 2, 0xbad));
        // Mallory's made-up claim rides with alice's real one; carol's, in a bundle that
        // expires before the block comes; dave's in one a bundle that waits for less
        // displaces (ivan's transaction, which rides along naming the real block, resent
        // alone); erin's rides along naming a committed block.
        let shared = vec![
            with_ref("alice", 1, real, late),
            with_ref("mallory", 2, made_up, late),
        ];
        pool.admit_now([1; 32], shared, &rich(), vec![real, made_up])
            .unwrap();
        let brief = vec![with_ref("carol", 3, made_up, HEAD_MS + 100)];
        pool.admit_now([2; 32], brief, &rich(), vec![made_up])
            .unwrap();
        let riding = with_ref("ivan", 4, real, late);
        let copied = vec![riding.clone(), with_ref("dave", 5, made_up, late)];
        pool.admit_now([3; 32], copied, &rich(), vec![real, made_up])
            .unwrap();
        let filler = sized("erin", 60 << 10, 6, (0, 0));
        let fill = vec![filler, with_ref("frank", 7, made_up, late)];
        pool.admit_now([4; 32], fill, &rich(), vec![made_up])
            .unwrap();
        let (erin, frank): (Name, Name) = ("erin".parse().unwrap(), "frank".parse().unwrap());
        let charged = &pool.awaiting[&[4; 32]].bytes;
        assert_eq!(charged.keys().copied().collect::<Vec<_>>(), [erin, frank]);
        assert!(charged[&erin] > 60 << 10, "a rider pays for its own bytes");
        assert_eq!(
            charged.values().sum::<usize>(),
            MIN_AWAITING_BUNDLE_BYTES,
            "the namer, for what the bundle lacks of the floor"
        );
        // One payer names one block a height: a second prefix is refused, in a bundle of its
        // own or beside the first.
        let again = vec![with_ref("mallory", 8, real, late)];
        assert_eq!(
            refused(pool.admit_now([6; 32], again, &rich(), vec![real])),
            Err(code::TRY_LATER)
        );
        let both = vec![
            with_ref("gina", 8, real, late),
            with_ref("gina", 9, made_up, late),
        ];
        assert_eq!(
            refused(pool.admit_now([6; 32], both, &rich(), vec![real, made_up])),
            Err(code::TRY_LATER)
        );
        assert_room_counted(&pool);
        pool.admit_now([5; 32], vec![riding], &rich(), vec![real])
            .unwrap();
        assert_eq!(pool.ready(&[3; 32], HEAD_MS + 1), None, "displaced");
        pool.committed(
            HEIGHT + 1,
            HEAD_MS + 500,
            at(HEIGHT + 1, 1),
            [0; 5],
            &[],
            &[],
        );
        assert_eq!(pool.ready(&[2; 32], HEAD_MS + 501), None, "expired");
        // A reference the head reached while the bundle was verified, as another block: the
        // bundle is refused, and claims nothing.
        let claims = pool.claim_count;
        let overtaken = at(HEIGHT + 1, 0xbad);
        let t = vec![with_ref("henry", 8, overtaken, late)];
        assert_eq!(
            refused(pool.admit_now([7; 32], t, &rich(), vec![overtaken])),
            Err(code::TRY_LATER)
        );
        assert_eq!(pool.claim_count, claims);
        // A claim below a committed height, which no commit can settle, leaves anyway.
        let stray: Name = "stray".parse().unwrap();
        pool.claims.entry(HEIGHT).or_default().insert(stray, 1);
        pool.claim_count += 1;
        pool.committed(HEIGHT + 2, HEAD_MS + 600, real, [0; 5], &[], &[]);
        assert_eq!(pool.ready(&[1; 32], HEAD_MS + 601), None, "dropped");
        assert!(pool.claims.keys().all(|&h| h > HEIGHT + 2));
        assert!(!pool.suspended.contains_key(&stray));

        let next = at(HEIGHT + 3, 1);
        let wait = |pool: &mut Mempool, hash: u8, payer: &str| {
            let t = with_ref(payer, hash, next, late);
            refused(pool.admit_now([hash; 32], vec![t], &rich(), vec![next]))
        };
        for (hash, payer, suspended) in [
            (10, "mallory", true),
            (11, "carol", true),
            (12, "dave", true),
            (13, "frank", true),
            (14, "alice", false),
            (15, "erin", false),
        ] {
            let expected = if suspended {
                Err(code::TRY_LATER)
            } else {
                Ok(())
            };
            assert_eq!(wait(&mut pool, hash, payer), expected, "{payer}");
        }
        assert_eq!(
            refused(pool.admit([16; 32], vec![with_ref("mallory", 16, real, late)], &rich())),
            Ok(()),
            "a bundle that does not wait"
        );
        let along = vec![
            with_ref("alice", 19, next, late),
            with_ref("mallory", 20, real, late),
        ];
        assert_eq!(
            refused(pool.admit_now([19; 32], along, &rich(), vec![next])),
            Ok(()),
            "riding along a bundle that waits, naming a committed block"
        );

        // Claims and suspensions are bounded: when either is full, no more bundles wait.
        let t = with_ref("zed", 21, next, late);
        let claims = pool.claim_count;
        pool.claim_count = MAX_CLAIMS;
        assert_eq!(
            refused(pool.admit_now([21; 32], vec![t.clone()], &rich(), vec![next])),
            Err(code::TRY_LATER)
        );
        pool.claim_count = claims;
        let suspended = pool.suspended.clone();
        pool.suspended
            .extend((0..MAX_SUSPENDED_PAYERS as u64).map(|i| (Name(i), u64::MAX)));
        assert_eq!(
            refused(pool.admit_now([21; 32], vec![t], &rich(), vec![next])),
            Err(code::TRY_LATER)
        );
        pool.suspended = suspended;

        // A claim a jump of the head leaves unproven suspends nobody.
        let far = at(HEIGHT + 8, 7);
        pool.admit_now(
            [17; 32],
            vec![with_ref("bob", 17, far, late)],
            &rich(),
            vec![far],
        )
        .unwrap();
        pool.set_head(HEIGHT + 7, HEAD_MS + 700, LIFETIME_MS, [0; 5]);
        pool.committed(
            HEIGHT + 8,
            HEAD_MS + 800,
            at(HEIGHT + 8, 9),
            [0; 5],
            &[],
            &[],
        );
        let next = at(HEIGHT + 9, 1);
        let t = with_ref("bob", 18, next, late);
        assert_eq!(
            refused(pool.admit_now([18; 32], vec![t], &rich(), vec![next])),
            Ok(())
        );

        // SUSPENDED_BLOCKS after the block that proved it wrong, mallory may wait again.
        let free_at = HEIGHT + 2 + SUSPENDED_BLOCKS;
        for (height, freed) in [(free_at - 1, false), (free_at, true)] {
            pool.committed(height, HEAD_MS + 1_000, at(height, 9), [0; 5], &[], &[]);
            let next = at(height + 1, 1);
            let t = with_ref("mallory", height as u8, next, late);
            let admitted = pool.admit_now([height as u8; 32], vec![t], &rich(), vec![next]);
            assert_eq!(refused(admitted).is_ok(), freed, "{height}");
        }
        assert!(pool.suspended.is_empty());
    }

    #[test]
    fn admission_is_the_chains_expiry_rule_at_the_next_blocks_earliest_time() {
        let next = HEAD_MS + MIN_BLOCK_STEP_MS;
        let code_of = |exp| pool().screen(&[tx(exp, 0)]).map_err(|r| r.code);
        assert_eq!(
            code_of(next),
            Err(code::EXPIRED),
            "expires at the next block"
        );
        assert_eq!(code_of(next + 1), Ok(()));
        assert_eq!(code_of(next + LIFETIME_MS), Ok(()), "the longest lifetime");
        assert_eq!(
            code_of(next + LIFETIME_MS + 1),
            Err(code::TRY_LATER),
            "valid once the clock moves on, or on a node that is not behind"
        );
    }

    /// Issue 24's gap: a max fee below the transaction's own size and intrinsic fuel at the
    /// next block's prices is refused at CheckTx, not only when a block rejects it; the
    /// prices are the ones the last commit left.
    #[test]
    fn issue_24_a_max_fee_below_the_intrinsic_fee_is_refused_at_the_next_blocks_prices() {
        let prices = tally_chain::FeeSchedule::STANDARD.start_price;
        let mut pool = Mempool::new(HEIGHT, HEAD_MS, LIFETIME_MS, prices);
        let code_of = |pool: &Mempool, max_fee| {
            pool.screen(&[paid("alice", max_fee, 0, 1)])
                .map_err(|r| r.code)
        };
        assert_eq!(code_of(&pool, 10), Err(code::MAX_FEE_TOO_LOW));
        assert_eq!(code_of(&pool, 1_000_000), Ok(()));
        // Prices fall to zero at the next commit: the same offer is enough.
        pool.committed(HEIGHT + 1, HEAD_MS + 500, (0, 0), [0; 5], &[], &[]);
        assert_eq!(code_of(&pool, 10), Ok(()));
    }

    /// Issue 24's proposal gap: a bundle admitted while its max fee paid for its size stops
    /// being proposable once a commit raises the prices past it. The pool drops it at that
    /// commit, and refuses it at CometBFT's recheck; a proposal carrying it (`pays`, `pay`:
    /// what PrepareProposal keeps and ProcessProposal accepts) is refused.
    #[test]
    fn issue_24_a_bundle_underpaid_at_the_new_prices_is_neither_kept_nor_proposable() {
        let mut pool = Mempool::new(HEIGHT, HEAD_MS, LIFETIME_MS, [0; 5]);
        let cheap = vec![paid("alice", 10, 0, 1)];
        let ample = vec![paid("bob", 1_000_000, 0, 2)];
        let rich = Balances {
            height: HEIGHT,
            balances: ["alice", "bob"]
                .map(|p| (p.parse().unwrap(), u64::MAX))
                .into(),
        };
        pool.admit([1; 32], cheap.clone(), &rich).unwrap();
        pool.admit([2; 32], ample, &rich).unwrap();
        assert_eq!(pool.pays(&[1; 32]), Some(Ok(())), "free at zero prices");
        let prices = tally_chain::FeeSchedule::STANDARD.start_price;
        pool.committed(HEIGHT + 1, HEAD_MS + 500, (0, 0), prices, &[], &[]);
        assert_eq!(pool.pays(&[1; 32]), None, "dropped at the commit");
        assert_eq!(pool.recheck(&[1; 32], &rich), None);
        assert_eq!(
            pool.pay(&cheap).map_err(|r| r.code),
            Err(code::MAX_FEE_TOO_LOW),
            "decoded again, it is refused"
        );
        assert_eq!(pool.pays(&[2; 32]), Some(Ok(())));
        assert_eq!(pool.recheck(&[2; 32], &rich), Some(Ok(())));
        // A proposal's bundle this node verified in ProcessProposal is held to the same rule.
        pool.proposed([([3; 32], cheap)]);
        assert_eq!(
            pool.pays(&[3; 32]).map(|p| p.map_err(|r| r.code)),
            Some(Err(code::MAX_FEE_TOO_LOW))
        );
    }

    #[test]
    fn issue_21_no_slack_past_the_longest_lifetime() {
        // The node used to admit transactions up to a minute past the chain's longest
        // lifetime; the next block would reject them (ExpirationTooFar).
        let refused = pool()
            .screen(&[tx(HEAD_MS + LIFETIME_MS + 30_000, 0)])
            .unwrap_err();
        assert_eq!(refused.code, code::TRY_LATER);
        assert!(
            refused.log.contains("more than 120000 ms"),
            "{}",
            refused.log
        );
    }

    #[test]
    fn a_transaction_is_refused_twice_in_a_bundle_and_once_pooled() {
        let mut pool = pool();
        let a = tx(HEAD_MS + 60_000, 1);
        let twice = pool.screen(&[a.clone(), a.clone()]).unwrap_err();
        assert_eq!(twice.code, code::DUPLICATE);
        pool.admit([1; 32], vec![a.clone()], &rich()).unwrap();
        assert_eq!(
            pool.screen(std::slice::from_ref(&a)).unwrap_err().code,
            code::DUPLICATE
        );
        assert_eq!(
            pool.admit([2; 32], vec![a], &rich()).unwrap_err().code,
            code::DUPLICATE
        );
    }

    #[test]
    fn finalize_takes_a_verified_bundle_once_and_commit_forgets_it() {
        let mut pool = pool();
        let a = tx(HEAD_MS + 60_000, 1);
        pool.admit([1; 32], vec![a.clone()], &rich()).unwrap();
        pool.proposed([([2; 32], vec![tx(HEAD_MS + 60_000, 2)])]);
        assert!(pool.knows(&[1; 32]) && pool.knows(&[2; 32]));
        assert_eq!(pool.take(&[1; 32]).unwrap()[0].id, a.id);
        assert!(
            pool.take(&[1; 32]).is_none(),
            "a second copy in the block is decoded anew"
        );
        assert!(pool.take(&[2; 32]).is_some());
        pool.committed(HEIGHT + 1, HEAD_MS + 500, (0, 0), [0; 5], &[[1; 32]], &[]);
        assert!(!pool.knows(&[1; 32]) && !pool.knows(&[2; 32]));
        pool.screen(&[a]).unwrap();
    }

    /// A pooled bundle holding a transaction the block included in another bundle (its key
    /// added or stripped) leaves at the commit, and what it asked of its payer with it; the
    /// pool then refuses none of the payer's new bundles for it.
    #[test]
    fn commit_drops_a_bundle_holding_a_transaction_the_block_included() {
        let mut pool = pool();
        let (a, b) = (tx(HEAD_MS + 60_000, 1), tx(HEAD_MS + 60_000, 2));
        pool.admit([1; 32], vec![a.clone()], &rich()).unwrap();
        pool.admit([2; 32], vec![b], &rich()).unwrap();
        pool.committed(
            HEIGHT + 1,
            HEAD_MS + 500,
            (0, 0),
            [0; 5],
            &[[9; 32]],
            &[a.id],
        );
        assert!(!pool.knows(&[1; 32]), "it holds a committed transaction");
        assert!(pool.knows(&[2; 32]), "the other stays");
        pool.screen(&[a]).unwrap();
    }

    #[test]
    fn recheck_and_commit_drop_what_the_next_block_could_not_include() {
        let mut pool = pool();
        pool.admit([1; 32], vec![tx(HEAD_MS + 1_000, 1)], &rich())
            .unwrap();
        pool.admit([2; 32], vec![tx(HEAD_MS + 60_000, 2)], &rich())
            .unwrap();
        pool.head_time_ms = HEAD_MS + 999;
        assert_eq!(
            pool.recheck(&[1; 32], &rich()),
            Some(Err(Refusal::new(
                code::EXPIRED,
                "the transaction expired at 1001000 ms; the block time is 1001000 ms"
            )))
        );
        assert_eq!(pool.recheck(&[1; 32], &rich()), None, "it left");
        assert_eq!(pool.recheck(&[2; 32], &rich()), Some(Ok(())));
        pool.committed(HEIGHT + 1, HEAD_MS + 60_000, (0, 0), [0; 5], &[], &[]);
        assert_eq!(pool.recheck(&[2; 32], &rich()), None);
        assert!(pool.payers.is_empty(), "payers leave with their bundles");
    }

    #[test]
    fn a_payer_cannot_queue_more_max_fees_than_its_committed_balance() {
        let mut pool = pool();
        let alice: Name = "alice".parse().unwrap();
        assert_eq!(pool.unknown_balances([&alice]), [alice]);
        pool.admit(
            [1; 32],
            vec![paid("alice", 10, 0, 1)],
            &read(HEIGHT, alice, 25),
        )
        .unwrap();
        assert!(
            pool.unknown_balances([&alice]).is_empty(),
            "known until the next commit"
        );
        pool.admit([2; 32], vec![paid("alice", 10, 0, 2)], &Balances::default())
            .unwrap();
        let refused = pool
            .admit([3; 32], vec![paid("alice", 10, 0, 3)], &Balances::default())
            .unwrap_err();
        assert_eq!(refused.code, code::CANNOT_PAY);
        assert!(
            refused.log.contains("has 25 coins committed")
                && refused.log.contains("may spend 20")
                && refused.log.contains("asks 10"),
            "{}",
            refused.log
        );
        assert_eq!(pool.pending_of(alice), 20, "a refusal reserves nothing");
        // The first commits; alice paid 4 in fees: 21 covers the second's 10 and 10 more.
        pool.committed(HEIGHT + 1, HEAD_MS + 100, (0, 0), [0; 5], &[[1; 32]], &[]);
        assert_eq!(pool.unknown_balances([&alice]), [alice], "a block old");
        // What PrepareProposal read is kept for the recheck; an account with nothing
        // pending is not.
        let bob: Name = "bob".parse().unwrap();
        let mut learnt = read(HEIGHT + 1, alice, 21);
        learnt.balances.insert(bob, 5);
        pool.learn(&learnt);
        assert!(pool.unknown_balances([&alice]).is_empty());
        assert!(!pool.payers.contains_key(&bob));
        pool.admit(
            [3; 32],
            vec![paid("alice", 10, 0, 3)],
            &read(HEIGHT + 1, alice, 21),
        )
        .unwrap();
        assert_eq!(pool.pending_of(alice), 20);
    }

    /// A transaction's native transfers count against its sender's balance in the pool, as
    /// its max fee does its payer's: else a payer could drain itself in one transaction and
    /// have its others rejected in the block for no fee. Only a transfer its sender
    /// authorizes counts: nobody can charge another's balance.
    #[test]
    fn native_transfers_count_against_the_senders_balance() {
        use tally_chain::system::NativeTransfer;
        let (alice, bob, mallory): (Name, Name, Name) = (
            "alice".parse().unwrap(),
            "bob".parse().unwrap(),
            "mallory".parse().unwrap(),
        );
        let moving = |payer: &str, from: Name, signer: Name, amount: u64, nonce: u8| {
            let mut t = paid(payer, 5, 0, nonce).tx.transaction;
            let mut action = NativeTransfer {
                from,
                to: bob,
                amount,
            }
            .action();
            // Signed by someone other than the sender, where the case asks for it.
            action.authorization = vec![signer];
            t.actions = vec![action];
            PreparedTx::new(SignedTransaction::unsigned(t))
        };
        let drain = moving("alice", alice, alice, 90, 1);
        assert_eq!(mempool_asked(std::slice::from_ref(&drain)), [(alice, 95)]);
        let mut pool = pool();
        let balances = Balances {
            height: HEIGHT,
            balances: [(alice, 100), (mallory, 100)].into(),
        };
        pool.admit([1; 32], vec![drain], &balances).unwrap();
        let refused = pool.admit([2; 32], vec![paid("alice", 10, 0, 2)], &balances);
        assert_eq!(refused.unwrap_err().code, code::CANNOT_PAY, "95 + 10 > 100");
        pool.admit([3; 32], vec![paid("alice", 5, 0, 3)], &balances)
            .unwrap();

        // A sponsored transfer: bob pays the fee, alice's coins move.
        let sponsored = moving("bob", alice, alice, 7, 5);
        assert_eq!(
            mempool_asked(std::slice::from_ref(&sponsored)),
            [(alice, 7), (bob, 5)]
        );
        // Mallory pays for a transfer out of alice that alice does not authorize: it fails in
        // the block, and asks nothing of alice here.
        let forged = moving("mallory", alice, mallory, 1_000, 4);
        assert_eq!(mempool_asked(std::slice::from_ref(&forged)), [(mallory, 5)]);
        pool.admit([4; 32], vec![forged], &balances).unwrap();
        assert_eq!(pool.pending_of(alice), 100);
    }

    /// A proposal takes bundles in order while the committed balances cover what each asks
    /// of every account; one it does not know what asks, or of an unknown account, it leaves.
    #[test]
    fn a_proposal_takes_bundles_while_the_balances_cover_them() {
        let (alice, bob): (Name, Name) = ("alice".parse().unwrap(), "bob".parse().unwrap());
        let asks = |pairs: &[(Name, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let (a6, a5, b3, ab) = (
            asks(&[(alice, 6)]),
            asks(&[(alice, 5)]),
            asks(&[(bob, 3)]),
            asks(&[(alice, 4), (bob, 1)]),
        );
        let carol = asks(&[("carol".parse().unwrap(), 1)]);
        let balances: BTreeMap<Name, u64> = [(alice, 10), (bob, 3)].into();
        assert_eq!(
            affordable(
                &[
                    Some(&a6),
                    Some(&a5),
                    Some(&b3),
                    Some(&ab),
                    None,
                    Some(&carol)
                ],
                balances.clone()
            ),
            [true, false, true, false, false, false],
            "alice has 4 left after the first, bob none after the third"
        );
        assert_eq!(affordable(&[Some(&ab), Some(&a6)], balances), [true, true]);
    }

    #[test]
    fn a_bundle_asks_the_sum_of_its_payers_max_fees() {
        let mut pool = pool();
        let bob: Name = "bob".parse().unwrap();
        let two = vec![paid("bob", 6, 0, 1), paid("bob", 6, 0, 2)];
        assert_eq!(mempool_asked(&two), [(bob, 12)]);
        let refused = pool.admit([1; 32], two, &read(HEIGHT, bob, 11));
        assert_eq!(refused.unwrap_err().code, code::CANNOT_PAY);
        assert!(pool.payers.is_empty());
        pool.admit([2; 32], vec![paid("bob", 6, 0, 1)], &read(HEIGHT, bob, 11))
            .unwrap();
    }

    fn mempool_asked(txs: &[PreparedTx]) -> Vec<(Name, u64)> {
        asked(txs).into_iter().collect()
    }

    #[test]
    fn recheck_drops_bundles_until_the_payers_balance_covers_the_rest() {
        let mut pool = pool();
        let carol: Name = "carol".parse().unwrap();
        let at = read(HEIGHT, carol, 30);
        for i in 1..=3u8 {
            pool.admit([i; 32], vec![paid("carol", 10, 0, i)], &at)
                .unwrap();
        }
        // Carol's balance fell to 20 in a block holding none of these (a transfer away).
        pool.committed(HEIGHT + 1, HEAD_MS + 100, (0, 0), [0; 5], &[], &[]);
        assert_eq!(pool.unknown_balances_of(&[1; 32]), Some(vec![carol]));
        let now = read(HEIGHT + 1, carol, 20);
        let first = pool.recheck(&[1; 32], &now).unwrap().unwrap_err();
        assert_eq!(first.code, code::CANNOT_PAY);
        assert!(first.log.contains("has 20 coins"), "{}", first.log);
        assert_eq!(pool.recheck(&[2; 32], &Balances::default()), Some(Ok(())));
        assert_eq!(pool.recheck(&[3; 32], &Balances::default()), Some(Ok(())));
        assert_eq!(pool.pending_of(carol), 20);
    }

    fn candidate(bytes: u64, tips: u64) -> Candidate {
        Candidate {
            bytes,
            fuel: 1,
            tips,
        }
    }

    #[test]
    fn a_proposal_keeps_arrival_order_when_everything_fits() {
        let c = [candidate(100, 0), candidate(100, 50), candidate(100, 9)];
        assert_eq!(propose(&c, 300, 3), [0, 1, 2]);
    }

    #[test]
    fn a_full_proposal_takes_the_highest_tips_per_byte_first_ties_in_arrival_order() {
        // 5, 0, 10, 5 and 5 per 100 bytes; only three fit.
        let c = [
            candidate(100, 5),
            candidate(100, 0),
            candidate(200, 20),
            candidate(100, 5),
            candidate(100, 5),
        ];
        assert_eq!(propose(&c, 400, u64::MAX), [2, 0, 3]);
        // A big high bidder that does not fit leaves room for smaller ones.
        let c = [candidate(100, 1), candidate(500, 1_000), candidate(100, 2)];
        assert_eq!(propose(&c, 300, u64::MAX), [2, 0]);
        // The fuel budget binds as bytes do; the first bundle goes whatever its fuel.
        let heavy = Candidate {
            bytes: 10,
            fuel: 100,
            tips: 1,
        };
        assert_eq!(propose(&[heavy, candidate(10, 0)], 1_000, 50), [0]);
    }
}
