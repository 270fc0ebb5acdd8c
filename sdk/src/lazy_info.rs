//! The info of a phase, parsed only as far as the phase reads it.
//!
//! A ~20 KB info is mostly the JobSet template and the pod sets' containers.
//! Parsing all of it into typed values and writing it back took most of a
//! phase call in Wasm, while a typical phase reads a policy and edits one
//! pod set. [`InfoCell`] therefore has three levels:
//!
//! 1. **sections**: one scan splits the info into raw members
//!    ([`RawObject`], borrowed from the input, nothing copied) and the pod
//!    sets into raw pod sets, reading only their `name` and `ancestor`;
//! 2. **pod sets** are parsed one by one when read or edited
//!    ([`InfoCell::pod_set`], [`InfoCell::pod_set_mut`]); writing the info
//!    back copies every untouched member and pod set verbatim;
//! 3. the **whole** [`Info`] is parsed only when a phase asks for it
//!    ([`InfoCell::info`], [`InfoCell::info_mut`]).
//!
//! Every level sees the same values: an edit made through a pod set is seen
//! by a later `info()`, and one made through `info_mut()` by a later
//! `pod_set()`.

use crate::raw_object::RawObject;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::cell::OnceCell;
use std::fmt;
use trainforge_api::plugin::{Info, PluginError, PodSet, RuntimePolicy};

const TEMPLATE_SPEC: &str = "templateSpec";
const POD_SETS: &str = "podSets";
const RUNTIME_POLICY: &str = "runtimePolicy";

/// The info, parsed on demand (see the module docs).
pub(crate) struct InfoCell<'a> {
    /// The input JSON; `None` when built from a parsed [`Info`].
    raw: Option<&'a str>,
    /// Shallow parse of `raw`.
    sections: OnceCell<Sections<'a>>,
    /// `runtimePolicy` of `raw`.
    policy: OnceCell<RuntimePolicy>,
    /// Full parse of `raw` (or of `sections` once they were edited).
    full: OnceCell<Info>,
    /// Set by `info_mut`: from then on the authoritative value.
    owned: Option<Info>,
    /// A pod set was edited through the sections: they are authoritative.
    sections_edited: bool,
    /// The first parse error met (the value then reads as empty).
    error: OnceCell<PluginError>,
}

impl<'a> InfoCell<'a> {
    /// From the JSON of the WIT input; nothing is parsed yet.
    pub(crate) fn raw(json: &'a str) -> Self {
        InfoCell {
            raw: Some(json),
            ..InfoCell::empty()
        }
    }

    /// From an already parsed info.
    pub(crate) fn parsed(info: Info) -> Self {
        InfoCell {
            owned: Some(info),
            ..InfoCell::empty()
        }
    }

    fn empty() -> Self {
        InfoCell {
            raw: None,
            sections: OnceCell::new(),
            policy: OnceCell::new(),
            full: OnceCell::new(),
            owned: None,
            sections_edited: false,
            error: OnceCell::new(),
        }
    }

    /// The first input error met while parsing.
    pub(crate) fn error(&self) -> Option<&PluginError> {
        self.error.get()
    }

    /// Whether anything was (possibly) changed.
    pub(crate) fn changed(&self) -> bool {
        self.owned.is_some() || self.sections_edited
    }

    /// Whether the whole info has been parsed (tests).
    #[cfg(test)]
    pub(crate) fn fully_parsed(&self) -> bool {
        self.owned.is_some() || self.full.get().is_some()
    }

    fn fail<T: Default>(&self, what: &str, e: impl fmt::Display) -> T {
        let _ = self
            .error
            .set(PluginError::InvalidInput(format!("{what}: {e}")));
        T::default()
    }

