//! Transactions: what a client sends, encoded deterministically with borsh.

use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::Name;
use tally_host_api::limits::{
    MAX_ACTIONS_PER_TX, MAX_MESSAGE_LEN, MAX_SIGNATURES_PER_TX, MAX_TX_BYTES,
};

use crate::error::TxError;

/// One call of a contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The account whose contract runs the action.
    pub account: Name,
    /// The action's name, e.g. `transfer`.
    pub name: Name,
    /// Accounts that authorize this action; the contract checks them with `require_auth`.
    pub authorization: Vec<Name>,
    /// The action's data, as the contract's ABI encodes it.
    pub data: Vec<u8>,
}

/// A transaction: actions that apply atomically, valid until `expiration`, and bound to a
/// recent block (TaPoS) so it cannot be replayed on another fork or chain.
///
/// Its encoding (the `borsh` traits are implemented by hand, see [`crate::wire`]): the
/// expiration as a varint, `ref_block_num` (2 bytes LE), `ref_block_prefix` (4 bytes LE),
/// the actions (a varint count; each: account and name, 8 bytes LE each, the authorizations as
/// a varint count of 8-byte names, the data as a varint length and its bytes), the payer (a
/// byte 0 when it is the [implied payer](Transaction::implied_payer), else 1 and its 8 bytes),
/// then `max_fee` and `tip` as varints. Every value has exactly one encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Last moment (milliseconds since the Unix epoch, in block time) it may be included.
    pub expiration_ms: u64,
    /// The low 16 bits of the height of a recent block.
    pub ref_block_num: u16,
    /// Bytes 8..12 of that block's id, little-endian: proves the sender saw that block.
    pub ref_block_prefix: u32,
    /// The actions, run in order.
    pub actions: Vec<Action>,
    /// The account that pays the transaction's fee, from its native balance. It must sign
    /// (its signature comes first), whether or not it authorizes an action: a transaction
    /// nobody signs is refused at decode.
    pub payer: Name,
    /// The most the payer will pay, in coin units: the fee at the block's prices plus the
    /// tip, cut to this. Its fuel, reads and writes are bounded by what it buys; a transaction
    /// whose fee at the block's prices still exceeds it fails (and pays for what it used, up
    /// to this); one whose payer's balance is below it is not included.
    pub max_fee: u64,
    /// What the payer offers the block's proposer on top of the fee, in coin units.
    pub tip: u64,
}

/// A max fee that covers any ordinary transaction at a public network's starting prices
/// (a token transfer costs ~1,300 coin units at [`crate::fee::FeeSchedule::STANDARD`]'s
/// starting prices; the largest `setcode` about 1.1 M for its bytes and 1.1 M for its fuel),
/// with room for prices 4x higher: what `tally push` and the SDKs offer unless told.
pub const DEFAULT_MAX_FEE: u64 = 10_000_000;

/// A transaction id: the BLAKE3 hash of the unsigned transaction's borsh encoding. Signatures sign it,
/// and duplicates are detected by it; blocks commit to the signed bytes as well.
pub type TxId = [u8; 32];

impl Transaction {
    /// A transaction of `actions` valid until `expiration_ms`, bound to the block `tapos`
    /// names, paid for by the first account that authorizes an action (`payer` otherwise
    /// unset: the system account) with [`DEFAULT_MAX_FEE`] and no tip.
    pub fn new(expiration_ms: u64, tapos: (u16, u32), actions: Vec<Action>) -> Self {
        let mut tx = Self {
            expiration_ms,
            ref_block_num: tapos.0,
            ref_block_prefix: tapos.1,
            actions,
            payer: crate::system::SYSTEM,
            max_fee: DEFAULT_MAX_FEE,
            tip: 0,
        };
        tx.payer = tx.implied_payer();
        tx
    }

