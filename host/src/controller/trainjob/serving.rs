//! Whether the plugin set in service can serve TrainJobs, and why not.
//!
//! A set can serve TrainJobs when at least one of its plugins builds
//! JobSets (its `build` is called and it may emit JobSets:
//! [`LoadedPlugin::builds_jobsets`]): without one, no TrainJob would get
//! its JobSet (a set whose other plugins build ConfigMaps would leave every
//! TrainJob without JobSet, condition or Event, and a running one never
//! complete).
//! While no set can serve, the operator is not ready (`plugins` check) and
//! a reconciled TrainJob gets the `PluginsReady=False` condition and a
//! Warning Event instead of objects. [`NotServing`] says which configured
//! plugins are not serving and why, in one line.
//!
//! A set that can serve may still lack plugins that are configured: each
//! runtime policy needs a serving plugin that declares its key, so a
//! TrainJob whose runtime selects a policy no serving plugin declares is
//! not built ([`policy_message`] says which policy, and which configured
//! plugins are not serving and why), and readiness names the configured
//! plugins that are not serving ([`Degraded`]) while the operator stays
//! ready.

use std::fmt;

use crate::controller::catalog::PluginReport;
use crate::plugin::{LoadedPlugin, PluginSet};

/// The longest explanation kept for one plugin, in characters: a refused
/// attempt's message can be long (a trap with its stderr), and the whole
/// explanation goes into a condition message and an Event note.
const WHY_LIMIT: usize = 200;

/// Whether `set` can serve TrainJobs: one of its plugins builds JobSets.
pub fn can_serve(set: &PluginSet) -> bool {
    set.plugins().iter().any(LoadedPlugin::builds_jobsets)
}

/// Where the operator's plugins come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `ClusterTrainerPlugin` objects (the default).
    Catalog,
    /// The plugins embedded in the binary (`--builtin-plugins`).
    Builtin,
}

/// A configured plugin with no version in service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absent {
    /// Its name (the `ClusterTrainerPlugin`'s name).
    pub name: String,
    /// Why it is not in service (reason and message of its latest attempt).
    pub why: String,
}

/// Why no plugin set can serve TrainJobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotServing {
    /// Where the plugins come from.
    pub origin: Origin,
    /// Configured plugins with no version in service.
    pub absent: Vec<Absent>,
    /// Plugins in service, none of which builds JobSets.
    pub without_build: Vec<String>,
}

impl NotServing {
    /// The names of the plugins concerned: those not in service, then those
    /// in service without a `build` phase.
    pub fn plugins(&self) -> Vec<&str> {
        self.absent
            .iter()
            .map(|a| a.name.as_str())
            .chain(self.without_build.iter().map(String::as_str))
            .collect()
    }
}

impl fmt::Display for NotServing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no plugin in service builds JobSets")?;
        let what = match self.origin {
            Origin::Catalog => "ClusterTrainerPlugin",
            Origin::Builtin => "builtin plugin",
        };
        if self.absent.is_empty() && self.without_build.is_empty() {
            return match self.origin {
                Origin::Catalog => f.write_str("; no ClusterTrainerPlugin is configured"),
                Origin::Builtin => f.write_str(
                    "; this binary embeds no builtin plugin (--builtin-plugins serves only those)",
                ),
            };
        }
        if !self.absent.is_empty() {
            write!(f, "; {}", absent_list(self.origin, &self.absent))?;
        }
        if !self.without_build.is_empty() {
            write!(
                f,
                "; {what}s serving without building JobSets: {}",
                self.without_build.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Configured plugins not serving while the set in service can serve
/// TrainJobs (those whose runtimes need them cannot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    /// Where the plugins come from.
    pub origin: Origin,
    /// Configured plugins with no version in service, and why.
    pub absent: Vec<Absent>,
}

/// `<what>s not serving: a (why), b (why)`.
fn absent_list(origin: Origin, absent: &[Absent]) -> String {
    let what = match origin {
        Origin::Catalog => "ClusterTrainerPlugin",
        Origin::Builtin => "builtin plugin",
    };
    let list: Vec<String> = absent
        .iter()
        .map(|a| format!("{} ({})", a.name, a.why))
        .collect();
    format!("{what}s not serving: {}", list.join(", "))
}

impl fmt::Display for Degraded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&absent_list(self.origin, &self.absent))
    }
}

/// The configured plugins not serving, as [`Degraded`]; `None` when every
/// configured plugin serves.
pub fn degraded(origin: Origin, reports: &[PluginReport]) -> Option<Degraded> {
    let absent = absent_of(reports);
    (!absent.is_empty()).then_some(Degraded { origin, absent })
}

/// The condition message (and Event note) of a TrainJob whose runtime
/// selects policies no serving plugin declares: `problem` (the pipeline's
/// error, naming the policy keys and the plugins in service), then the
/// configured plugins that are not serving and why, if any.
pub fn policy_message(problem: &str, degraded: Option<&Degraded>) -> String {
    match degraded {
        Some(d) => format!("{problem}; {d}"),
        None => format!("{problem}; no configured plugin is failing: configure one that serves it"),
    }
}

/// The reports of configured plugins with no version in service, with why.
fn absent_of(reports: &[PluginReport]) -> Vec<Absent> {
    reports
        .iter()
        .filter(|r| !r.serving)
        .map(|r| Absent {
            name: r.name.clone(),
            why: match &r.failure {
                Some((reason, message)) => bounded(&format!("{reason}: {message}")),
                None => "not loaded yet".to_owned(),
            },
        })
        .collect()
}

