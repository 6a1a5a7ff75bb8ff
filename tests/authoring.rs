//! What a contract author uses (issue 15): `tally abigen` for C and Rust, the Rust guest API,
//! `tally new`, and the README tutorial run exactly as written.
//!
//! contracts/echo.c and contracts/echo-rs are one contract in two languages over the types
//! `tally abigen` generated from contracts/echo.abi.json: each stores what it read. Running both
//! on the same bytes shows the generated C readers and the Rust types accept, refuse and read
//! data identically. Their committed builds are checked against a fresh clang/cargo build by
//! `tests/cli.rs` and `.ci/run`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tally_host_api::message::{Actions, DecodeError, Message};
use tally_host_api::{Host, HostError, Name};
use tally_runtime::{Contract, Entry, Outcome, Runtime, RuntimeConfig};

#[path = "../contracts/echo-rs/src/abi.rs"]
mod echo_abi;

use echo_abi::{Action, All, Empty, PairOf, Point, Rich};

const ECHO_C: &[u8] = include_bytes!("../contracts/echo.wasm");
const ECHO_RS: &[u8] = include_bytes!("../contracts/echo-rs.wasm");
const TOKEN_RS: &[u8] = include_bytes!("../contracts/token-rs.wasm");
const SIMPLECOIN: &[u8] = include_bytes!("../contracts/simplecoin.wasm");
const SIMPLECOIN_GEN: &[u8] = include_bytes!("../contracts/simplecoin_gen.wasm");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tally(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tally")
}

fn succeeds(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether a tool the test needs is here. CI installs them all (`.ci/run`), so there a missing
/// one is a failure, not a skip.
fn have(what: &str, found: bool) -> bool {
    if !found {
        assert!(std::env::var_os("CI").is_none(), "CI must have {what}");
        eprintln!("skipping: {what} not found");
    }
    found
}

fn have_clang() -> bool {
    let found = Command::new("clang")
        .arg("-print-targets")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32"));
    have("clang with wasm32 (apt-get install clang lld)", found)
}

fn have_rust_wasm32() -> bool {
    let found = Command::new("rustc")
        .args([
            "--print",
            "target-libdir",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .output()
        .is_ok_and(|o| {
            o.status.success() && Path::new(String::from_utf8_lossy(&o.stdout).trim()).is_dir()
        });
    have(
        "the wasm32 Rust target (rustup target add wasm32-unknown-unknown)",
        found,
    )
}

/// A contract's storage in a map; an action's writes apply only if it succeeds.
#[derive(Default)]
struct MapHost {
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    message: Vec<u8>,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    signers: Vec<Name>,
}

impl Host for MapHost {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(match self.writes.iter().rev().find(|(k, _)| k == key) {
            Some((_, value)) => value.as_deref(),
            None => self.state.get(key).map(Vec::as_slice),
        })
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.writes.push((key.to_vec(), Some(value.to_vec())));
        Ok(())
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.writes.push((key.to_vec(), None));
        Ok(())
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.signers.contains(&account)
    }
}

/// How one action ended: the abort message, or the state it left.
#[derive(Debug, PartialEq, Eq)]
enum Ran {
    Aborted(String),
    Stored(BTreeMap<Vec<u8>, Vec<u8>>),
}

struct Deployed {
    runtime: Runtime,
    contract: std::sync::Arc<Contract>,
    account: Name,
    host: MapHost,
}

impl Deployed {
    fn new(wasm: &[u8], account: &str) -> Self {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let contract = runtime.prepare(wasm).unwrap();
        let mut deployed = Deployed {
            runtime,
            contract,
            account: account.parse().unwrap(),
            host: MapHost::default(),
        };
        deployed.run(Entry::Init, &[]);
        deployed
    }

    fn run(&mut self, entry: Entry, data: &[u8]) -> Ran {
        self.host.message = data.to_vec();
        let receipt = self
            .runtime
            .execute(&self.contract, entry, &mut self.host)
            .unwrap();
        match receipt.outcome {
            Outcome::Success => {
                for (key, value) in self.host.writes.drain(..) {
                    match value {
                        Some(v) => self.host.state.insert(key, v),
                        None => self.host.state.remove(&key),
                    };
                }
                Ran::Stored(self.host.state.clone())
            }
            Outcome::Failure(abort) => {
                self.host.writes.clear();
                Ran::Aborted(abort.message)
            }
        }
    }

    fn push(&mut self, action: Name, data: &[u8]) -> Ran {
        let entry = Entry::Action {
            receiver: self.account,
            code: self.account,
            action,
        };
        self.run(entry, data)
    }

    /// Runs on a clean state, so each outcome depends on this action alone.
    fn push_fresh(&mut self, action: Name, data: &[u8]) -> Ran {
        self.host.state.clear();
        self.push(action, data)
    }
}

/// xorshift64*: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self) -> String {
        const PIECES: &[&str] = &["a", "Z", " ", "é", "€", "𝄞", "\u{10FFFF}", "\u{D7FF}", "\0"];
        (0..self.below(6))
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }
    fn bytes(&mut self) -> Vec<u8> {
        (0..self.below(12)).map(|_| self.next() as u8).collect()
    }
    fn rich(&mut self) -> Rich {
        Rich {
            flag: self.below(2) == 1,
            port: self.next() as u16,
            big: u128::from(self.next()) << 64 | u128::from(self.next()),
            offset: self.next() as i32,
            points: (0..self.below(4))
                .map(|_| Point {
                    x: self.next() as i32,
                    label: (self.below(2) == 1).then(|| self.text()),
                })
                .collect(),
            maybe: (self.below(2) == 1).then(|| self.next()),
            nested: (0..self.below(3)).map(|_| self.bytes()).collect(),
        }
    }
    fn action(&mut self) -> Action {
        match self.below(4) {
            3 => Action::Rich(self.rich()),
            0 => Action::All(All {
                account: Name(self.next()),
                small: self.next() as u8,
                medium: self.next() as u32,
                large: self.next(),
                delta: self.next() as i64,
                text: self.text(),
                blob: self.bytes(),
            }),
            1 => Action::Empty(Empty {}),
            _ => Action::PairOf(PairOf {
                first: self.text(),
                second: self.text(),
            }),
        }
    }
}