    fn raw_json(&self) -> &'a str {
        self.raw.unwrap_or("{}")
    }

    fn sections(&self) -> &Sections<'a> {
        self.sections.get_or_init(|| {
            serde_json::from_str(self.raw_json()).unwrap_or_else(|e| self.fail("info JSON", e))
        })
    }

    /// The whole info, parsed now if needed.
    pub(crate) fn info(&self) -> &Info {
        if let Some(info) = &self.owned {
            return info;
        }
        self.full.get_or_init(|| {
            let parsed = if self.sections_edited {
                self.sections().to_info()
            } else {
                serde_json::from_str(self.raw_json())
            };
            parsed.unwrap_or_else(|e| self.fail("info JSON", e))
        })
    }

    /// The whole info, mutably: from now on every edit goes to it.
    pub(crate) fn info_mut(&mut self) -> &mut Info {
        if self.owned.is_none() {
            self.info();
            let full = self.full.take().unwrap_or_default();
            self.sections = OnceCell::new();
            self.sections_edited = false;
            self.owned = Some(full);
        }
        self.owned.get_or_insert_with(Info::default)
    }

    /// The runtime policies; scans the info only once.
    pub(crate) fn runtime_policy(&self) -> &RuntimePolicy {
        if let Some(info) = self.owned.as_ref().or(self.full.get()) {
            return &info.runtime_policy;
        }
        self.policy.get_or_init(|| {
            self.sections()
                .top
                .parse(RUNTIME_POLICY)
                .map(Option::unwrap_or_default)
                .unwrap_or_else(|e| self.fail("info runtimePolicy", e))
        })
    }

    /// The index of the first pod set matching `pred` in the sections.
    fn find(&self, pred: impl Fn(&LazyPodSet<'a>) -> bool) -> Option<usize> {
        self.sections().pod_sets.iter().position(pred)
    }

    /// The pod set at `i` of the sections, parsed on first read.
    fn section_pod_set(&self, i: usize) -> Option<&PodSet> {
        let p = self.sections().pod_sets.get(i)?;
        match p.get() {
            Ok(ps) => Some(ps),
            Err(e) => self.fail(&format!("info pod set {:?}", p.name), e),
        }
    }

    /// Whether reads should go to the full info rather than the sections.
    fn use_full(&self) -> bool {
        self.owned.is_some() || (!self.sections_edited && self.full.get().is_some())
    }

    /// The pod set named `name`.
    pub(crate) fn pod_set(&self, name: &str) -> Option<&PodSet> {
        if self.use_full() {
            return self.info().pod_set(name);
        }
        self.find(|p| p.name == name)
            .and_then(|i| self.section_pod_set(i))
    }

    /// The first pod set whose ancestor is `ancestor`.
    pub(crate) fn pod_set_by_ancestor(&self, ancestor: &str) -> Option<&PodSet> {
        if self.use_full() {
            return self.info().pod_set_by_ancestor(ancestor);
        }
        self.find(|p| p.ancestor.as_deref() == Some(ancestor))
            .and_then(|i| self.section_pod_set(i))
    }

    /// Names of the pod sets, in template order.
    pub(crate) fn pod_set_names(&self) -> Vec<&str> {
        if self.use_full() {
            return self
                .info()
                .template_spec
                .pod_sets
                .iter()
                .map(|p| p.name.as_str())
                .collect();
        }
        self.sections()
            .pod_sets
            .iter()
            .map(|p| p.name.as_str())
            .collect()
    }

    fn pod_set_mut_by(&mut self, pred: impl Fn(&LazyPodSet<'a>) -> bool) -> Option<&mut PodSet> {
        let i = self.find(pred)?;
        // Parse it (recording any error) before handing out `&mut`.
        self.section_pod_set(i)?;
        self.full = OnceCell::new();
        self.sections_edited = true;
        let p = self.sections.get_mut()?.pod_sets.get_mut(i)?;
        p.edited = true;
        p.parsed.get_mut().and_then(|r| r.as_mut().ok())
    }

    /// The pod set named `name`, mutably (marks the info changed).
    pub(crate) fn pod_set_mut(&mut self, name: &str) -> Option<&mut PodSet> {
        if self.use_full() {
            return self.info_mut().pod_set_mut(name);
        }
        self.pod_set_mut_by(|p| p.name == name)
    }

    /// The first pod set with this ancestor, mutably (marks the info changed).
    pub(crate) fn pod_set_by_ancestor_mut(&mut self, ancestor: &str) -> Option<&mut PodSet> {
        if self.use_full() {
            return self.info_mut().pod_set_by_ancestor_mut(ancestor);
        }
        self.pod_set_mut_by(|p| p.ancestor.as_deref() == Some(ancestor))
    }

    /// The changed info as JSON; `None` when unchanged.
    pub(crate) fn to_json_if_changed(&self) -> Result<Option<String>, serde_json::Error> {
        if let Some(info) = &self.owned {
            return serde_json::to_string(info).map(Some);
        }
        if self.sections_edited {
            return serde_json::to_string(self.sections()).map(Some);
        }
        Ok(None)
    }

    /// The final info value (parsing it if it was never read).
    pub(crate) fn into_info(mut self) -> Info {
        self.info_mut();
        self.owned.unwrap_or_default()
    }
}

/// An info split into raw members, with `templateSpec.podSets` split into
/// raw pod sets.
#[derive(Default)]
struct Sections<'a> {
    /// Members other than `templateSpec`.
    top: RawObject<'a>,
    /// Members of `templateSpec` other than `podSets`; `None` if absent.
    template: Option<RawObject<'a>>,
    pod_sets: Vec<LazyPodSet<'a>>,
}

