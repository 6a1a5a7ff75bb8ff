//! The ABCI socket server: CometBFT's four connections (consensus, mempool, query, snapshot),
//! one thread each, speaking varint-delimited protobuf (ABCI 2.0 of CometBFT v0.38).
//!
//! Written here rather than taken from tendermint-abci because the defaults there cost about
//! 40 ms per call (shared/PROBE.md): its TCP listener leaves Nagle's algorithm on and it
//! flushes after every response. Here TCP sockets get `TCP_NODELAY`, and responses are
//! buffered and flushed when CometBFT asks (`Flush`) or when no further request is already
//! waiting, so a burst of pipelined `CheckTx` calls costs one write.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use prost::Message;
use tendermint_proto::v0_38::abci::{
    Request, RequestApplySnapshotChunk, RequestCheckTx, RequestExtendVote, RequestFinalizeBlock,
    RequestInfo, RequestInitChain, RequestLoadSnapshotChunk, RequestOfferSnapshot,
    RequestPrepareProposal, RequestProcessProposal, RequestQuery, RequestVerifyVoteExtension,
    Response, ResponseApplySnapshotChunk, ResponseCheckTx, ResponseCommit, ResponseEcho,
    ResponseExtendVote, ResponseFinalizeBlock, ResponseFlush, ResponseInfo, ResponseInitChain,
    ResponseListSnapshots, ResponseLoadSnapshotChunk, ResponseOfferSnapshot,
    ResponsePrepareProposal, ResponseProcessProposal, ResponseQuery, ResponseVerifyVoteExtension,
    request, response, response_process_proposal, response_verify_vote_extension,
};

/// Largest ABCI message accepted. CometBFT's own limit is 2 GiB; a block is bounded by its
/// consensus parameter `block.max_bytes` (devnet sets 16 MiB, CometBFT's ceiling is 100 MiB),
/// so 128 MiB holds any block a valid configuration can send, with its protobuf framing.
pub const MAX_MESSAGE_BYTES: u64 = 128 << 20;

/// Read and write buffer per connection: a bundle of a thousand transfers is about 170 KB.
const BUFFER_BYTES: usize = 1 << 20;

/// An ABCI application: one method per request of CometBFT v0.38 (as tendermint-rs's
/// `Application`), each with a default that a Tally-less application would give. The
/// connection threads share one implementation; it owns its state and its locks.
pub trait Application: Send + Sync + 'static {
    /// Who the application is and the last block it committed (CometBFT's handshake).
    fn info(&self, _request: RequestInfo) -> ResponseInfo {
        ResponseInfo::default()
    }

    /// Genesis: called once, before the first block.
    fn init_chain(&self, _request: RequestInitChain) -> ResponseInitChain {
        ResponseInitChain::default()
    }

    /// A read of committed state.
    fn query(&self, _request: RequestQuery) -> ResponseQuery {
        ResponseQuery::default()
    }

    /// Whether a transaction may enter the mempool (and, on recheck, stay).
    fn check_tx(&self, _request: RequestCheckTx) -> ResponseCheckTx {
        ResponseCheckTx::default()
    }

    /// The proposer's block: by default the mempool's transactions as given.
    fn prepare_proposal(&self, request: RequestPrepareProposal) -> ResponsePrepareProposal {
        ResponsePrepareProposal { txs: request.txs }
    }

    /// Whether a proposed block may be voted for.
    fn process_proposal(&self, _request: RequestProcessProposal) -> ResponseProcessProposal {
        ResponseProcessProposal {
            status: response_process_proposal::ProposalStatus::Accept as i32,
        }
    }

    /// Executes a decided block.
    fn finalize_block(&self, _request: RequestFinalizeBlock) -> ResponseFinalizeBlock {
        ResponseFinalizeBlock::default()
    }

    /// Makes the last finalized block durable.
    fn commit(&self) -> ResponseCommit {
        ResponseCommit::default()
    }

    /// Data to attach to this validator's precommit (none by default).
    fn extend_vote(&self, _request: RequestExtendVote) -> ResponseExtendVote {
        ResponseExtendVote::default()
    }

    /// Whether another validator's vote extension is acceptable.
    fn verify_vote_extension(
        &self,
        _request: RequestVerifyVoteExtension,
    ) -> ResponseVerifyVoteExtension {
        ResponseVerifyVoteExtension {
            status: response_verify_vote_extension::VerifyStatus::Accept as i32,
        }
    }

    /// State sync: the snapshots offered (none by default: state sync is off).
    fn list_snapshots(&self) -> ResponseListSnapshots {
        ResponseListSnapshots::default()
    }

    /// State sync: whether to restore a peer's snapshot.
    fn offer_snapshot(&self, _request: RequestOfferSnapshot) -> ResponseOfferSnapshot {
        ResponseOfferSnapshot::default()
    }

    /// State sync: a chunk of one of this node's snapshots.
    fn load_snapshot_chunk(&self, _request: RequestLoadSnapshotChunk) -> ResponseLoadSnapshotChunk {
        ResponseLoadSnapshotChunk::default()
    }

    /// State sync: restores a chunk of a peer's snapshot.
    fn apply_snapshot_chunk(
        &self,
        _request: RequestApplySnapshotChunk,
    ) -> ResponseApplySnapshotChunk {
        ResponseApplySnapshotChunk::default()
    }

    /// Answers `request` (never `Flush` or `Echo`, which the server answers itself). An
    /// implementation may wrap [`dispatch`], to time requests for example.
    fn handle(&self, request: request::Value) -> response::Value {
        dispatch(self, request)
    }
}

