//! `tally node --metrics ADDR`: Prometheus metrics over plain HTTP, so an operator sees where a
//! node's time goes without a debugger.
//!
//! Served at any path of `ADDR`, in Prometheus's text format (version 0.0.4):
//! - `tally_abci_call_seconds{call}`: a histogram of each ABCI call's time: FinalizeBlock is a
//!   block's execution, Commit its durable write, CheckTx decoding and verifying a bundle's
//!   signatures, ProcessProposal verifying a proposal's, the snapshot calls serving and
//!   restoring state sync;
//! - `tally_height`, `tally_mempool_bundles`, `tally_mempool_transactions`,
//!   `tally_fees_burned_total`, `tally_fee_price{dimension}` (the next block's), and
//!   `tally_speculated_total` / `tally_speculation_confirmed_total` (transactions run
//!   speculatively in parallel, and of them those whose run stood: the hit rate), and
//!   `tally_signatures_verified_total` (signatures CheckTx and the proposals verified).
//!
//! The server is one thread answering one request at a time; a scrape reads atomics and takes
//! the mempool's lock briefly, never the consensus lock, so it cannot stall block execution.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in seconds: from a CheckTx of one transaction
/// (~0.1 ms) to a FinalizeBlock of a full block on a cold 10M-account store (seconds).
pub const BUCKETS_S: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// A latency histogram with [`BUCKETS_S`] buckets, updated without a lock.
#[derive(Default)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative; summed when rendered), and past
    /// the last one.
    counts: [AtomicU64; BUCKETS_S.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS_S.partition_point(|&b| b < s);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Appends the histogram as `name{labels,le="…"}` lines.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, bound) in BUCKETS_S.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS_S.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// Serves `render()`'s text at `addr` on a thread of its own; returns the address bound (the
/// port chosen when `addr` names port 0).
pub fn serve(
    addr: &str,
    render: impl Fn() -> String + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e} (is the port free?)"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                // A client that misbehaves loses its own request, never the node.
                let _ = answer(stream, &render, REQUEST_DEADLINE);
            }
        })?;
    Ok(bound)
}

/// How long a client has to send its request's head, and to take the answer: the one thread
/// answers one client at a time.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// A stream read until a deadline: each read waits at most what is left of it. A timeout per
/// read alone let a client that sent a byte every few seconds hold the thread for as long as
/// its 64 lines of 8 KiB took (helper-43's review).
struct Deadline<'a> {
    stream: &'a TcpStream,
    deadline: std::time::Instant,
}

impl std::io::Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&*self.stream).read(buf)
    }
}

/// Reads one request's head and answers it with the metrics, within `deadline`.
fn answer(
    stream: TcpStream,
    render: &impl Fn() -> String,
    deadline: Duration,
) -> std::io::Result<()> {
    stream.set_write_timeout(Some(deadline))?;
    let mut reader = BufReader::new(Deadline {
        stream: &stream,
        deadline: std::time::Instant::now() + deadline,
    });
    let mut line = String::new();
    // The request line and headers, up to the blank line (at most 64 lines of 8 KiB).
    for _ in 0..64 {
        line.clear();
        if reader.by_ref().take(8192).read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
    }
    let body = render();
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_histogram_renders_cumulative_buckets_its_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50)); // first bucket
        h.observe(Duration::from_millis(3)); // le 0.005
        h.observe(Duration::from_secs(10)); // past the last bound
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "call=\"commit\"");
        assert!(
            out.contains("x_seconds_bucket{call=\"commit\",le=\"0.0001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{call=\"commit\",le=\"0.005\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{call=\"commit\",le=\"5\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{call=\"commit\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_count{call=\"commit\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_sum{call=\"commit\"} 10.00305"),
            "{out}"
        );
    }

    #[test]
    fn the_server_answers_a_scrape_and_survives_a_silent_client() {
        let addr = serve("127.0.0.1:0", || "tally_height 7\n".to_string()).unwrap();
        // A client that connects and sends nothing, then goes away.
        drop(TcpStream::connect(addr).unwrap());
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        s.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\ntally_height 7\n"), "{response}");
    }

    /// A client that trickles its request a byte at a time, each within the time a read may
    /// wait, loses the thread at the request's deadline (helper-43's review: it kept it).
    #[test]
    fn a_client_that_trickles_its_request_loses_the_thread_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let trickler = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for _ in 0..40 {
                if s.write_all(b"G").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (stream, _) = listener.accept().unwrap();
        let started = std::time::Instant::now();
        let answered = answer(stream, &String::new, Duration::from_millis(300));
        let took = started.elapsed();
        assert_eq!(
            answered.unwrap_err().kind(),
            std::io::ErrorKind::TimedOut,
            "after {took:?}"
        );
        // The trickle lasts 2 s; the deadline ends it well before.
        assert!(took < Duration::from_millis(1_500), "{took:?}");
        trickler.join().unwrap();
    }
}
