//! A real Kubernetes control plane for tests, CI and the demo.
//!
//! Binaries are built from Go modules by `testenv/build.sh` (`make
//! controlplane`) into a version-keyed cache directory (see [`paths`]). Two
//! modes, both on 127.0.0.1 with free ports:
//!
//! * [`Mode::Api`]: etcd + kube-apiserver (like controller-runtime's envtest);
//! * [`Mode::Full`]: + kube-controller-manager (garbage collector, Job,
//!   namespace, service-account controllers) + kube-scheduler + JobSet (its
//!   webhooks registered by URL with our CA) + kwok (two fake nodes; pods go
//!   Running then Succeeded, or Failed when labelled [`FAIL_POD_LABEL`]).
//!
//! Third-party CRDs (JobSet, both PodGroups) and ours (`crds/*.yaml`) are
//! installed with server-side apply and waited for. One environment per mode
//! is shared by a test binary ([`shared`] / [`require!`]); each test creates
//! its own namespace with [`TestEnv::create_namespace`] and gets a fresh client
//! bound to its own runtime from [`TestEnv::client`].
//!
//! ```no_run
//! use trainforge_testenv::Mode;
//! #[tokio::test]
//! async fn my_test() {
//!     let Some(env) = trainforge_testenv::require!(Mode::Api) else { return };
//!     let client = env.client().await.unwrap();
//!     let ns = env.create_namespace("my-test").await.unwrap();
//!     // ...
//! }
//! ```
//!
//! Separately, [`Registry`] starts a real OCI registry on loopback (plain HTTP
//! or TLS) for tests that push or pull images.
//!
//! Environment variables: `TRAINFORGE_TESTENV_BIN` (binary dir),
//! `TRAINFORGE_TESTENV_DATA` (data dir), `TRAINFORGE_CRDS_DIR` (our CRDs),
//! `TRAINFORGE_TESTENV_REQUIRED=1` (missing binaries fail instead of skip),
//! `TRAINFORGE_TESTENV_KEEP=1` (keep the temp dir with logs).

pub mod apiserver;
pub mod controller_manager;
pub mod crds;
pub mod env;
mod error;
pub mod etcd;
pub mod jobset;
pub mod kubeconfig;
pub mod kwok;
pub mod manifests;
pub mod paths;
pub mod pki;
pub mod ports;
pub mod process;
pub mod registry;
pub mod scheduler;
pub mod upstream;
pub mod wait;
pub mod webhooks;

use std::fmt;
use std::io::Write;
use std::sync::OnceLock;

pub use env::{Figures, TestEnv};
pub use error::Error;
pub use kwok::FAIL_POD_LABEL;
pub use registry::Registry;

/// Which components run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// etcd + kube-apiserver.
    Api,
    /// Everything: + controller-manager, scheduler, JobSet, kwok.
    Full,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Api => "api",
            Mode::Full => "full",
        })
    }
}

/// Whether `TRAINFORGE_TESTENV_REQUIRED=1` (missing binaries are an error).
pub fn required() -> bool {
    std::env::var("TRAINFORGE_TESTENV_REQUIRED").as_deref() == Ok("1")
}

/// State of one shared environment.
#[allow(clippy::large_enum_variant)] // one static per mode; boxing buys nothing
enum Shared {
    Up(TestEnv),
    /// Not built and not required: why.
    Skip(String),
    /// Start failed: the error, rendered.
    Failed(String),
}

type Slot = OnceLock<Shared>;

/// Shared environment of this mode for this process, started on first use
/// (blocking; safe to call from inside a tokio runtime).
///
/// `Ok(None)`: binaries are not built and `TRAINFORGE_TESTENV_REQUIRED` is not
/// `1` — the caller should skip (a line saying so goes to stderr). With
/// `TRAINFORGE_TESTENV_REQUIRED=1` a missing binary is an `Err`.
pub fn shared(mode: Mode) -> Result<Option<&'static TestEnv>, Error> {
    static API: Slot = OnceLock::new();
    static FULL: Slot = OnceLock::new();
    let slot = match mode {
        Mode::Api => &API,
        Mode::Full => &FULL,
    };
    shared_in(slot, mode, &[])
}

/// Like [`shared`], for the process's one environment whose API server
/// audits the requests of `users` ([`TestEnv::start_audited`]): started by
/// the first call, whose `mode` and `users` it keeps.
pub fn shared_audited(mode: Mode, users: &[&str]) -> Result<Option<&'static TestEnv>, Error> {
    static AUDITED: Slot = OnceLock::new();
    shared_in(&AUDITED, mode, users)
}

fn shared_in(
    slot: &'static Slot,
    mode: Mode,
    users: &[&str],
) -> Result<Option<&'static TestEnv>, Error> {
    let state = slot.get_or_init(|| {
        let paths = paths::Paths::from_env();
        match paths.check(mode) {
            Err(e @ Error::NotBuilt { .. }) if !required() => Shared::Skip(e.to_string()),
            Err(e) => Shared::Failed(e.to_string()),
            Ok(()) => match TestEnv::start_audited_with(mode, paths, users) {
                Ok(env) => Shared::Up(env),
                Err(e) => Shared::Failed(e.to_string()),
            },
        }
    });
    match state {
        Shared::Up(env) => Ok(Some(env)),
        Shared::Skip(why) => {
            skip_line(why);
            Ok(None)
        }
        Shared::Failed(message) => Err(Error::SharedStartFailed {
            mode: mode.to_string(),
            message: message.clone(),
        }),
    }
}

/// Written straight to the process's stderr so that libtest's output capture
/// does not hide it.
fn skip_line(why: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "trainforge-testenv: SKIPPING control-plane test: {why}. Run `make controlplane` to build it; \
         set TRAINFORGE_TESTENV_REQUIRED=1 to make this a failure."
    );
}

/// Implementation of [`require!`]: panics on `Err`.
#[doc(hidden)]
#[allow(clippy::panic)]
pub fn __require(mode: Mode) -> Option<&'static TestEnv> {
    match shared(mode) {
        Ok(env) => env,
        Err(e) => panic!("trainforge-testenv: {mode} control plane unavailable: {e}"),
    }
}

/// In a test: `let Some(env) = trainforge_testenv::require!(Mode::Api) else { return };`
/// — `None` means "not built, skip"; a start failure (or a missing binary with
/// `TRAINFORGE_TESTENV_REQUIRED=1`) panics.
#[macro_export]
macro_rules! require {
    ($mode:expr) => {
        $crate::__require($mode)
    };
}