/// Calls the method of `app` that answers `request`.
pub fn dispatch<A: Application + ?Sized>(app: &A, request: request::Value) -> response::Value {
    use request::Value as Q;
    use response::Value as R;
    match request {
        Q::Echo(e) => R::Echo(ResponseEcho { message: e.message }),
        Q::Flush(_) => R::Flush(ResponseFlush {}),
        Q::Info(r) => R::Info(app.info(r)),
        Q::InitChain(r) => R::InitChain(app.init_chain(r)),
        Q::Query(r) => R::Query(app.query(r)),
        Q::CheckTx(r) => R::CheckTx(app.check_tx(r)),
        Q::PrepareProposal(r) => R::PrepareProposal(app.prepare_proposal(r)),
        Q::ProcessProposal(r) => R::ProcessProposal(app.process_proposal(r)),
        Q::FinalizeBlock(r) => R::FinalizeBlock(app.finalize_block(r)),
        Q::Commit(_) => R::Commit(app.commit()),
        Q::ExtendVote(r) => R::ExtendVote(app.extend_vote(r)),
        Q::VerifyVoteExtension(r) => R::VerifyVoteExtension(app.verify_vote_extension(r)),
        Q::ListSnapshots(_) => R::ListSnapshots(app.list_snapshots()),
        Q::OfferSnapshot(r) => R::OfferSnapshot(app.offer_snapshot(r)),
        Q::LoadSnapshotChunk(r) => R::LoadSnapshotChunk(app.load_snapshot_chunk(r)),
        Q::ApplySnapshotChunk(r) => R::ApplySnapshotChunk(app.apply_snapshot_chunk(r)),
    }
}

/// Where the server listens: `tcp://HOST:PORT` or `unix://PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A TCP socket (Nagle's algorithm is turned off on every connection).
    Tcp(String),
    /// A unix-domain socket.
    Unix(PathBuf),
}

impl std::str::FromStr for Address {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            Ok(Self::Tcp(rest.to_string()))
        } else if let Some(rest) = s.strip_prefix("unix://") {
            Ok(Self::Unix(PathBuf::from(rest)))
        } else {
            bail!("an ABCI address is tcp://HOST:PORT or unix://PATH, not {s:?}")
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "tcp://{a}"),
            Self::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// Serves `app` on `address` until the process ends. Each accepted connection gets a thread.
pub fn serve(address: &Address, app: Arc<dyn Application>) -> anyhow::Result<()> {
    match address {
        Address::Tcp(addr) => {
            let listener = TcpListener::bind(addr)
                .with_context(|| format!("cannot listen on tcp://{addr}"))?;
            for stream in listener.incoming() {
                let stream = stream.context("accepting an ABCI connection")?;
                stream.set_nodelay(true)?;
                let reader = stream.try_clone()?;
                spawn_connection(reader, stream, app.clone());
            }
        }
        Address::Unix(path) => {
            // A socket file left by a killed node would make bind fail; it is ours to replace.
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path)
                .with_context(|| format!("cannot listen on unix://{}", path.display()))?;
            for stream in listener.incoming() {
                let stream = stream.context("accepting an ABCI connection")?;
                let reader = stream.try_clone()?;
                spawn_connection(reader, stream, app.clone());
            }
        }
    }
    Ok(())
}

