//! A Praxis filter entry as this module writes it. `headers`, the entry
//! nearly every route with filters carries, is typed and borrows from the
//! filter's JSON, so that translating it is a parse and a write with few
//! allocations (each one costs a component more than native code); the
//! rarer entries are JSON values.

use std::borrow::Cow;

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::Value;

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Entry<'a> {
    Headers(Headers<'a>),
    Value(Value),
}

/// Which messages a `headers` entry changes: its lists are named after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
}

/// Praxis's `headers` filter for one side (`request_set`, `request_add`,
/// `request_remove` or their `response_` twins); lists left empty are left
/// out.
#[derive(Debug)]
pub struct Headers<'a> {
    pub side: Side,
    pub set: Vec<Pair<'a>>,
    pub add: Vec<Pair<'a>>,
    pub remove: Vec<Cow<'a, str>>,
}

impl Headers<'_> {
    pub fn new(side: Side) -> Self {
        Self {
            side,
            set: Vec::new(),
            add: Vec::new(),
            remove: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

impl Serialize for Headers<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let [set, add, remove] = match self.side {
            Side::Request => ["request_set", "request_add", "request_remove"],
            Side::Response => ["response_set", "response_add", "response_remove"],
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("filter", "headers")?;
        if !self.set.is_empty() {
            map.serialize_entry(set, &self.set)?;
        }
        if !self.add.is_empty() {
            map.serialize_entry(add, &self.add)?;
        }
        if !self.remove.is_empty() {
            map.serialize_entry(remove, &self.remove)?;
        }
        map.end()
    }
}

#[derive(Debug, Serialize)]
pub struct Pair<'a> {
    pub name: Cow<'a, str>,
    pub value: Cow<'a, str>,
}