    /// The accounts that must sign it, in the order their signatures go: the payer, then
    /// each authorizing account where it first authorizes an action (repeats included).
    pub fn signers(&self) -> impl Iterator<Item = Name> + Clone + '_ {
        std::iter::once(self.payer).chain(
            self.actions
                .iter()
                .flat_map(|a| a.authorization.iter().copied()),
        )
    }

    /// The payer a transaction has unless it names another: the first account that
    /// authorizes an action, or the system account if none does (what [`Transaction::new`]
    /// picks). Such a payer is not written in the encoding (issue 26: 7 bytes a transfer).
    pub fn implied_payer(&self) -> Name {
        self.actions
            .iter()
            .flat_map(|a| a.authorization.first())
            .copied()
            .next()
            .unwrap_or(crate::system::SYSTEM)
    }

    /// The distinct accounts that must sign it, in the order their signatures go (the
    /// [signers](Transaction::signers) without repeats): the `index`-th, if there are that
    /// many. Without allocating; admission bounds the work to `MAX_ACTIONS_PER_TX` x
    /// `MAX_SIGNATURES_PER_TX` names.
    pub fn signer_at(&self, index: usize) -> Option<Name> {
        let mut seen = 0;
        for (at, account) in self.signers().enumerate() {
            if self.signers().take(at).any(|a| a == account) {
                continue;
            }
            if seen == index {
                return Some(account);
            }
            seen += 1;
        }
        None
    }

    /// Its deterministic encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }

    /// Its id.
    pub fn id(&self) -> TxId {
        blake3::hash(&self.encode()).into()
    }
}

/// The borsh data of simplecoin's (and token-rs's) `transfer` action.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Transfer {
    /// Sender.
    pub from: Name,
    /// Recipient.
    pub to: Name,
    /// Amount of coins.
    pub amount: u64,
    /// Free text.
    pub memo: String,
}

impl Transfer {
    /// Its borsh encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }
}

/// One account's signature on a transaction.
///
/// The signing account is not encoded: signatures go in the canonical order, one for each
/// [distinct signer](Transaction::signer_at), so the `i`-th signature is the `i`-th signer's
/// (issue 26: 8 bytes a signature). The public key is encoded only when the signature
/// carries one: a signature by a registered account normally omits it (32 bytes), and is
/// then checked against the key the account has registered when the transaction executes.
/// Either way the rule is one: every signature verifies under the key registered for its
/// account when the transaction executes (a carried key must be that key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxSignature {
    /// The signing account (implied by the signature's place, not encoded).
    pub account: Name,
    /// The ed25519 public key that signed, if the signature carries it; `None`: the key the
    /// account has registered.
    pub public_key: Option<[u8; 32]>,
    /// The ed25519 signature of the transaction id.
    pub signature: [u8; 64],
}

impl TxSignature {
    /// Bytes it takes in the encoding: a byte saying whether a key follows, the key if it
    /// does, and the signature.
    pub const fn encoded_len(&self) -> usize {
        1 + if self.public_key.is_some() { 32 } else { 0 } + 64
    }
}

/// A transaction with the signatures of every account that authorizes one of its actions.
///
/// Its encoding is the transaction's encoding followed by the signatures (a varint count; each
/// a byte 0, or 1 and a 32-byte public key, then the 64-byte signature), so the unsigned id
/// can be hashed from a prefix of the signed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTransaction {
    /// What is signed.
    pub transaction: Transaction,
    /// One signature per authorizing account.
    pub signatures: Vec<TxSignature>,
}

impl SignedTransaction {
    /// Signs `transaction` with one key per authorizing account, each signature carrying its
    /// public key (what an account's first transaction, before its key is registered, needs).
    /// The signatures are put in the canonical order ([`SignedTransaction::check_limits`])
    /// whatever the order of `signers`.
    pub fn sign(transaction: Transaction, signers: &[(Name, &ed25519_dalek::SigningKey)]) -> Self {
        Self::sign_with(transaction, signers, |_| true)
    }

    /// Signs `transaction` as [`SignedTransaction::sign`] does, but omits each public key:
    /// every signer must have registered the key that signs by the time the transaction
    /// executes. 32 bytes less a signature; what clients send for registered accounts.
    pub fn sign_registered(
        transaction: Transaction,
        signers: &[(Name, &ed25519_dalek::SigningKey)],
    ) -> Self {
        Self::sign_with(transaction, signers, |_| false)
    }