/// `text` cut to [`WHY_LIMIT`] characters (` ...` marks a cut).
fn bounded(text: &str) -> String {
    let mut chars = text.chars();
    let cut: String = chars.by_ref().take(WHY_LIMIT).collect();
    if chars.next().is_some() {
        format!("{cut} ...")
    } else {
        cut
    }
}

/// The rule for a fixed set (`--builtin-plugins`): `None` when it can serve.
pub fn check_fixed(set: &PluginSet) -> Option<NotServing> {
    if can_serve(set) {
        return None;
    }
    Some(NotServing {
        origin: Origin::Builtin,
        absent: Vec::new(),
        without_build: set
            .plugins()
            .iter()
            .map(LoadedPlugin::name)
            .map(str::to_owned)
            .collect(),
    })
}

/// The rule for the `ClusterTrainerPlugin` catalog, given the set in
/// service and what the catalog reports about each object: `None` when the
/// set can serve.
pub fn check_catalog(set: &PluginSet, reports: &[PluginReport]) -> Option<NotServing> {
    if can_serve(set) {
        return None;
    }
    let absent = absent_of(reports);
    let without_build = reports
        .iter()
        .filter(|r| r.serving && !r.builds)
        .map(|r| r.name.clone())
        .collect();
    Some(NotServing {
        origin: Origin::Catalog,
        absent,
        without_build,
    })
}

/// A set of the builtin JobSet plugin alone (it builds the JobSet), for
/// tests; panics, naming what is embedded, when it is not.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
pub(crate) fn jobset_set() -> PluginSet {
    let runtime =
        crate::plugin::PluginRuntime::new(crate::plugin::RuntimeConfig::default()).unwrap();
    let builtins = crate::plugin::builtin::all();
    let Some(jobset) = builtins.iter().find(|b| b.crate_name == "plugin-jobset") else {
        panic!(
            "the builtin plugin-jobset is not embedded (embedded: {:?})",
            builtins.iter().map(|b| b.crate_name).collect::<Vec<_>>()
        );
    };
    PluginSet::new(vec![runtime.load(jobset.source()).unwrap()]).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn report(
        name: &str,
        serving: bool,
        builds: bool,
        failure: Option<(&str, &str)>,
    ) -> PluginReport {
        PluginReport {
            name: name.into(),
            serving,
            serving_generation: serving.then_some(1),
            builds,
            failure: failure.map(|(r, m)| (r.into(), m.into())),
        }
    }

    #[test]
    fn an_empty_set_cannot_serve_and_says_why() {
        let empty = PluginSet::default();
        assert!(!can_serve(&empty));
        let n = check_catalog(&empty, &[]).unwrap();
        assert_eq!(
            n.to_string(),
            "no plugin in service builds JobSets; no ClusterTrainerPlugin is configured"
        );
        assert!(n.plugins().is_empty());
        let n = check_fixed(&empty).unwrap();
        assert_eq!(n.origin, Origin::Builtin);
        assert!(
            n.to_string()
                .contains("this binary embeds no builtin plugin"),
            "{n}"
        );
    }

    #[test]
    fn the_catalog_names_each_plugin_not_serving_and_why() {
        let reports = [
            report(
                "jobset",
                false,
                false,
                Some(("DigestMismatch", "expected sha256 00, got 11")),
            ),
            report("mpi", false, false, None),
            report("torch", true, false, None),
            report("volcano", true, false, Some(("FetchFailed", "gone"))),
        ];
        let n = check_catalog(&PluginSet::default(), &reports).unwrap();
        assert_eq!(
            n.to_string(),
            "no plugin in service builds JobSets; \
             ClusterTrainerPlugins not serving: jobset (DigestMismatch: expected sha256 00, got 11), mpi (not loaded yet); \
             ClusterTrainerPlugins serving without building JobSets: torch, volcano"
        );
        assert_eq!(n.plugins(), ["jobset", "mpi", "torch", "volcano"]);
    }

    #[test]
    fn configured_plugins_not_serving_are_named_while_the_set_serves() {
        let reports = [
            report("jobset", true, true, None),
            report(
                "torch",
                false,
                false,
                Some(("NotFound", "ConfigMap x/y not found")),
            ),
        ];
        let d = degraded(Origin::Catalog, &reports).unwrap();
        assert_eq!(
            d.to_string(),
            "ClusterTrainerPlugins not serving: torch (NotFound: ConfigMap x/y not found)"
        );
        assert_eq!(
            policy_message(
                "runtime policy mlPolicy.torch served by no plugin",
                Some(&d)
            ),
            "runtime policy mlPolicy.torch served by no plugin; \
             ClusterTrainerPlugins not serving: torch (NotFound: ConfigMap x/y not found)"
        );
        assert!(
            policy_message("p", None).contains("no configured plugin is failing"),
            "says that none is configured to serve it"
        );
        assert_eq!(degraded(Origin::Catalog, &reports[..1]), None);
    }

    #[test]
    fn long_failure_messages_are_cut() {
        let long = "x".repeat(1000);
        let n = check_catalog(
            &PluginSet::default(),
            &[report("p", false, false, Some(("Trap", &long)))],
        )
        .unwrap();
        assert_eq!(n.absent[0].why.chars().count(), WHY_LIMIT + 4);
        assert!(n.absent[0].why.starts_with("Trap: xxx"));
        assert!(n.absent[0].why.ends_with("x ..."));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn a_set_with_a_build_phase_serves() {
        let set = jobset_set();
        assert!(can_serve(&set));
        assert_eq!(check_fixed(&set), None);
        assert_eq!(
            check_catalog(&set, &[report("x", false, false, None)]),
            None
        );
    }
}
