//! Baselines a run is compared with: the same transfer compiled into the node (the limit for
//! any runtime) and the same `.wasm` in the wasmi interpreter.

pub mod wasmi;

/// simplecoin's `transfer` (contracts/simplecoin.c) in plain Rust over the same host calls:
/// the `native` baseline of `tally bench`, the limit for any runtime.
pub fn native_simplecoin(
    host: &mut dyn tally_host_api::Host,
) -> Result<(), tally_host_api::HostError> {
    use tally_host_api::{Abort, AbortCode};
    let mut msg = [0u8; 24];
    let data = host.message();
    let n = data.len().min(24);
    msg[..n].copy_from_slice(&data[..n]);
    let word = |i: usize| u64::from_le_bytes(msg[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (from, to, amount) = (word(0), word(1), word(2));
    let balance =
        |v: Option<&[u8]>| -> Option<u64> { Some(u64::from_le_bytes(v?.try_into().ok()?)) };
    let Some(mut from_balance) = balance(host.load(&from.to_le_bytes())?) else {
        return Err(Abort::new(AbortCode::AssertFailed, "no existing balance").into());
    };
    if from_balance < amount {
        return Err(Abort::new(AbortCode::AssertFailed, "insufficient funds").into());
    }
    let mut to_balance = balance(host.load(&to.to_le_bytes())?).unwrap_or(0);
    to_balance = to_balance.wrapping_add(amount);
    from_balance -= amount;
    if from_balance != 0 {
        host.store(&from.to_le_bytes(), &from_balance.to_le_bytes())?;
    } else {
        host.remove(&from.to_le_bytes())?;
    }
    host.store(&to.to_le_bytes(), &to_balance.to_le_bytes())
}