    /// Signs `transaction`, a signature carrying its public key where `carry_key(account)`.
    pub fn sign_with(
        transaction: Transaction,
        signers: &[(Name, &ed25519_dalek::SigningKey)],
        carry_key: impl Fn(Name) -> bool,
    ) -> Self {
        use ed25519_dalek::Signer;
        let id = transaction.id();
        let mut signers = signers.to_vec();
        signers.sort_by_key(|(account, _)| first_authorization(&transaction, *account));
        let signatures = signers
            .iter()
            .map(|(account, key)| TxSignature {
                account: *account,
                public_key: carry_key(*account).then(|| key.verifying_key().to_bytes()),
                signature: key.sign(&id).to_bytes(),
            })
            .collect();
        Self {
            transaction,
            signatures,
        }
    }

    /// A transaction with no signatures, for chains that do not check them (benchmarks of
    /// execution alone).
    pub fn unsigned(transaction: Transaction) -> Self {
        Self {
            transaction,
            signatures: Vec::new(),
        }
    }

    /// Its deterministic encoding: what a block stores and commits to.
    pub fn encode(&self) -> Vec<u8> {
        // Sized for the encoding (borsh's `to_vec` starts at 1 KiB): a block's prepared
        // transactions keep these buffers until it is committed.
        let hint = self.encoded_len_hint();
        let mut bytes = Vec::with_capacity(hint);
        self.serialize(&mut bytes)
            .expect("encoding into a Vec cannot fail");
        debug_assert!(bytes.len() <= hint, "{} > {hint}", bytes.len());
        bytes
    }

    /// At least as long as [`SignedTransaction::encode`] is (each varint counted at its
    /// longest): a capacity, never a limit.
    fn encoded_len_hint(&self) -> usize {
        let t = &self.transaction;
        let actions: usize = t
            .actions
            .iter()
            .map(|a| 16 + 10 + 8 * a.authorization.len() + 10 + a.data.len())
            .sum();
        let signatures = 10 + self.signatures.len() * (1 + 32 + 64);
        // Expiration, reference block, action count, payer, max fee and tip.
        10 + 2 + 4 + 10 + 9 + 10 + 10 + actions + signatures
    }

    /// Decodes a transaction received from outside (a client, a peer, a block) and admits it:
    /// its size is checked before anything is decoded, trailing bytes are refused, then
    /// every structural limit of [`SignedTransaction::check_limits`] applies, and its payer
    /// must have signed it. Nothing that fails here can be included in a block.
    pub fn decode(bytes: &[u8]) -> Result<Self, TxError> {
        if bytes.len() > MAX_TX_BYTES {
            return Err(TxError::TooLarge {
                bytes: bytes.len(),
                limit: MAX_TX_BYTES,
            });
        }
        let tx: Self = borsh::from_slice(bytes).map_err(|e| TxError::Malformed(e.to_string()))?;
        tx.check_limits(bytes.len())?;
        // Checked here, not in `check_limits`: a chain that does not check signatures (a
        // benchmark of execution alone) builds unsigned transactions in process, but nothing
        // from outside is ever unsigned.
        if tx.signatures.first().map(|s| s.account) != Some(tx.transaction.payer) {
            return Err(TxError::MissingSignature(tx.transaction.payer));
        }
        Ok(tx)
    }