fn spawn_connection<R, W>(reader: R, writer: W, app: Arc<dyn Application>)
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    std::thread::spawn(move || {
        if let Err(e) = connection(reader, writer, app.as_ref())
            && e.kind() != io::ErrorKind::UnexpectedEof
        {
            eprintln!("tally node: ABCI connection closed: {e}");
        }
    });
}

/// Reads an unsigned varint (protobuf's), or `None` at a clean end of stream.
fn read_varint(reader: &mut impl BufRead) -> io::Result<Option<u64>> {
    let mut value = 0u64;
    for i in 0..10 {
        let mut byte = [0u8];
        if reader.read(&mut byte)? == 0 {
            return if i == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        value |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "ABCI length prefix is not a varint",
    ))
}

/// One connection: read a request, answer it, until CometBFT closes the socket.
pub fn connection(reader: impl Read, writer: impl Write, app: &dyn Application) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(BUFFER_BYTES, reader);
    let mut writer = BufWriter::with_capacity(BUFFER_BYTES, writer);
    let mut message = Vec::new();
    let mut out = Vec::new();
    loop {
        let Some(len) = read_varint(&mut reader)? else {
            return Ok(());
        };
        if len > MAX_MESSAGE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ABCI message of {len} bytes exceeds {MAX_MESSAGE_BYTES}"),
            ));
        }
        // Grown as the bytes arrive: resizing to the claimed length first committed up to
        // MAX_MESSAGE_BYTES a connection before a byte of it came (helper-43's review).
        message.clear();
        if message.capacity() > BUFFER_BYTES {
            message = Vec::new(); // one large request's buffer is not kept for the connection
        }
        if (&mut reader).take(len).read_to_end(&mut message)? as u64 != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let request = Request::decode(message.as_slice())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let (value, flush) = match request.value {
            Some(request::Value::Flush(_)) => (response::Value::Flush(ResponseFlush {}), true),
            Some(request::Value::Echo(echo)) => (
                response::Value::Echo(ResponseEcho {
                    message: echo.message,
                }),
                false,
            ),
            Some(value) => (app.handle(value), false),
            None => (
                response::Value::Exception(tendermint_proto::v0_38::abci::ResponseException {
                    error: "empty ABCI request".into(),
                }),
                false,
            ),
        };
        out.clear();
        Response { value: Some(value) }
            .encode_length_delimited(&mut out)
            .expect("encoding into a Vec cannot fail");
        writer.write_all(&out)?;
        // Flush when asked, and whenever no further request is already buffered: the peer may
        // be waiting for this answer before it sends more.
        if flush || reader.buffer().is_empty() {
            writer.flush()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echoer;
    impl Application for Echoer {
        fn info(&self, _: RequestInfo) -> ResponseInfo {
            ResponseInfo {
                last_block_height: 7,
                ..Default::default()
            }
        }
    }

    #[test]
    fn a_pipelined_burst_gets_one_answer_per_request_in_order() {
        let mut input = Vec::new();
        for value in [
            request::Value::Info(Default::default()),
            request::Value::Flush(Default::default()),
            request::Value::Info(Default::default()),
        ] {
            Request { value: Some(value) }
                .encode_length_delimited(&mut input)
                .unwrap();
        }
        let mut output = Vec::new();
        connection(input.as_slice(), &mut output, &Echoer).unwrap();
        let mut rest = output.as_slice();
        let mut kinds = Vec::new();
        while !rest.is_empty() {
            let r = Response::decode_length_delimited(&mut rest).unwrap();
            kinds.push(match r.value.unwrap() {
                response::Value::Info(i) => format!("info {}", i.last_block_height),
                response::Value::Flush(_) => "flush".to_string(),
                other => format!("{other:?}"),
            });
        }
        assert_eq!(kinds, ["info 7", "flush", "info 7"]);
    }

    #[test]
    fn an_oversized_length_prefix_closes_the_connection_without_allocating_it() {
        let mut input = Vec::new();
        prost::encoding::encode_varint(MAX_MESSAGE_BYTES + 1, &mut input);
        let err = connection(input.as_slice(), Vec::new(), &Echoer).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
