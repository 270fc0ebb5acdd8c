//! What the author commands that take a while (`plugin push`, `pull`,
//! `precompile`) print while they run, on stderr. Rules:
//!
//! - `--progress auto` (the default): live bars on a terminal (bytes moved,
//!   rate, time left; plugins compiled), nothing off one (a pipe, a file, a
//!   CI log stays quiet);
//! - `--progress plain`: one line per step, wherever stderr goes, with its
//!   size, time and rate (`pushed … : 2.10 MiB in 0.3 s (7.00 MiB/s)`);
//! - `--progress none`: nothing.
//!
//! Results (the pinned reference, what each compile did) go to stdout
//! whatever the mode, and errors to stderr always.

use std::fmt::Display;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::oci::registry::Progress;

/// How progress is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// Bars on a terminal, nothing off one.
    #[default]
    Auto,
    /// A line per step, with sizes, times and rates.
    Plain,
    /// Nothing.
    None,
}

/// The `--progress` flag.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ProgressArgs {
    /// What to print while it runs (stderr): `auto` bars on a terminal and
    /// nothing off one, `plain` a line per step, `none` nothing.
    #[arg(long, value_enum, default_value_t)]
    pub progress: ProgressMode,
}

/// How this run shows progress, once `auto` is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    Bars,
    Lines,
    Quiet,
}

/// Where a command reports its steps.
#[derive(Debug, Clone, Copy)]
pub struct Reporter {
    shown: Shown,
}

impl Reporter {
    /// The reporter `args` asks for, `auto` decided by whether stderr is a
    /// terminal.
    pub fn new(args: ProgressArgs) -> Self {
        Self::resolved(args.progress, std::io::stderr().is_terminal())
    }

    fn resolved(mode: ProgressMode, terminal: bool) -> Self {
        let shown = match mode {
            ProgressMode::Auto if terminal => Shown::Bars,
            ProgressMode::Auto | ProgressMode::None => Shown::Quiet,
            ProgressMode::Plain => Shown::Lines,
        };
        Reporter { shown }
    }

    /// A step starts or ends: a line (bars and plain), or nothing.
    pub fn step(&self, what: impl Display) {
        if self.shown != Shown::Quiet {
            eprintln!("{what}");
        }
    }

    /// A transfer of a blob starts (`verb`: "pushing", "pulling").
    pub fn transfer(&self, verb: &'static str) -> Transfer {
        let bar = (self.shown == Shown::Bars).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(bytes_style());
            bar.set_prefix(verb);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Transfer {
            bar,
            shown: self.shown,
            started: Instant::now(),
        }
    }

    /// `n` steps of one kind start (`plugin precompile`: one per builtin).
    pub fn steps(&self, n: usize) -> Steps {
        let bar = (self.shown == Shown::Bars).then(|| {
            let bar = ProgressBar::with_draw_target(Some(n as u64), ProgressDrawTarget::stderr());
            bar.set_style(steps_style());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Steps {
            bar,
            shown: self.shown,
            n,
        }
    }
}

fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

fn steps_style() -> ProgressStyle {
    ProgressStyle::with_template("[{pos}/{len}] {spinner} {msg} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// One blob moving; see [`Reporter::transfer`].
pub struct Transfer {
    bar: Option<ProgressBar>,
    shown: Shown,
    started: Instant,
}

impl Transfer {
    /// What the registry client tells as bytes move (none when no bar is
    /// drawn).
    pub fn progress(&self) -> Option<Progress> {
        let bar = self.bar.clone()?;
        Some(std::sync::Arc::new(move |done: u64, total: u64| {
            if bar.length() != Some(total) {
                bar.set_length(total);
            }
            bar.set_position(done);
        }))
    }

    /// The transfer is over: `what` (e.g. "pushed manifest sha256:…") with
    /// the size, time and rate of its `bytes`.
    pub fn finish(self, what: impl Display, bytes: usize) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.shown != Shown::Quiet {
            eprintln!("{what}: {}", rate(bytes, self.started.elapsed()));
        }
    }
}

/// Several steps of one kind; see [`Reporter::steps`].
pub struct Steps {
    bar: Option<ProgressBar>,
    shown: Shown,
    n: usize,
}

impl Steps {
    /// Step `i` (from 0) starts, named `name`.
    pub fn start(&self, i: usize, name: &str) {
        match (&self.bar, self.shown) {
            (Some(bar), _) => {
                bar.set_position(i as u64);
                bar.set_message(name.to_owned());
            }
            (None, Shown::Lines) => eprintln!("[{}/{}] {name}…", i + 1, self.n),
            (None, _) => {}
        }
    }

    /// A step's result, on stdout (the bar, if any, steps aside for it).
    pub fn result(&self, line: impl Display) {
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Every step is done.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `bytes` moved in `took`, as people read it: `2.10 MiB in 0.3 s (7.00 MiB/s)`.
pub fn rate(bytes: usize, took: Duration) -> String {
    let secs = took.as_secs_f64();
    let per_sec = if secs > 0.0 {
        format!("{}/s", HumanBytes((bytes as f64 / secs) as u64))
    } else {
        "instant".to_owned()
    };
    format!("{} in {secs:.1} s ({per_sec})", HumanBytes(bytes as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_draws_bars_on_a_terminal_and_is_quiet_off_one() {
        assert_eq!(
            Reporter::resolved(ProgressMode::Auto, true).shown,
            Shown::Bars
        );
        assert_eq!(
            Reporter::resolved(ProgressMode::Auto, false).shown,
            Shown::Quiet
        );
        assert_eq!(
            Reporter::resolved(ProgressMode::Plain, true).shown,
            Shown::Lines
        );
        assert_eq!(
            Reporter::resolved(ProgressMode::Plain, false).shown,
            Shown::Lines
        );
        assert_eq!(
            Reporter::resolved(ProgressMode::None, true).shown,
            Shown::Quiet
        );
    }

    #[test]
    fn rates_read_as_people_read_them() {
        assert_eq!(
            rate(2 << 20, Duration::from_millis(500)),
            "2.00 MiB in 0.5 s (4.00 MiB/s)"
        );
        assert_eq!(
            rate(512, Duration::from_secs(2)),
            "512 B in 2.0 s (256 B/s)"
        );
        assert_eq!(rate(10, Duration::ZERO), "10 B in 0.0 s (instant)");
    }

    #[test]
    fn quiet_transfers_ask_the_registry_for_nothing() {
        let quiet = Reporter::resolved(ProgressMode::Auto, false);
        assert!(quiet.transfer("pushing").progress().is_none());
        let plain = Reporter::resolved(ProgressMode::Plain, false);
        assert!(plain.transfer("pushing").progress().is_none());
    }
}
