//! Call observation (metrics hook) and the warning for a failure ignored
//! under [`FailurePolicy::Ignore`](super::FailurePolicy::Ignore).

use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Told about every guest call the runtime makes (every phase, and
/// `describe` at load and in [`LoadedPlugin::describe_fresh`](super::LoadedPlugin::describe_fresh)).
///
/// Called on the calling thread right after the call (output checks
/// included), so implementations must be quick and must not call plugins.
pub trait CallObserver: Send + Sync {
    /// `plugin`: the plugin's name (its label before `describe` answered);
    /// `phase`: the WIT phase name (`build`, `describe`, ...); `failure`:
    /// the [`Error::reason`](super::Error::reason) when the call failed
    /// (`Timeout`, `ForbiddenObject`, ...); `memory_high_water_bytes`: the
    /// largest linear memory the instance reached.
    fn on_call(
        &self,
        plugin: &str,
        phase: &str,
        elapsed: Duration,
        failure: Option<&'static str>,
        memory_high_water_bytes: usize,
    );

    /// Told about every load ([`PluginRuntime::load`](super::PluginRuntime::load):
    /// compile or cache hit, interface check, `describe`), on the loading
    /// thread: `plugin` the source's label; `outcome` where its code came
    /// from (`compiled`, `memory`, `disk`, `shipped`) or `failed`;
    /// `failure` the [`Error::reason`](super::Error::reason) when it failed.
    fn on_load(
        &self,
        plugin: &str,
        outcome: &'static str,
        failure: Option<&'static str>,
        elapsed: Duration,
    ) {
        let _ = (plugin, outcome, failure, elapsed);
    }
}

/// The runtime's observer, shared with every plugin it loaded (so
/// [`PluginRuntime::set_observer`](super::PluginRuntime::set_observer) also
/// covers plugins loaded earlier).
#[derive(Default)]
pub(crate) struct ObserverSlot(RwLock<Option<Arc<dyn CallObserver>>>);

impl ObserverSlot {
    pub(crate) fn new(observer: Option<Arc<dyn CallObserver>>) -> Self {
        ObserverSlot(RwLock::new(observer))
    }

    pub(crate) fn set(&self, observer: Option<Arc<dyn CallObserver>>) {
        match self.0.write() {
            Ok(mut g) => *g = observer,
            Err(poisoned) => *poisoned.into_inner() = observer,
        }
    }

    fn current(&self) -> Option<Arc<dyn CallObserver>> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn notify(
        &self,
        plugin: &str,
        phase: &str,
        elapsed: Duration,
        failure: Option<&'static str>,
        high_water: usize,
    ) {
        if let Some(o) = self.current() {
            o.on_call(plugin, phase, elapsed, failure, high_water);
        }
    }

    pub(crate) fn notify_load(
        &self,
        plugin: &str,
        outcome: &'static str,
        failure: Option<&'static str>,
        elapsed: Duration,
    ) {
        if let Some(o) = self.current() {
            o.on_load(plugin, outcome, failure, elapsed);
        }
    }
}

/// The warning a pass reports for an ignored failure.
pub(crate) fn ignored_warning(plugin: &str, phase: &str, error: &super::Error) -> String {
    format!(
        "plugin {plugin} failed in phase {phase} ({}), ignored (failurePolicy Ignore): {error}",
        error.reason()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_warning_names_plugin_phase_and_reason() {
        let e = super::super::Error::Timeout {
            plugin: "p".into(),
            phase: "build".into(),
            limit_ms: 5,
        };
        let w = ignored_warning("p", "build", &e);
        assert!(
            w.contains("plugin p") && w.contains("build") && w.contains("Timeout"),
            "{w}"
        );
    }

    #[test]
    fn observer_slot_notifies_the_current_observer() {
        use std::sync::Mutex;
        use std::time::Duration;
        #[derive(Default)]
        struct Count(Mutex<Vec<(String, Option<&'static str>)>>);
        impl CallObserver for Count {
            fn on_call(
                &self,
                plugin: &str,
                _: &str,
                _: Duration,
                failure: Option<&'static str>,
                _: usize,
            ) {
                self.0.lock().unwrap().push((plugin.to_owned(), failure));
            }
        }
        let slot = ObserverSlot::new(None);
        slot.notify("a", "build", Duration::ZERO, None, 0);
        let c = Arc::new(Count::default());
        slot.set(Some(c.clone()));
        slot.notify("b", "build", Duration::ZERO, Some("Trap"), 0);
        assert_eq!(*c.0.lock().unwrap(), vec![("b".to_owned(), Some("Trap"))]);
    }
}
