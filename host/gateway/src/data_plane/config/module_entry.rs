//! A config filter module's entry as Praxis gets it, written straight from
//! the model's JSON when the config is serialized.

use std::sync::Arc;

use serde::{
    Serialize, Serializer,
    ser::{SerializeMap, SerializeSeq},
};
use serde_json::{Map, Value};

use super::{
    conditions::Condition,
    placeholders::{ListenerFacts, fill_str, may_hold_placeholder},
};

/// Praxis's filters that write the upstream path.
const REWRITE_FILTERS: [&str; 2] = ["path_rewrite", "url_rewrite"];

/// A module's entry as Praxis gets it, written straight from the model's
/// JSON when the config is serialized (no copy of the tree per entry): the
/// gate condition before the entry's own conditions, placeholders filled,
/// and `allow_rewrite_override` on rewrite filters (Praxis refuses a second
/// path rewriter in a pipeline without it, but gated rules never both run).
/// Keys come out sorted, as serde_json writes any object.
#[derive(Debug)]
pub struct ModuleEntry<'a> {
    entry: &'a Map<String, Value>,
    gate: Arc<Condition>,
    fill: Fill,
}

#[derive(Debug)]
pub(super) struct Fill {
    pub(super) listener: ListenerFacts,
    /// The regex-escaped prefix of the match this copy is gated on.
    pub(super) match_prefix: Option<String>,
}

impl<'a> ModuleEntry<'a> {
    pub(super) fn new(entry: &'a Map<String, Value>, gate: Arc<Condition>, fill: Fill) -> Self {
        Self { entry, gate, fill }
    }

    /// The entry as the module returned it.
    pub fn source(&self) -> &'a Map<String, Value> {
        self.entry
    }

    fn is_rewrite(&self) -> bool {
        self.entry
            .get("filter")
            .and_then(Value::as_str)
            .is_some_and(|f| REWRITE_FILTERS.contains(&f))
    }
}

/// What one key of a [`ModuleEntry`] writes.
enum Field<'e> {
    Value(&'e Value),
    Conditions(&'e [Value]),
    True,
}

impl Serialize for ModuleEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields: Vec<(&str, Field<'_>)> = Vec::with_capacity(self.entry.len() + 2);
        for (key, value) in self.entry {
            match key.as_str() {
                "conditions" | "allow_rewrite_override" => {}
                _ => fields.push((key, Field::Value(value))),
            }
        }
        let own = match self.entry.get("conditions") {
            Some(Value::Array(list)) => list.as_slice(),
            _ => &[],
        };
        fields.push(("conditions", Field::Conditions(own)));
        if self.is_rewrite() {
            fields.push(("allow_rewrite_override", Field::True));
        } else if let Some(value) = self.entry.get("allow_rewrite_override") {
            fields.push(("allow_rewrite_override", Field::Value(value)));
        }
        fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, field) in fields {
            match field {
                Field::Value(value) => map.serialize_entry(key, &Filled(value, &self.fill))?,
                Field::Conditions(own) => map.serialize_entry(
                    key,
                    &Conditions {
                        gate: &self.gate,
                        own,
                        fill: &self.fill,
                    },
                )?,
                Field::True => map.serialize_entry(key, &true)?,
            }
        }
        map.end()
    }
}

/// The gate, then the entry's own conditions.
struct Conditions<'e> {
    gate: &'e Condition,
    own: &'e [Value],
    fill: &'e Fill,
}

impl Serialize for Conditions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.own.len() + 1))?;
        seq.serialize_element(self.gate)?;
        for condition in self.own {
            seq.serialize_element(&Filled(condition, self.fill))?;
        }
        seq.end()
    }
}

/// A JSON value with its placeholders filled.
struct Filled<'e>(&'e Value, &'e Fill);

impl Serialize for Filled<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(value, fill) = self;
        match value {
            Value::String(s) if may_hold_placeholder(s) => {
                serializer.serialize_str(&fill_str(s, fill.listener, fill.match_prefix.as_deref()))
            }
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Filled(item, fill))?;
                }
                seq.end()
            }
            Value::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, item) in entries {
                    map.serialize_entry(key, &Filled(item, fill))?;
                }
                map.end()
            }
            other => other.serialize(serializer),
        }
    }
}
