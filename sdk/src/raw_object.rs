//! JSON objects kept as the raw text of their members.
//!
//! Reading a member's text is a scan, not a parse: members borrow from the
//! input, nothing is allocated per nested value, and serialising a member
//! again is a copy. [`crate::context`] uses
//! this to parse only the parts of the info a phase actually touches.

use serde::de::value::MapDeserializer;
use serde::de::{DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::fmt;

/// A JSON object whose member values are kept as raw JSON text, in input
/// order.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawObject<'a>(Vec<(String, &'a RawValue)>);

impl<'a> RawObject<'a> {
    /// An object from members in order.
    pub(crate) fn from_members(members: Vec<(String, &'a RawValue)>) -> Self {
        RawObject(members)
    }

    /// The members in order.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&str, &'a RawValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The raw text of member `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Member `key` parsed as `T`; `Ok(None)` when absent.
    pub(crate) fn parse<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, serde_json::Error> {
        self.get(key)
            .map(|v| serde_json::from_str(v.get()))
            .transpose()
    }

    /// The whole object parsed as `T` (members are parsed from their text;
    /// nothing is re-serialised).
    pub(crate) fn parse_all<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(MapDeserializer::new(
            self.0.iter().map(|(k, v)| (k.as_str(), *v)),
        ))
    }
}

impl<'de> Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(entry);
                }
                Ok(RawObject(members))
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for RawObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_parses_members() {
        let text = r#"{"a": {"x": [1, 2]}, "b": "s", "c": null}"#;
        let o: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(o.get("a").unwrap().get(), r#"{"x": [1, 2]}"#);
        assert_eq!(o.parse::<String>("b").unwrap().as_deref(), Some("s"));
        assert_eq!(o.parse::<String>("missing").unwrap(), None);
        let back: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back, json!({"a": {"x": [1, 2]}, "b": "s", "c": null}));
        let all: serde_json::Value = o.parse_all().unwrap();
        assert_eq!(all, back);
    }

    #[test]
    fn rejects_non_objects() {
        assert!(serde_json::from_str::<RawObject>("[1]").is_err());
        assert!(serde_json::from_str::<RawObject>(r#"{"a": }"#).is_err());
    }
}
