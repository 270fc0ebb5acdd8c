//! A plugin's compiled code: mapped for its whole life, or only while it
//! is used.
//!
//! Rules:
//! - A builtin plugin whose compiled artifact is on disk (shipped beside the
//!   binary, or in the plugin cache) keeps no code mapped between uses: its
//!   code is mapped by its first call after load and released once it has
//!   not been called for a while ([`super::PluginRuntime::release_idle`]).
//!   Mapping it again reads the checksummed artifact (a few milliseconds);
//!   if the artifact is gone, the builtin is compiled again from the bytes
//!   embedded in the binary, within the compile limits. A call that finds
//!   neither fails with `LoadFailed` naming the plugin (its failure policy
//!   applies) and the next call tries again.
//! - Every other plugin (fetched, tenant, or a builtin with no artifact on
//!   disk) keeps its code mapped while it is loaded: nothing else could map
//!   it again without fetching or compiling it.
//! - A call in flight holds the code it started with, so releasing never
//!   unmaps code that runs.
//!
//! Why: a compiled plugin is about 2 MiB of native code, and the kernel
//! maps file pages in large page-cache folios, so a plugin whose `describe`
//! alone ran keeps nearly all of its code resident. With policy routing a
//! cluster that runs only torch TrainJobs calls three of the nine builtins;
//! an idle operator calls none.

use super::Error;
use super::bindings::PluginPre;
use super::sandbox::CallState;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Maps a plugin's code again (see the module rules).
pub(crate) type Reload = Box<dyn Fn() -> Result<PluginPre<CallState>, Error> + Send + Sync>;

/// A plugin's linked code.
pub(crate) enum Code {
    /// Mapped for as long as the plugin is loaded.
    Resident(PluginPre<CallState>),
    /// Mapped while in use.
    OnDemand(Arc<OnDemand>),
}

impl Code {
    /// The linked code for one call, mapping it first if it is not.
    pub(crate) fn pre(&self) -> Result<PluginPre<CallState>, Error> {
        match self {
            Code::Resident(pre) => Ok(pre.clone()),
            Code::OnDemand(o) => o.get(),
        }
    }

    /// Whether the code is mapped now.
    pub(crate) fn is_mapped(&self) -> bool {
        match self {
            Code::Resident(_) => true,
            Code::OnDemand(o) => o.is_mapped(),
        }
    }
}

struct Slot {
    pre: Option<PluginPre<CallState>>,
    last_used: Instant,
}

/// Code mapped on first use and released when idle.
pub(crate) struct OnDemand {
    slot: Mutex<Slot>,
    reload: Reload,
}

impl OnDemand {
    /// Not mapped; `reload` maps it.
    pub(crate) fn new(reload: Reload) -> Self {
        OnDemand {
            slot: Mutex::new(Slot {
                pre: None,
                last_used: Instant::now(),
            }),
            reload,
        }
    }

    fn get(&self) -> Result<PluginPre<CallState>, Error> {
        // A poisoned lock only means a reload panicked elsewhere; the slot
        // itself is always consistent (an `Option` assigned at once).
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.last_used = Instant::now();
        if let Some(pre) = &slot.pre {
            return Ok(pre.clone());
        }
        let pre = (self.reload)()?;
        slot.pre = Some(pre.clone());
        Ok(pre)
    }

    fn is_mapped(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pre
            .is_some()
    }

    /// Release the code if it was last used more than `idle` before `now`;
    /// whether it was released.
    fn release_if_idle(&self, idle: Duration, now: Instant) -> bool {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.pre.is_some() && now.saturating_duration_since(slot.last_used) >= idle {
            slot.pre = None;
            return true;
        }
        false
    }
}

/// Every on-demand code slot of a runtime (weakly: a plugin dropped from
/// service takes its slot with it).
#[derive(Default)]
pub(crate) struct OnDemandSlots(Mutex<Vec<Weak<OnDemand>>>);

impl OnDemandSlots {
    /// Track `slot`.
    pub(crate) fn register(&self, slot: &Arc<OnDemand>) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(slot));
    }

    /// Release the code of every slot idle for at least `idle`; how many
    /// were released.
    pub(crate) fn release_idle(&self, idle: Duration) -> usize {
        let live: Vec<Arc<OnDemand>> = {
            let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        let now = Instant::now();
        live.iter().filter(|s| s.release_if_idle(idle, now)).count()
    }
}