/// What echo.c and echo-rs store for `action`, computed on the host from the Rust types.
fn expected_echo(account: Name, action: &Action) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut keys: Vec<(&str, Vec<u8>)> = vec![
        ("receiver", account.0.to_le_bytes().to_vec()),
        ("code", account.0.to_le_bytes().to_vec()),
        ("action", action.name().0.to_le_bytes().to_vec()),
        ("echo", action.encode()),
    ];
    match action {
        Action::All(a) => keys.extend([
            ("account", a.account.0.to_le_bytes().to_vec()),
            ("small", vec![a.small]),
            ("medium", a.medium.to_le_bytes().to_vec()),
            ("large", a.large.to_le_bytes().to_vec()),
            ("delta", a.delta.to_le_bytes().to_vec()),
            ("text", a.text.as_bytes().to_vec()),
            ("blob", a.blob.clone()),
        ]),
        Action::Empty(_) => {}
        Action::Rich(r) => {
            let sum: i64 = r.points.iter().map(|p| i64::from(p.x)).sum();
            let labels = r.points.iter().filter(|p| p.label.is_some()).count() as u32;
            let mut points = sum.to_le_bytes().to_vec();
            points.extend(labels.to_le_bytes());
            let total: usize = r.nested.iter().map(Vec::len).sum();
            keys.extend([
                ("flag", vec![u8::from(r.flag)]),
                ("port", r.port.to_le_bytes().to_vec()),
                ("big", r.big.to_le_bytes().to_vec()),
                ("offset", r.offset.to_le_bytes().to_vec()),
                ("points", points),
                ("nested", (total as u32).to_le_bytes().to_vec()),
            ]);
            if let Some(v) = r.maybe {
                keys.push(("maybe", v.to_le_bytes().to_vec()));
            }
        }
        Action::PairOf(p) => keys.extend([
            ("first", p.first.as_bytes().to_vec()),
            ("second", p.second.as_bytes().to_vec()),
        ]),
    }
    keys.into_iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v))
        .collect()
}