    /// The admission limits on a transaction whose encoding is `encoded_len` bytes: its size,
    /// its number of actions, each action's authorizations and data, and its signatures, which
    /// must be in the canonical order: the payer's first, then by where their account first
    /// authorizes an action, each account once. A transaction then has exactly one valid encoding: reordering the
    /// signatures of a valid one would otherwise give other signed bytes, and another block
    /// root, for the same transaction id.
    pub fn check_limits(&self, encoded_len: usize) -> Result<(), TxError> {
        if encoded_len > MAX_TX_BYTES {
            return Err(TxError::TooLarge {
                bytes: encoded_len,
                limit: MAX_TX_BYTES,
            });
        }
        let actions = &self.transaction.actions;
        if actions.is_empty() {
            return Err(TxError::NoActions);
        }
        if actions.len() > MAX_ACTIONS_PER_TX {
            return Err(TxError::TooMany {
                what: "actions",
                count: actions.len(),
                limit: MAX_ACTIONS_PER_TX,
            });
        }
        if self.transaction.tip > self.transaction.max_fee {
            return Err(TxError::TipAboveMaxFee {
                tip: self.transaction.tip,
                max_fee: self.transaction.max_fee,
            });
        }
        if self.signatures.len() > MAX_SIGNATURES_PER_TX {
            return Err(TxError::TooMany {
                what: "signatures",
                count: self.signatures.len(),
                limit: MAX_SIGNATURES_PER_TX,
            });
        }
        for (index, action) in actions.iter().enumerate() {
            if action.authorization.len() > MAX_SIGNATURES_PER_TX {
                return Err(TxError::TooMany {
                    what: "authorizations of an action",
                    count: action.authorization.len(),
                    limit: MAX_SIGNATURES_PER_TX,
                });
            }
            // Code travels in `setcode`'s data; everything else is a contract's message.
            let limit = if action.account == crate::system::SYSTEM {
                MAX_TX_BYTES
            } else {
                MAX_MESSAGE_LEN as usize
            };
            if action.data.len() > limit {
                return Err(TxError::ActionDataTooLarge {
                    index,
                    bytes: action.data.len(),
                    limit,
                });
            }
        }
        // The encoding does not carry the accounts: the i-th signature is the i-th distinct
        // signer's, so any other assignment has no encoding. (Signers who did not sign are
        // found when the signatures are checked: `crypto::check_signers`.)
        for (i, sig) in self.signatures.iter().enumerate() {
            if self.transaction.signer_at(i) != Some(sig.account) {
                // A signature from an account that authorizes nothing has no place in the order.
                return Err(match first_authorization(&self.transaction, sig.account) {
                    None => TxError::UnneededSignature(sig.account),
                    Some(_) => TxError::SignatureOrder(sig.account),
                });
            }
        }
        Ok(())
    }

    /// The transaction id computed from this transaction's own signed encoding, whose prefix
    /// is the unsigned encoding: one encoding gives both the block bytes and the id.
    pub(crate) fn id_from_encoding(&self, encoded: &[u8]) -> TxId {
        let signatures: usize = self.signatures.iter().map(TxSignature::encoded_len).sum();
        let unsigned =
            encoded.len() - crate::wire::varint_len(self.signatures.len() as u64) - signatures;
        blake3::hash(&encoded[..unsigned]).into()
    }
}

/// Where `account` first comes among `tx`'s [signers](Transaction::signers): 0 for the
/// payer; `None` if it need not sign. Admission bounds the search to `MAX_ACTIONS_PER_TX` x
/// `MAX_SIGNATURES_PER_TX` names.
fn first_authorization(tx: &Transaction, account: Name) -> Option<usize> {
    tx.signers().position(|a| a == account)
}

/// What a block holds besides its header: the exact signed bytes of each included
/// transaction, and whether it succeeded. The header's transactions root commits to both.
#[derive(Debug, Clone, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockBody {
    /// The included transactions, in order.
    pub transactions: Vec<SignedTransaction>,
    /// Whether each one succeeded (a failed one changed nothing).
    pub success: Vec<bool>,
    /// The events each one emitted, in order (none for a failed one): the block commits to
    /// them, so an indexer can trust them.
    pub events: Vec<Vec<crate::receipt::Event>>,
}

impl BlockBody {
    /// The transactions root of a body's encoding: its BLAKE3 hash. The encoding holds each
    /// transaction's exact signed bytes and its outcome (success and events), so the root commits to the signatures
    /// too, and a stored block whose signatures were swapped or altered no longer matches its
    /// header.
    pub fn transactions_root(encoded_body: &[u8]) -> [u8; 32] {
        blake3::hash(encoded_body).into()
    }

    /// The root of this body (encoding it again).
    pub fn root(&self) -> [u8; 32] {
        Self::transactions_root(&borsh::to_vec(self).expect("encoding into a Vec cannot fail"))
    }
}

// The encoding, by hand: compact integers, an implied payer and implied signing accounts
// (see `Transaction` and `TxSignature`). Decoding refuses every encoding but the one
// `serialize` writes, so a transaction's id and block bytes are unambiguous.

use std::io::{self, Read, Write};

use crate::wire::{read_bytes, read_len, read_u8, read_varint, write_varint};

fn write_name<W: Write>(w: &mut W, name: Name) -> io::Result<()> {
    w.write_all(&name.0.to_le_bytes())
}

fn read_array<const N: usize, R: Read>(r: &mut R) -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    r.read_exact(&mut out)?;
    Ok(out)
}

fn read_name<R: Read>(r: &mut R) -> io::Result<Name> {
    Ok(Name(u64::from_le_bytes(read_array(r)?)))
}

