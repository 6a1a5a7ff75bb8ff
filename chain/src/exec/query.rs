//! Read-only queries: a contract's `query` entry run against committed state, from outside the
//! chain (`tally query`, the node's ABCI Query) or from another contract (the `query` import,
//! through [`super::host::ActionHost`]). Both run in static mode, through the one executor.

use tally_host_api::limits::{FUEL_PER_QUERY, MAX_MESSAGE_LEN};
use tally_host_api::{Abort, AbortCode, BlockInfo, Name};
use tally_runtime::{Entry, Receipt};

use super::code::CodeMap;
use super::host::{Authority, Frame};
use super::journal::Journal;
use super::{Code, Exec};
use crate::chain::Chain;
use crate::error::ChainError;

impl Chain {
    /// Runs `contract`'s query `method` with `data` against the committed state, with at most
    /// [`FUEL_PER_QUERY`] fuel, committing nothing: its receipt carries the answer (the
    /// contract's return data) or why it failed. Nothing the chain holds changes. A query holds
    /// up to `MAX_CALL_DEPTH` instances of the runtime's pool while it runs, so a node runs
    /// queries between blocks (the node's ABCI Query takes the same lock as FinalizeBlock),
    /// never beside one. `Err` is the node's own fault.
    pub fn query(&self, contract: Name, method: Name, data: &[u8]) -> Result<Receipt, ChainError> {
        if data.len() > MAX_MESSAGE_LEN as usize {
            return Ok(Receipt::failed(
                Abort::new(
                    AbortCode::LimitExceeded,
                    format!("query data is {} bytes, over {MAX_MESSAGE_LEN}", data.len()),
                ),
                0,
            ));
        }
        // A journal and code map of its own: committed state only, whatever block is pending.
        let (mut journal, mut code, mut key) = (Journal::default(), CodeMap::default(), Vec::new());
        let head = self.head();
        let block = BlockInfo {
            time_ms: head.timestamp_ms,
            height: head.height,
        };
        let mut exec = Exec::new(
            self.runtime(),
            self.store(),
            &mut journal,
            Code::Load(&mut code),
            &mut key,
            block,
        );
        let Some(executor) = exec.executor(contract)? else {
            return Ok(Receipt::failed(
                Abort::new(
                    AbortCode::NoHandler,
                    format!("account {contract} has no contract"),
                ),
                0,
            ));
        };
        let frame = Frame {
            contract,
            message: data,
            authority: Authority::Signers(&[]),
            caller: Name(0),
            read_only: true,
        };
        exec.stack.push(contract);
        let entry = Entry::Query {
            receiver: contract,
            method,
        };
        exec.run_frame(&executor, frame, entry, FUEL_PER_QUERY, 0)
    }
}