#[test]
fn generated_rust_types_round_trip_through_borsh() {
    let mut rng = Rng(0x15);
    for _ in 0..500 {
        let action = rng.action();
        let data = action.encode();
        assert_eq!(Action::decode(action.name(), &data), Ok(action.clone()));
        // The generated reader and borsh's derive agree on every valid message.
        let via_borsh = match &action {
            Action::All(_) => tally_host_api::message::decode::<All>(&data).map(Action::All),
            Action::Empty(_) => tally_host_api::message::decode::<Empty>(&data).map(Action::Empty),
            Action::Rich(_) => tally_host_api::message::decode::<Rich>(&data).map(Action::Rich),
            Action::PairOf(_) => {
                tally_host_api::message::decode::<PairOf>(&data).map(Action::PairOf)
            }
        };
        assert_eq!(via_borsh, Ok(action.clone()));
        let mut longer = data.clone();
        longer.push(0);
        assert_eq!(
            Action::decode(action.name(), &longer),
            Err(DecodeError::TrailingBytes)
        );
        if !data.is_empty() {
            assert_eq!(
                Action::decode(action.name(), &data[..data.len() - 1]),
                Err(DecodeError::TooShort)
            );
        }
    }
    let all = All {
        account: "alice".parse().unwrap(),
        small: 1,
        medium: 2,
        large: 3,
        delta: -4,
        text: "hi".into(),
        blob: vec![0xab],
    };
    // The layout the ABI promises: names 8 bytes LE, integers LE, strings and bytes u32-prefixed.
    let mut layout = "alice".parse::<Name>().unwrap().0.to_le_bytes().to_vec();
    layout.extend([1, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    layout.extend((-4i64).to_le_bytes());
    layout.extend([2, 0, 0, 0, b'h', b'i', 1, 0, 0, 0, 0xab]);
    assert_eq!(all.encode(), layout);
    assert_eq!(All::NAME.to_string(), "all");
    assert_eq!(PairOf::NAME.to_string(), "pair.of");
    assert_eq!(
        Action::decode("nope".parse().unwrap(), &[]),
        Err(DecodeError::UnknownAction("nope".parse().unwrap()))
    );
}

#[test]
fn generated_c_readers_read_what_the_rust_encoder_writes() {
    let mut echo = Deployed::new(ECHO_C, "echo");
    let mut rng = Rng(7);
    for _ in 0..300 {
        let action = rng.action();
        let ran = echo.push_fresh(action.name(), &action.encode());
        assert_eq!(
            ran,
            Ran::Stored(expected_echo(echo.account, &action)),
            "{action:?}"
        );
    }
}

/// Data for every way a message can be wrong, around valid messages of every action.
fn hostile_inputs() -> Vec<(Name, Vec<u8>)> {
    let mut rng = Rng(99);
    let mut inputs = Vec::new();
    for _ in 0..60 {
        let action = rng.action();
        let data = action.encode();
        for cut in 0..data.len() {
            inputs.push((action.name(), data[..cut].to_vec()));
        }
        let mut longer = data.clone();
        longer.push(rng.next() as u8);
        inputs.push((action.name(), longer));
        inputs.push((action.name(), data));
    }
    // Strings that are and are not UTF-8, Rust's definition being the oracle.
    let mut texts: Vec<Vec<u8>> = [
        &b""[..],
        b"a",
        b"\xc3\xa9",
        b"\xe2\x82\xac",
        b"\xf0\x9d\x84\x9e",
        b"\xf4\x8f\xbf\xbf",
        b"\xef\xbf\xbf",
        b"\xed\x9f\xbf",
        b"\xee\x80\x80",
        b"\x80",
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xc2",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xf0\x80\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xff",
        b"\xe2\x82",
        b"\xe2\x28\xa1",
        b"\xc3\x28",
    ]
    .iter()
    .map(|t| t.to_vec())
    .collect();
    const EDGES: &[u8] = &[
        0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0,
        0xf4, 0xf5, 0xff,
    ];
    for _ in 0..400 {
        let len = rng.below(6);
        texts.push(
            (0..len)
                .map(|_| EDGES[rng.below(EDGES.len() as u64) as usize])
                .collect(),
        );
    }
    let pair = PairOf::NAME;
    for text in texts {
        let mut data = (text.len() as u32).to_le_bytes().to_vec();
        data.extend(&text);
        data.extend([1, 0, 0, 0, b'x']);
        inputs.push((pair, data));
    }
    for _ in 0..100 {
        let len = rng.below(40) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        inputs.push((All::NAME, bytes.clone()));
        inputs.push((Rich::NAME, bytes.clone()));
        inputs.push((pair, bytes));
    }
    // A bool, an option's tag and a list's count that are not what they may be, in an
    // otherwise valid `rich`: both readers refuse each for the same reason.
    for _ in 0..40 {
        let valid = rng.rich().encode();
        let mut bad_flag = valid.clone();
        bad_flag[0] = 2 + rng.below(254) as u8;
        inputs.push((Rich::NAME, bad_flag));
        // flag 1 + port 2 + big 16 + offset 4: the points' count.
        let mut huge = valid.clone();
        huge[23..27].copy_from_slice(&u32::MAX.to_le_bytes());
        inputs.push((Rich::NAME, huge));
        let mut one_point = valid[..23].to_vec();
        one_point.extend([1, 0, 0, 0, 7, 0, 0, 0, 2 + rng.below(254) as u8]);
        inputs.push((Rich::NAME, one_point));
    }
    inputs.push(("unknown".parse().unwrap(), Vec::new()));
    inputs
}

#[test]
fn c_and_rust_contracts_accept_and_refuse_the_same_data_with_the_same_messages() {
    let mut c = Deployed::new(ECHO_C, "echo");
    let mut rust = Deployed::new(ECHO_RS, "echo");
    let mut refused = BTreeMap::<String, usize>::new();
    for (action, data) in hostile_inputs() {
        let from_c = c.push_fresh(action, &data);
        let from_rust = rust.push_fresh(action, &data);
        assert_eq!(from_c, from_rust, "action {action}, data {}", hex(&data));
        // And both agree with the host's decoder, the one clients use.
        match Action::decode(action, &data) {
            Ok(decoded) => {
                assert_eq!(from_c, Ran::Stored(expected_echo(c.account, &decoded)));
            }
            Err(e) => {
                assert_eq!(from_c, Ran::Aborted(e.message().to_string()));
                *refused.entry(e.message().to_string()).or_default() += 1;
            }
        }
    }
    // Every way to be wrong was tried.
    for reason in [
        "message too short",
        "message has trailing bytes",
        "malformed action data",
        "unknown action",
    ] {
        assert!(refused.get(reason).copied().unwrap_or(0) > 0, "{refused:?}");
    }
}

#[test]
fn issue_23_a_rust_panic_keeps_its_message_and_place_and_running_out_of_heap_says_so() {
    let mut rust = Deployed::new(ECHO_RS, "echo");
    let asked = PairOf {
        first: "panic!".into(),
        second: "why".into(),
    };
    let Ran::Aborted(said) = rust.push_fresh(PairOf::NAME, &asked.encode()) else {
        panic!("echo-rs did not panic");
    };
    assert!(
        said.starts_with("panicked at src/lib.rs:")
            && said.ends_with(": echo-rs was asked to panic with \"why\""),
        "{said}"
    );
    // A message larger than the 32 KiB default heap: copying it in runs the heap out.
    let big = All {
        account: Name(1),
        small: 0,
        medium: 0,
        large: 0,
        delta: 0,
        text: String::new(),
        blob: vec![7; 40_000],
    };
    let Ran::Aborted(said) = rust.push_fresh(All::NAME, &big.encode()) else {
        panic!("a 40 KB message fit a 32 KiB heap");
    };
    assert!(
        said.starts_with("out of heap: the contract's 32768-byte heap cannot give ")
            && said.ends_with("raise it with `contract!(handler, heap = N)`"),
        "{said}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn issue_15_token_rs_keys_are_raw_bytes_not_length_prefixed_strings() {
    let mut token = Deployed::new(TOKEN_RS, "token");
    let issuer: Name = "issuer".parse().unwrap();
    let alice: Name = "alice".parse().unwrap();
    token.host.signers = vec![issuer];
    let create = concat(&[&issuer.0.to_le_bytes(), &1000u64.to_le_bytes()]);
    let Ran::Stored(state) = token.push("create".parse().unwrap(), &create) else {
        panic!("create failed");
    };
    // The key is the 5 bytes "stats" (`tally get token str:stats`), not borsh's
    // 4-byte length prefix followed by them.
    assert!(state.contains_key(&b"stats"[..]), "{:?}", state.keys());
    assert_eq!(state.len(), 1);
    let issue = concat(&[&alice.0.to_le_bytes(), &250u64.to_le_bytes(), &[0; 4]]);
    let Ran::Stored(state) = token.push("issue".parse().unwrap(), &issue) else {
        panic!("issue failed");
    };
    // Balances keep simplecoin's layout: the 8-byte name, a u64 LE.
    assert_eq!(state[&alice.0.to_le_bytes()[..]], 250u64.to_le_bytes());
    assert_eq!(
        token.push("create".parse().unwrap(), &create),
        Ran::Aborted("token already created".into())
    );
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn token_rs_refuses_malformed_transfers_with_the_c_readers_messages() {
    let mut token = Deployed::new(TOKEN_RS, "token");
    let alice: Name = "alice".parse().unwrap();
    token.host.signers = vec![alice];
    let transfer = "transfer".parse().unwrap();
    let good = concat(&[
        &alice.0.to_le_bytes(),
        &Name(7).0.to_le_bytes(),
        &1u64.to_le_bytes(),
        &[2, 0, 0, 0, b'h', b'i'],
    ]);
    for (data, says) in [
        (good[..23].to_vec(), "message too short"),
        ([&good[..], &[0]].concat(), "message has trailing bytes"),
        (
            [&good[..good.len() - 1], &[0xff]].concat(),
            "malformed action data",
        ),
        (good.clone(), "no existing balance"),
    ] {
        assert_eq!(token.push(transfer, &data), Ran::Aborted(says.into()));
    }
    assert_eq!(
        token.push("burn".parse().unwrap(), &good),
        Ran::Aborted("unknown action".into())
    );
}

#[test]
fn simplecoin_gen_moves_coins_exactly_like_simplecoin() {
    let mut seed = Deployed::new(SIMPLECOIN, "simplecoin");
    let mut generated = Deployed::new(SIMPLECOIN_GEN, "simplecoin");
    let transfer = "transfer".parse().unwrap();
    let mut rng = Rng(3);
    let accounts = ["simplecoin", "alice", "bob", "carol"].map(|a| a.parse::<Name>().unwrap());
    for _ in 0..300 {
        let from = accounts[rng.below(4) as usize];
        let to = accounts[rng.below(4) as usize];
        let data = concat(&[
            &from.0.to_le_bytes(),
            &to.0.to_le_bytes(),
            &rng.below(400_000).to_le_bytes(),
            &[4, 0, 0, 0],
            b"memo",
        ]);
        assert_eq!(seed.push(transfer, &data), generated.push(transfer, &data));
    }
    assert!(seed.host.state.len() > 1, "some transfers went through");
}

/// Every file in the repository generated by `tally abigen`, with the ABI it came from and
/// its language, read from the line the generator writes at its top.
fn generated_files() -> Vec<(PathBuf, PathBuf, Vec<String>)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "h" || e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in ["contracts", "sdk-c", "tests", "examples", "chain/tests"] {
        walk(&root().join(dir), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let line = text
                .lines()
                .take(5)
                .find_map(|l| l.split_once("Generated by tally abigen from ").map(|x| x.1))?
                .to_string();
            // "ABI (--lang c --prefix swap_)": the ABI, and the flags it was generated with.
            let (abi, flags) = line.rsplit_once(" (")?;
            let flags: Vec<String> = flags
                .trim_end_matches(')')
                .split_whitespace()
                .map(String::from)
                .collect();
            match flags.get(..2) {
                Some([lang, l]) if lang == "--lang" && (l == "c" || l == "rust") => {}
                _ => panic!("{}: unknown flags {flags:?}", file.display()),
            }
            let abi = file.parent().unwrap().join(abi);
            Some((file, abi, flags))
        })
        .collect()
}

#[test]
fn committed_generated_files_are_what_abigen_generates_now() {
    let files = generated_files();
    let names: Vec<_> = files
        .iter()
        .map(|(f, _, _)| f.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    for expected in [
        "contracts/simplecoin.abi.h",
        "contracts/echo.abi.h",
        "contracts/echo-rs/src/abi.rs",
        "contracts/token-rs/src/abi.rs",
        "contracts/swap.abi.h",
        "chain/tests/all/dca_abi.rs",
    ] {
        assert!(names.contains(&PathBuf::from(expected)), "{names:?}");
    }
    for (file, abi, flags) in &files {
        let mut args = vec!["abigen", abi.to_str().unwrap()];
        args.extend(flags.iter().map(String::as_str));
        args.extend(["-o", file.to_str().unwrap(), "--check"]);
        let out = tally(&args, root());
        succeeds(&out);
    }
    // The check can fail: a stale copy is caught, with the command that fixes it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("contracts/simplecoin.abi.json"),
        dir.path().join("coin.abi.json"),
    )
    .unwrap();
    succeeds(&tally(
        &["abigen", "coin.abi.json", "--lang", "c", "-o", "coin.abi.h"],
        dir.path(),
    ));
    let header = dir.path().join("coin.abi.h");
    let text = std::fs::read_to_string(&header).unwrap();
    std::fs::write(
        &header,
        text.replace("uint64_t amount;", "uint32_t amount;"),
    )
    .unwrap();
    let err = fails(&tally(
        &[
            "abigen",
            "coin.abi.json",
            "--lang",
            "c",
            "-o",
            "coin.abi.h",
            "--check",
        ],
        dir.path(),
    ));
    assert!(
        err.contains("out of date")
            && err.contains("tally abigen coin.abi.json --lang c -o coin.abi.h"),
        "{err}"
    );
}

#[test]
fn generated_rust_is_already_rustfmt_clean() {
    if !have(
        "rustfmt",
        Command::new("rustfmt").arg("--version").output().is_ok(),
    ) {
        return;
    }
    for (file, _, flags) in generated_files() {
        if flags[1] != "rust" {
            continue;
        }
        let out = Command::new("rustfmt")
            .args(["--check", "--edition", "2024"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} is not rustfmt-clean:\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn abigen_refuses_abis_it_cannot_generate_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    for (abi, lang, says) in [
        (r#"{"actions": {}}"#, "c", "no actions"),
        (
            r#"{"actions": {"go": [{"name": "int", "type": "u8"}]}}"#,
            "c",
            "is a C keyword",
        ),
        (
            r#"{"actions": {"go": [{"name": "a b", "type": "u8"}]}}"#,
            "rust",
            "not an identifier",
        ),
        (
            r#"{"actions": {"go": [{"name": "x", "type": "u8"}, {"name": "x", "type": "u8"}]}}"#,
            "rust",
            "two fields named",
        ),
        (r#"{"actions": {"string": []}}"#, "rust", "would clash"),
        (r#"{"actions": {"a.b": [], "ab": [], "a.bc": []}}"#, "c", ""),
        (
            r#"{"actions": {"go": [{"name": "x", "type": "f64"}]}}"#,
            "c",
            "unknown type",
        ),
        (r#"{"actions": {"Go": []}}"#, "c", "action names"),
    ] {
        std::fs::write(dir.path().join("x.abi.json"), abi).unwrap();
        let out = tally(&["abigen", "x.abi.json", "--lang", lang], dir.path());
        if says.is_empty() {
            succeeds(&out);
        } else {
            let err = fails(&out);
            assert!(err.contains(says), "{abi}: {err}");
        }
    }
    // `self` cannot be a Rust field even as a raw identifier; `type` can (r#type).
    std::fs::write(
        dir.path().join("x.abi.json"),
        r#"{"actions": {"go": [{"name": "type", "type": "u8"}]}}"#,
    )
    .unwrap();
    assert!(
        succeeds(&tally(
            &["abigen", "x.abi.json", "--lang", "rust"],
            dir.path()
        ))
        .contains("pub r#type: u8,")
    );
}

/// Where the Rust harness of new projects builds: this build's own target directory. The
/// harness resolves every third-party dependency with the features this workspace does
/// (workspace-hack/Cargo.toml) and with the same dev profile, so it reuses this build's
/// wasmtime and Cranelift and compiles only the chain crates again; in a directory of its own
/// the two tests that build it took 860 s of CI's run from an empty target. Cargo releases the
/// directory's lock before it runs test binaries, so the harness's cargo can take it.
fn harness_target() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tally"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The rustflags this build ran with, for the harness's cargo, which runs outside the workspace
/// and so does not read its `.cargo/config.toml`: every crate's hash covers them, and without
/// them the harness compiled wasmtime and Cranelift a second time. Flags in the environment
/// reach the harness as they are; otherwise the config's `rustflags = [..]` line, as cargo's
/// `\x1f`-separated CARGO_ENCODED_RUSTFLAGS (`tally build` removes it for the contract itself).
fn harness_rustflags() -> Vec<(&'static str, String)> {
    if std::env::var_os("RUSTFLAGS").is_some()
        || std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
    {
        return Vec::new();
    }
    let config = std::fs::read_to_string(root().join(".cargo/config.toml")).unwrap_or_default();
    let Some(line) = config
        .lines()
        .find(|line| line.trim_start().starts_with("rustflags"))
    else {
        return Vec::new();
    };
    // TOML strings in either quote, without escapes: what the config's one line holds.
    let mut flags = Vec::new();
    let mut rest = &line[line.find('[').map_or(line.len(), |at| at + 1)..];
    while let Some(start) = rest.find(['"', '\'']) {
        let quote = rest.as_bytes()[start] as char;
        let body = &rest[start + 1..];
        let Some(end) = body.find(quote) else { break };
        flags.push(&body[..end]);
        rest = &body[end + 1..];
    }
    vec![("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))]
}

/// Runs `tally new NAME --lang LANG` in a fresh directory, then the project's test.sh (which,
/// for Rust, also runs its tests on the in-process harness); then copies the project as git
/// would (no `.tally/` link, no build output) to another directory and builds it there.
fn new_project_passes_its_test(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let created = succeeds(&tally(&["new", "counter", "--lang", lang], dir.path()));
    assert!(created.contains("cd counter && ./test.sh"), "{created}");
    let project = dir.path().join("counter");
    let tally_bin = Path::new(env!("CARGO_BIN_EXE_tally"));
    let test_sh = || {
        Command::new("./test.sh")
            .current_dir(&project)
            .env("TALLY", tally_bin)
            .env("TALLY_TEST_TARGET", harness_target())
            .envs(harness_rustflags())
            .env_remove("TALLY_SKIP_HARNESS")
            .output()
            .unwrap()
    };
    let harness = || {
        Command::new("cargo")
            .args(["test", "--quiet", "--manifest-path", "test/Cargo.toml"])
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", harness_target())
            .envs(harness_rustflags())
            .output()
            .unwrap()
    };
    let stdout = succeeds(&test_sh());
    assert!(stdout.contains("all checks passed"), "{stdout}");
    if lang == "rust" {
        assert!(stdout.contains("running test/counter.rs"), "{stdout}");
        issue_23_a_new_rust_project_travels(&project, dir.path());
    }
    // The tests can fail: break the contract and they say what went wrong.
    let source = match lang {
        "c" => project.join("counter.c"),
        _ => project.join("src/lib.rs"),
    };
    let text = std::fs::read_to_string(&source).unwrap();
    let broken = match lang {
        "c" => text.replace("count_of(msg->who) + 1;", "count_of(msg->who) + 2;"),
        _ => text.replace("count_of(hit.who) + 1;", "count_of(hit.who) + 2;"),
    };
    assert_ne!(broken, text);
    std::fs::write(&source, broken).unwrap();
    let err = fails(&test_sh());
    assert!(err.contains("FAIL: expected alice -> 2"), "{err}");
    if lang == "rust" {
        // test.sh rebuilt the broken contract; the harness tests read that build.
        let out = harness();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), fails(&out));
        assert!(said.contains("alice's count after two hits"), "{said}");
    }
}

/// The project's manifests hold no path of the machine that made it, and a copy with only
/// its committed files (as a clone elsewhere would have) builds: `tally build` links Tally's
/// crates again.
fn issue_23_a_new_rust_project_travels(project: &Path, scratch: &Path) {
    for manifest in ["Cargo.toml", "test/Cargo.toml"] {
        let text = std::fs::read_to_string(project.join(manifest)).unwrap();
        assert!(
            !text.contains(&*root().to_string_lossy()),
            "{manifest} names this checkout:\n{text}"
        );
    }
    let gitignore = std::fs::read_to_string(project.join(".gitignore")).unwrap();
    assert!(gitignore.lines().any(|l| l == "/.tally/"), "{gitignore}");
    let clone = scratch.join("elsewhere").join("counter");
    std::fs::create_dir_all(clone.join("src")).unwrap();
    for file in ["Cargo.toml", "counter.abi.json", "src/lib.rs", "src/abi.rs"] {
        std::fs::copy(project.join(file), clone.join(file)).unwrap();
    }
    let out = succeeds(&tally(&["build", ".", "-o", "counter.wasm"], &clone));
    assert!(out.contains("built counter.wasm"), "{out}");
    assert!(clone.join(".tally/sdk/host-api/Cargo.toml").is_file());
}

#[test]
fn tally_new_c_project_builds_and_its_test_passes() {
    if have_clang() {
        new_project_passes_its_test("c");
    }
}

#[test]
fn tally_new_rust_project_builds_and_its_test_passes() {
    if have_rust_wasm32() {
        new_project_passes_its_test("rust");
    }
}

#[test]
fn tally_new_refuses_bad_names_and_existing_projects() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(&tally(&["new", "My-Token", "--lang", "c"], dir.path()));
    assert!(err.contains("1-12 characters of a-z and 1-5"), "{err}");
    succeeds(&tally(&["new", "coin", "--lang", "c"], dir.path()));
    let err = fails(&tally(&["new", "coin", "--lang", "rust"], dir.path()));
    assert!(err.contains("already exists"), "{err}");
    let err = fails(&tally(
        &[
            "new",
            "coin2",
            "--lang",
            "rust",
            "--host-api",
            "/nonexistent",
        ],
        dir.path(),
    ));
    assert!(
        err.contains("--host-api") || err.contains("host-api"),
        "{err}"
    );
}

/// The shell blocks of the README tutorial for `lang`: each follows a line
/// `<!-- tutorial: LANG -->`. A command whose comment starts with `→` must print what follows.
fn tutorial_script(readme: &str, lang: &str) -> String {
    let marker = format!("<!-- tutorial: {lang} -->");
    let mut script = String::from("set -eu\n");
    let mut lines = readme.lines();
    let mut blocks = 0;
    while let Some(line) = lines.next() {
        if line.trim() != marker {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "a ``` block must follow {marker}");
        blocks += 1;
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            match line.split_once("# → ") {
                Some((command, expect)) => {
                    let command = command.trim_end();
                    let expect = expect.replace('\'', r"'\''");
                    script.push_str(&format!(
                        "out=\"$({command})\"; echo \"$out\"; case \"$out\" in *'{expect}'*) ;; \
                         *) echo \"expected: {expect}\" >&2; exit 1 ;; esac\n"
                    ));
                }
                None => {
                    script.push_str(line);
                    script.push('\n');
                }
            }
        }
    }
    assert!(
        blocks > 0,
        "no {marker} blocks: the tutorial belongs in README.md (see tests/authoring.rs)"
    );
    script
}

/// Runs the tutorial for `lang` from an empty directory, with the tally under test on PATH.
fn tutorial_runs_as_written(lang: &str) {
    // TALLY_TUTORIAL checks a draft before it goes into README.md.
    let path = std::env::var_os("TALLY_TUTORIAL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("README.md"));
    let readme = std::fs::read_to_string(&path).unwrap();
    let script = tutorial_script(&readme, lang);
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_tally")).parent().unwrap();
    let path_var = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path_var)
        .env("TALLY_TEST_TARGET", harness_target())
        .envs(harness_rustflags())
        .env_remove("TALLY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the {lang} tutorial in {} failed:\n{}\n{}\nscript:\n{script}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn readme_tutorial_in_c_runs_as_written_from_an_empty_directory() {
    if have_clang() {
        tutorial_runs_as_written("c");
    }
}

#[test]
fn readme_tutorial_in_rust_runs_as_written_from_an_empty_directory() {
    if have_rust_wasm32() {
        tutorial_runs_as_written("rust");
    }
}

#[test]
fn abigen_and_new_help_have_examples() {
    for cmd in ["abigen", "new"] {
        let help = succeeds(&tally(&[cmd, "--help"], root()));
        assert!(help.contains("Examples:"), "{cmd} --help:\n{help}");
    }
}