fn malformed(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A tag byte that must be 0 or 1.
fn read_flag<R: Read>(r: &mut R, what: &str) -> io::Result<bool> {
    match read_u8(r)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(malformed(format!("{what}: tag {other}, not 0 or 1"))),
    }
}

impl BorshSerialize for Transaction {
    fn serialize<W: Write>(&self, w: &mut W) -> io::Result<()> {
        write_varint(w, self.expiration_ms)?;
        w.write_all(&self.ref_block_num.to_le_bytes())?;
        w.write_all(&self.ref_block_prefix.to_le_bytes())?;
        write_varint(w, self.actions.len() as u64)?;
        for action in &self.actions {
            write_name(w, action.account)?;
            write_name(w, action.name)?;
            write_varint(w, action.authorization.len() as u64)?;
            for &account in &action.authorization {
                write_name(w, account)?;
            }
            write_varint(w, action.data.len() as u64)?;
            w.write_all(&action.data)?;
        }
        if self.payer == self.implied_payer() {
            w.write_all(&[0])?;
        } else {
            w.write_all(&[1])?;
            write_name(w, self.payer)?;
        }
        write_varint(w, self.max_fee)?;
        write_varint(w, self.tip)
    }
}

impl BorshDeserialize for Transaction {
    fn deserialize_reader<R: Read>(r: &mut R) -> io::Result<Self> {
        let expiration_ms = read_varint(r)?;
        let ref_block_num = u16::from_le_bytes(read_array(r)?);
        let ref_block_prefix = u32::from_le_bytes(read_array(r)?);
        // Counts are bounded by the size limit before anything is allocated; the admission
        // limits (`check_limits`) then give each its own error.
        let count = read_len(r, MAX_TX_BYTES, "actions")?;
        let mut actions = Vec::new();
        for _ in 0..count {
            let account = read_name(r)?;
            let name = read_name(r)?;
            let auths = read_len(r, MAX_TX_BYTES / 8, "authorizations")?;
            let mut authorization = Vec::new();
            for _ in 0..auths {
                authorization.push(read_name(r)?);
            }
            let len = read_len(r, MAX_TX_BYTES, "action data")?;
            let data = read_bytes(r, len)?;
            actions.push(Action {
                account,
                name,
                authorization,
                data,
            });
        }
        let mut tx = Self {
            expiration_ms,
            ref_block_num,
            ref_block_prefix,
            actions,
            payer: crate::system::SYSTEM,
            max_fee: 0,
            tip: 0,
        };
        let implied = tx.implied_payer();
        tx.payer = if read_flag(r, "payer")? {
            let payer = read_name(r)?;
            if payer == implied {
                return Err(malformed(format!(
                    "the payer {payer} is written out, but it is the implied payer (tag 0)"
                )));
            }
            payer
        } else {
            implied
        };
        tx.max_fee = read_varint(r)?;
        tx.tip = read_varint(r)?;
        Ok(tx)
    }
}

impl BorshSerialize for SignedTransaction {
    fn serialize<W: Write>(&self, w: &mut W) -> io::Result<()> {
        self.transaction.serialize(w)?;
        write_varint(w, self.signatures.len() as u64)?;
        for sig in &self.signatures {
            match &sig.public_key {
                None => w.write_all(&[0])?,
                Some(key) => {
                    w.write_all(&[1])?;
                    w.write_all(key)?;
                }
            }
            w.write_all(&sig.signature)?;
        }
        Ok(())
    }
}

impl BorshDeserialize for SignedTransaction {
    fn deserialize_reader<R: Read>(r: &mut R) -> io::Result<Self> {
        let transaction = Transaction::deserialize_reader(r)?;
        let count = read_len(r, MAX_SIGNATURES_PER_TX, "signatures")?;
        let mut signatures = Vec::with_capacity(count);
        for i in 0..count {
            let account = transaction.signer_at(i).ok_or_else(|| {
                malformed(format!(
                    "{count} signatures, but only {i} accounts must sign"
                ))
            })?;
            let public_key = read_flag(r, "public key")?
                .then(|| read_array(r))
                .transpose()?;
            signatures.push(TxSignature {
                account,
                public_key,
                signature: read_array(r)?,
            });
        }
        Ok(Self {
            transaction,
            signatures,
        })
    }
}
