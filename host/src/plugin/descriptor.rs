//! What the host accepts from `describe`. A descriptor is the plugin's own
//! claim about itself, so every field is checked and bounded before it is
//! used as a metric label, a log field, a watch or a routing key:
//!
//! - `name`: a DNS label (lower-case letters, digits, `-`; at most 63) and
//!   not the name of a builtin plugin unless the component *is* that
//!   builtin (so a plugin cannot take over `jobset`'s place);
//! - `version`: at most 64 characters of `[A-Za-z0-9.+_-]`;
//! - `wit-version`: a version this host serves;
//! - `policy-keys`: at most [`MAX_POLICY_KEYS`], each `mlPolicy` or
//!   `podGroupPolicy` optionally followed by `.<field>`;
//! - `phases`: at most [`MAX_PHASES`] names of at most 64 characters
//!   (names this host does not know are ignored);
//! - `emits`, `reads`, `watches`: at most [`MAX_KINDS`] each and
//!   [`MAX_DISTINCT_KINDS`] together, each a valid `apiVersion` and `kind`;
//! - `capabilities`: at most [`MAX_CAPABILITIES`] names of at most 64
//!   characters;
//! - naming rules (`naming.object-names`, read only when `object-names` is
//!   among the phases; [`check_object_names`]): at most
//!   [`MAX_OBJECT_NAMES`], each for a kind the plugin declares in `emits`,
//!   with a suffix that is empty or `-` and at most [`MAX_SUFFIX`]
//!   characters a name can end in, never the host's runtime-snapshot
//!   suffix, and an empty suffix only for kinds other than ConfigMap and
//!   Secret (which every plugin emits: claiming every one named as a
//!   TrainJob would refuse all the others').

use super::Error;
use super::bounded;
use super::output_check::SNAPSHOT_SUFFIX;
use trainforge_api::plugin::{Descriptor, KindRef, ObjectName, WIT_VERSION};