impl Sections<'_> {
    fn to_info(&self) -> Result<Info, serde_json::Error> {
        serde_json::from_str(&serde_json::to_string(self)?)
    }
}

/// One pod set: its raw members, name and ancestor read eagerly, the rest
/// parsed on first use.
struct LazyPodSet<'a> {
    raw: RawObject<'a>,
    name: String,
    ancestor: Option<String>,
    parsed: OnceCell<Result<PodSet, String>>,
    /// `parsed` holds an edited value: write it instead of `raw`.
    edited: bool,
}

impl LazyPodSet<'_> {
    fn get(&self) -> Result<&PodSet, &str> {
        self.parsed
            .get_or_init(|| self.raw.parse_all().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(String::as_str)
    }
}

impl<'de> Deserialize<'de> for LazyPodSet<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let raw = RawObject::deserialize(d)?;
        let name = raw
            .parse::<String>("name")
            .map_err(D::Error::custom)?
            .unwrap_or_default();
        let ancestor = raw
            .parse::<Option<String>>("ancestor")
            .map_err(D::Error::custom)?
            .flatten();
        Ok(LazyPodSet {
            raw,
            name,
            ancestor,
            parsed: OnceCell::new(),
            edited: false,
        })
    }
}

impl Serialize for LazyPodSet<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.parsed.get() {
            Some(Ok(ps)) if self.edited => ps.serialize(s),
            _ => self.raw.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Sections<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Sections<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an info object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sections<'de>, A::Error> {
                let mut s = Sections::default();
                let mut top = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == TEMPLATE_SPEC {
                        let t: TemplateSections<'de> = map.next_value()?;
                        s.template = Some(t.rest);
                        s.pod_sets = t.pod_sets;
                    } else {
                        top.push((key, map.next_value::<&'de RawValue>()?));
                    }
                }
                s.top = RawObject::from_members(top);
                Ok(s)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for Sections<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.top.members() {
            m.serialize_entry(k, v)?;
        }
        if let Some(rest) = &self.template {
            m.serialize_entry(
                TEMPLATE_SPEC,
                &TemplateOut {
                    rest,
                    pod_sets: &self.pod_sets,
                },
            )?;
        }
        m.end()
    }
}

/// `templateSpec` split into `podSets` and the rest.
struct TemplateSections<'a> {
    rest: RawObject<'a>,
    pod_sets: Vec<LazyPodSet<'a>>,
}

impl<'de> Deserialize<'de> for TemplateSections<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TemplateSections<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a templateSpec object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TemplateSections<'de>, A::Error> {
                let mut rest = Vec::new();
                let mut pod_sets = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == POD_SETS {
                        pod_sets = map
                            .next_value::<Option<Vec<LazyPodSet<'de>>>>()?
                            .unwrap_or_default();
                    } else {
                        rest.push((key, map.next_value::<&'de RawValue>()?));
                    }
                }
                Ok(TemplateSections {
                    rest: RawObject::from_members(rest),
                    pod_sets,
                })
            }
        }
        d.deserialize_map(V)
    }
}

struct TemplateOut<'s, 'a> {
    rest: &'s RawObject<'a>,
    pod_sets: &'s [LazyPodSet<'a>],
}

impl Serialize for TemplateOut<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.rest.members() {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry(POD_SETS, self.pod_sets)?;
        m.end()
    }
}
