//! Which backend checks signature batches: the fastest this CPU runs, unless an operator
//! (`TALLY_VERIFY_BACKEND`) or the embedding program ([`set_backend`]) forces one.
//!
//! Every backend gives every signature the result [`super::zip215::verify_one`] gives it, so
//! the choice changes speed, never which transactions are valid. Forcing one is for checking
//! exactly that claim (the same blocks on each backend must give the same app hash) and for
//! taking a backend out of service should it ever be found to disagree. A forced backend
//! this CPU cannot run is refused, never quietly replaced by another: an operator who forced
//! it would otherwise believe they were running what they asked for.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable an operator forces a backend with: `dalek`, `avx2`, `avx512`,
/// `avx512ifma` or `auto` (the default when it is unset or empty: the fastest this CPU runs).
/// It is read once, at the first verification that asks for [`Backend::best`].
pub const BACKEND_ENV: &str = "TALLY_VERIFY_BACKEND";

/// What batch verification runs on. Every backend gives every signature the same result;
/// they differ in speed and in the CPUs they run on.
///
/// Which one runs: [`Backend::best`], which is the one forced by [`set_backend`], else the one
/// forced by the environment variable [`BACKEND_ENV`] (`TALLY_VERIFY_BACKEND=dalek`, `avx2`,
/// `avx512`, `avx512ifma` or `auto`), else the fastest this CPU runs. Forcing a backend the
/// CPU cannot run is an error ([`BackendError::Unavailable`]), not a fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// curve25519-dalek's multiscalar multiplication ([`super::zip215`]): its AVX-512 IFMA
    /// backend on a CPU that has it (the workspace's `.cargo/config.toml` compiles it in with
    /// `--cfg curve25519_dalek_backend="avx512"`), its AVX2 one on a CPU with AVX2, serial
    /// otherwise; dalek chooses at run time. Runs on every CPU.
    Dalek,
    /// The AVX-512 backend's code on AVX2 (`super::avx2`, x86-64 only): a signature per
    /// 64-bit lane, four lanes a `ymm` register, so that the `R` of a batch are decompressed
    /// eight at a time rather than one by one as dalek does.
    Avx2,
    /// Eight signatures per instruction on AVX-512F (`super::avx512`, x86-64 only).
    Avx512,
    /// The AVX-512F backend with its field arithmetic on AVX-512 IFMA's 52-bit multiplier
    /// (`super::avx512ifma`, x86-64 only): five limbs an element instead of ten.
    Avx512Ifma,
}

impl Backend {
    /// Every backend, in the order the names list them.
    pub const ALL: [Backend; 4] = [
        Backend::Dalek,
        Backend::Avx2,
        Backend::Avx512,
        Backend::Avx512Ifma,
    ];