/// `major.minor` of a version string, for 0.x compatibility (a 0.x minor
/// bump is breaking in semver; patches are additive).
pub(super) fn compat_line(v: &str) -> Option<(u64, u64)> {
    let mut it = v.split(['.', '-', '+']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a plugin built against `plugin` WIT can be served by this host.
pub fn wit_compatible(plugin: &str) -> bool {
    match (compat_line(plugin), compat_line(WIT_VERSION)) {
        (Some((pm, pn)), Some((hm, hn))) if pm == 0 || hm == 0 => pm == hm && pn == hn,
        (Some((pm, _)), Some((hm, _))) => pm == hm,
        _ => false,
    }
}

/// Policy keys one plugin may serve.
pub const MAX_POLICY_KEYS: usize = 16;
/// Phase names one plugin may list.
pub const MAX_PHASES: usize = 16;
/// Kinds in each of `emits`, `reads` and `watches`.
pub const MAX_KINDS: usize = 16;
/// Distinct kinds across `emits`, `reads` and `watches`.
pub const MAX_DISTINCT_KINDS: usize = 24;
/// Capabilities one plugin may request.
pub const MAX_CAPABILITIES: usize = 8;

/// Whether `s` is a DNS label (RFC 1123, at most 63 characters).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether `k` is a syntactically valid kind reference: `v1` or
/// `group/version`, and a CamelCase kind of at most 63 characters.
pub fn valid_kind(k: &KindRef) -> bool {
    let version_ok = |v: &str| {
        v.len() <= 63
            && v.starts_with('v')
            && v.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let api_ok = match k.api_version.split_once('/') {
        None => version_ok(&k.api_version),
        Some((group, version)) => is_dns_subdomain(group) && version_ok(version),
    };
    let kind_ok = k.kind.len() <= 63
        && k.kind.starts_with(|c: char| c.is_ascii_uppercase())
        && k.kind.bytes().all(|b| b.is_ascii_alphanumeric());
    api_ok && kind_ok
}

fn valid_policy_key(k: &str) -> bool {
    let (root, rest) = match k.split_once('.') {
        Some((r, rest)) => (r, Some(rest)),
        None => (k, None),
    };
    k.len() <= 64
        && matches!(root, "mlPolicy" | "podGroupPolicy")
        && rest.is_none_or(|f| {
            f.starts_with(|c: char| c.is_ascii_lowercase())
                && f.bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

/// Check `d` (see the module rules). `label` names the plugin in errors
/// until its name is known to be valid; `builtin_names` are the names
/// reserved for the binary's builtin plugins, which only a builtin
/// component (`is_builtin`) may use.
pub fn check(
    label: &str,
    d: &Descriptor,
    is_builtin: bool,
    builtin_names: &[String],
) -> Result<(), Error> {
    let who = if is_dns_label(&d.name) {
        d.name.clone()
    } else {
        label.to_owned()
    };
    let bad = |message: String| Error::InvalidDescriptor {
        plugin: who.clone(),
        message,
    };
    if !is_dns_label(&d.name) {
        return Err(bad(format!(
            "name {:?} is not a DNS label (lower-case letters, digits and '-', at most 63)",
            bounded::sanitize(&d.name, 80)
        )));
    }
    if !is_builtin && builtin_names.contains(&d.name) {
        return Err(bad(format!(
            "name {:?} is reserved for the builtin plugin of that name",
            d.name
        )));
    }
    let version_ok = !d.version.is_empty()
        && d.version.len() <= 64
        && d.version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+._-".contains(&b));
    if !version_ok {
        return Err(bad(format!(
            "version {:?} is not 1 to 64 characters of [A-Za-z0-9.+_-]",
            bounded::sanitize(&d.version, 80)
        )));
    }
    if !wit_compatible(&d.wit_version) {
        return Err(Error::IncompatibleInterface {
            plugin: who.clone(),
            message: format!(
                "describe() reports WIT version {:?}; this host serves {WIT_VERSION}",
                bounded::sanitize(&d.wit_version, 40)
            ),
        });
    }
    if d.policy_keys.len() > MAX_POLICY_KEYS {
        return Err(bad(format!(
            "{} policy keys; at most {MAX_POLICY_KEYS}",
            d.policy_keys.len()
        )));
    }
    if let Some(k) = d.policy_keys.iter().find(|k| !valid_policy_key(k)) {
        return Err(bad(format!(
            "policy key {:?} is not mlPolicy[.<field>] or podGroupPolicy[.<field>]",
            bounded::sanitize(k, 80)
        )));
    }
    if d.phases.len() > MAX_PHASES || d.phases.iter().any(|p| p.len() > 64) {
        return Err(bad(format!(
            "at most {MAX_PHASES} phase names of at most 64 characters"
        )));
    }
    for (what, kinds) in [
        ("emits", &d.emits),
        ("reads", &d.reads),
        ("watches", &d.watches),
    ] {
        if kinds.len() > MAX_KINDS {
            return Err(bad(format!(
                "{} kinds in {what}; at most {MAX_KINDS}",
                kinds.len()
            )));
        }
        if let Some(k) = kinds.iter().find(|k| !valid_kind(k)) {
            return Err(bad(format!(
                "{what} has an invalid kind reference {:?}",
                bounded::sanitize(&k.to_string(), 120)
            )));
        }
    }
    let distinct: std::collections::BTreeSet<&KindRef> =
        d.emits.iter().chain(&d.reads).chain(&d.watches).collect();
    if distinct.len() > MAX_DISTINCT_KINDS {
        return Err(bad(format!(
            "{} distinct kinds across emits, reads and watches; at most {MAX_DISTINCT_KINDS}",
            distinct.len()
        )));
    }
    if d.capabilities.len() > MAX_CAPABILITIES || d.capabilities.iter().any(|c| c.len() > 64) {
        return Err(bad(format!(
            "at most {MAX_CAPABILITIES} capabilities of at most 64 characters"
        )));
    }
    Ok(())
}

/// At most this many naming rules per plugin.
pub const MAX_OBJECT_NAMES: usize = 16;
/// At most this many characters in a naming rule's suffix.
pub const MAX_SUFFIX: usize = 64;

/// Check the naming rules `names` that plugin `d` returned from
/// `naming.object-names` (see the module doc): a refusal names the rule.
pub fn check_object_names(d: &Descriptor, names: &[ObjectName]) -> Result<(), Error> {
    let bad = |message: String| Error::InvalidDescriptor {
        plugin: d.name.clone(),
        message,
    };
    if names.len() > MAX_OBJECT_NAMES {
        return Err(bad(format!(
            "{} naming rules (object-names); at most {MAX_OBJECT_NAMES}",
            names.len()
        )));
    }
    for n in names {
        let shown = || {
            format!(
                "naming rule {}{:?}",
                bounded::sanitize(&n.kind.to_string(), 120),
                bounded::sanitize(&n.suffix, 64)
            )
        };
        if !valid_kind(&n.kind) || !d.emits.iter().any(|k| k.same_kind(&n.kind)) {
            return Err(bad(format!(
                "{}: its kind is not one the plugin declares in emits",
                shown()
            )));
        }
        if !valid_suffix(&n.suffix) {
            return Err(bad(format!(
                "{}: a suffix is empty, or '-' then lower-case letters, digits, '-' and '.' (not last), at most {MAX_SUFFIX} characters",
                shown()
            )));
        }
        if n.suffix.ends_with(SNAPSHOT_SUFFIX) {
            return Err(bad(format!(
                "{}: names ending in {SNAPSHOT_SUFFIX:?} are the host's runtime snapshots",
                shown()
            )));
        }
        if n.suffix.is_empty()
            && n.kind.group().is_empty()
            && ["ConfigMap", "Secret"].contains(&n.kind.kind.as_str())
        {
            return Err(bad(format!(
                "{}: a ConfigMap or Secret named exactly as its TrainJob cannot be claimed (every plugin emits these kinds); use a suffix",
                shown()
            )));
        }
    }
    Ok(())
}

/// Empty, or `-` then what a DNS subdomain may end in.
fn valid_suffix(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return s.is_empty();
    };
    s.len() <= MAX_SUFFIX
        && !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !rest.ends_with(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Descriptor {
        Descriptor {
            name: "vendor-env".into(),
            version: "1.2.3-rc.1+build".into(),
            wit_version: "0.1.0".into(),
            policy_keys: vec!["mlPolicy.torch".into(), "podGroupPolicy".into()],
            phases: vec!["build".into(), "some-future-phase".into()],
            emits: vec![KindRef::new("v1", "ConfigMap")],
            reads: vec![KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet")],
            watches: vec![],
            capabilities: vec!["random".into()],
            object_names: vec![],
        }
    }

    #[test]
    fn naming_rules_are_bounded_and_for_emitted_kinds() {
        let d = Descriptor {
            emits: vec![
                KindRef::new("v1", "ConfigMap"),
                KindRef::new("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            ],
            ..good()
        };
        let rule =
            |api: &str, kind: &str, suffix: &str| ObjectName::new(KindRef::new(api, kind), suffix);
        let run = |names: Vec<ObjectName>| {
            check_object_names(&d, &names).map_or_else(|e| e.to_string(), |()| "ok".into())
        };
        assert_eq!(run(vec![]), "ok");
        assert_eq!(
            run(vec![
                rule("v1", "ConfigMap", "-mpi-hostfile"),
                rule("v1", "ConfigMap", "-a.b-1"),
                // Any version of an emitted group/kind.
                rule("scheduling.x-k8s.io/v1beta1", "PodGroup", ""),
            ]),
            "ok"
        );
        for (names, says) in [
            (
                vec![rule("v1", "ConfigMap", "-x"); MAX_OBJECT_NAMES + 1],
                "at most 16",
            ),
            (
                vec![rule("v1", "Secret", "-x")],
                "not one the plugin declares",
            ),
            (vec![rule("", "", "-x")], "not one the plugin declares"),
            (vec![rule("v1", "ConfigMap", "x")], "a suffix is"),
            (vec![rule("v1", "ConfigMap", "-")], "a suffix is"),
            (vec![rule("v1", "ConfigMap", "-A")], "a suffix is"),
            (vec![rule("v1", "ConfigMap", "-x-")], "a suffix is"),
            (vec![rule("v1", "ConfigMap", "-x/y")], "a suffix is"),
            (
                vec![rule("v1", "ConfigMap", "-x\nINFO forged")],
                "a suffix is",
            ),
            (
                vec![rule(
                    "v1",
                    "ConfigMap",
                    &format!("-{}", "x".repeat(MAX_SUFFIX)),
                )],
                "a suffix is",
            ),
            (
                vec![rule("v1", "ConfigMap", "-runtime-snapshot")],
                "runtime snapshots",
            ),
            (
                vec![rule("v1", "ConfigMap", "-my-runtime-snapshot")],
                "runtime snapshots",
            ),
            (vec![rule("v1", "ConfigMap", "")], "cannot be claimed"),
        ] {
            let got = run(names.clone());
            assert!(got.contains(says), "{names:?}: {got}");
            assert!(got.contains("vendor-env"), "{got}");
        }
    }

    fn reason(d: Descriptor) -> String {
        check("file.wasm", &d, false, &["jobset".into(), "torch".into()])
            .map_or_else(|e| e.to_string(), |()| "ok".into())
    }

    #[test]
    fn accepts_a_good_descriptor() {
        assert_eq!(reason(good()), "ok");
    }

    #[test]
    fn refuses_each_bad_field() {
        let cases: Vec<(Descriptor, &str)> = vec![
            (
                Descriptor {
                    name: "x".repeat(300),
                    ..good()
                },
                "DNS label",
            ),
            (
                Descriptor {
                    name: "Evil\nINFO forged".into(),
                    ..good()
                },
                "DNS label",
            ),
            (
                Descriptor {
                    name: "jobset".into(),
                    ..good()
                },
                "reserved",
            ),
            (
                Descriptor {
                    version: "1 2".into(),
                    ..good()
                },
                "version",
            ),
            (
                Descriptor {
                    version: "v".repeat(65),
                    ..good()
                },
                "version",
            ),
            (
                Descriptor {
                    wit_version: "9.0.0".into(),
                    ..good()
                },
                "IncompatibleInterface",
            ),
            (
                Descriptor {
                    policy_keys: vec!["spec.evil".into()],
                    ..good()
                },
                "policy key",
            ),
            (
                Descriptor {
                    policy_keys: vec!["mlPolicy.x".into(); 17],
                    ..good()
                },
                "policy keys",
            ),
            (
                Descriptor {
                    phases: vec!["build".into(); 17],
                    ..good()
                },
                "phase",
            ),
            (
                Descriptor {
                    reads: (0..17)
                        .map(|i| KindRef::new("v1", format!("K{i}")))
                        .collect(),
                    ..good()
                },
                "reads",
            ),
            (
                Descriptor {
                    emits: (0..12)
                        .map(|i| KindRef::new("v1", format!("E{i}")))
                        .collect(),
                    reads: (0..12)
                        .map(|i| KindRef::new("v1", format!("R{i}")))
                        .collect(),
                    watches: (0..4)
                        .map(|i| KindRef::new("v1", format!("W{i}")))
                        .collect(),
                    ..good()
                },
                "distinct",
            ),
            (
                Descriptor {
                    emits: vec![KindRef::new("v1", "config map")],
                    ..good()
                },
                "invalid kind",
            ),
            (
                Descriptor {
                    emits: vec![KindRef::new("Evil_Group/v1", "X")],
                    ..good()
                },
                "invalid kind",
            ),
            (
                Descriptor {
                    capabilities: vec!["c".into(); 9],
                    ..good()
                },
                "capabilities",
            ),
        ];
        for (d, want) in cases {
            let got = reason(d);
            assert!(got.contains(want), "want {want:?} in {got:?}");
            assert!(!got.contains('\n'), "{got:?}");
        }
    }

    #[test]
    fn builtins_may_use_their_names() {
        let d = Descriptor {
            name: "jobset".into(),
            ..good()
        };
        assert!(check("builtin:plugin-jobset", &d, true, &["jobset".into()]).is_ok());
    }
}