    /// The name [`BACKEND_ENV`] and [`BackendChoice::from_str`] know it by.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Dalek => "dalek",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Avx512Ifma => "avx512ifma",
        }
    }

    /// Whether this CPU runs `self`.
    pub fn available(self) -> bool {
        match self {
            Backend::Dalek => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => super::avx2::available(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => super::avx512::available(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Ifma => super::avx512ifma::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Backend::Avx2 | Backend::Avx512 | Backend::Avx512Ifma => false,
        }
    }

    /// The fastest backend this CPU runs, whatever is forced: the lanes on AVX-512 IFMA, else
    /// on AVX-512F, else on AVX2, else dalek. On an Intel Xeon with IFMA, `cargo bench --bench
    /// verify -- whole` (10,000 signatures, two threads, median of 5 interleaved runs) checks
    /// 312,501 signatures/s on IFMA against 237,409 on AVX-512F alone. On this project's AVX2
    /// machine (AMD EPYC, no AVX-512) the AVX2 lanes beat dalek's AVX2 code: `tally bench`
    /// 106,026 against 84,673 transfers/s (medians of 5 interleaved pairs), 101,481 against
    /// 78,415 with 1M zipf accounts (3 pairs).
    pub fn fastest() -> Backend {
        [Backend::Avx512Ifma, Backend::Avx512, Backend::Avx2]
            .into_iter()
            .find(|b| b.available())
            .unwrap_or(Backend::Dalek)
    }

    /// The backend this process verifies batches with: the one [`set_backend`] forced, else
    /// the one [`BACKEND_ENV`] forced (read once), else [`Backend::fastest`].
    ///
    /// # Panics
    /// If [`BACKEND_ENV`] names no backend, or one this CPU cannot run, and [`set_backend`]
    /// has not been called: the node refuses to verify rather than verify on a backend the
    /// operator did not ask for. A program that wants the error as a value at start-up calls
    /// [`BackendChoice::from_env`] and [`BackendChoice::resolve`] (or [`set_backend`]) first.
    pub fn best() -> Backend {
        if let Some(forced) = decode(FORCED.load(Ordering::Relaxed)) {
            return forced;
        }
        match &*FROM_ENV {
            Ok(backend) => *backend,
            Err(e) => panic!("refusing to verify signatures: {e}"),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an operator or embedder asks for: a backend by name, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The fastest backend this CPU runs.
    Auto,
    /// This backend, or an error if the CPU cannot run it.
    Force(Backend),
}

impl BackendChoice {
    /// The choice [`BACKEND_ENV`] makes now: [`BackendChoice::Auto`] when unset or empty.
    pub fn from_env() -> Result<BackendChoice, BackendError> {
        match std::env::var_os(BACKEND_ENV) {
            None => Ok(BackendChoice::Auto),
            Some(value) => match value.to_str() {
                Some(value) => value.parse(),
                None => Err(BackendError::Unknown {
                    value: value.to_string_lossy().into_owned(),
                }),
            },
        }
    }

    /// The backend this choice means on this CPU.
    pub fn resolve(self) -> Result<Backend, BackendError> {
        match self {
            BackendChoice::Auto => Ok(Backend::fastest()),
            BackendChoice::Force(backend) if backend.available() => Ok(backend),
            BackendChoice::Force(backend) => Err(BackendError::Unavailable(backend)),
        }
    }
}

impl FromStr for BackendChoice {
    type Err = BackendError;

    /// `dalek`, `avx2`, `avx512`, `avx512ifma` or `auto` (or empty, for `auto`), in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim();
        if name.is_empty() || name.eq_ignore_ascii_case("auto") {
            return Ok(BackendChoice::Auto);
        }
        Backend::ALL
            .into_iter()
            .find(|b| name.eq_ignore_ascii_case(b.name()))
            .map(BackendChoice::Force)
            .ok_or_else(|| BackendError::Unknown {
                value: s.to_owned(),
            })
    }
}

/// Why a backend cannot be used as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The name is none of the backends'.
    #[error(
        "{value:?} names no signature verification backend: set {BACKEND_ENV} to dalek, avx2, \
         avx512, avx512ifma or auto (the default: the fastest this CPU runs)"
    )]
    Unknown {
        /// What was asked for.
        value: String,
    },
    /// The backend was forced on a CPU that cannot run it.
    #[error(
        "the {0} signature verification backend was forced, but this CPU cannot run it{needs}: \
         set {BACKEND_ENV} to auto or dalek, or run on a CPU that has it",
        needs = requirement(*.0)
    )]
    Unavailable(Backend),
}

/// What a backend needs of the CPU, for error messages.
fn requirement(backend: Backend) -> &'static str {
    match backend {
        Backend::Dalek => "",
        Backend::Avx2 => " (it needs an x86-64 CPU with AVX2)",
        Backend::Avx512 => " (it needs an x86-64 CPU with AVX-512F)",
        Backend::Avx512Ifma => " (it needs an x86-64 CPU with AVX-512F and AVX-512 IFMA)",
    }
}

/// Forces the backend every later [`Backend::best`] (and so [`super::verify_many`]) returns
/// in this process, overriding [`BACKEND_ENV`]; [`BackendChoice::Auto`] forces the fastest.
/// Returns the backend now in force. For an embedder with its own configuration, and for
/// tests. Safe to call at any time, from any thread: every backend gives every signature the
/// same result, so a switch between two batches changes no outcome.
///
/// # Errors
/// [`BackendError::Unavailable`] if the CPU cannot run the backend; what was in force stays.
pub fn set_backend(choice: BackendChoice) -> Result<Backend, BackendError> {
    let backend = choice.resolve()?;
    FORCED.store(encode(backend), Ordering::Relaxed);
    Ok(backend)
}

/// The backend [`set_backend`] forced, encoded by [`encode`]; 0 for none.
static FORCED: AtomicU8 = AtomicU8::new(0);

/// [`BACKEND_ENV`]'s choice, resolved at first use.
static FROM_ENV: LazyLock<Result<Backend, BackendError>> =
    LazyLock::new(|| BackendChoice::from_env()?.resolve());

fn encode(backend: Backend) -> u8 {
    match backend {
        Backend::Dalek => 1,
        Backend::Avx512 => 2,
        Backend::Avx2 => 3,
        Backend::Avx512Ifma => 4,
    }
}

fn decode(code: u8) -> Option<Backend> {
    match code {
        1 => Some(Backend::Dalek),
        2 => Some(Backend::Avx512),
        3 => Some(Backend::Avx2),
        4 => Some(Backend::Avx512Ifma),
        _ => None,
    }
}
