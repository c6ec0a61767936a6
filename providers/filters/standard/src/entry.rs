//! A Praxis filter entry as this module writes it. `headers`, the entry
//! nearly every route with filters carries, is typed and borrows from the
//! filter's JSON, so that translating it is a parse and a write with few
//! allocations (each one costs a component more than native code); the
//! rarer entries are JSON values.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Entry<'a> {
    Headers(Headers<'a>),
    Value(Value),
}

/// Praxis's `headers` filter: lists left empty are left out.
#[derive(Debug, Default, Serialize)]
pub struct Headers<'a> {
    filter: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_set: Vec<Pair<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_add: Vec<Pair<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_remove: Vec<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response_set: Vec<Pair<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response_add: Vec<Pair<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response_remove: Vec<Cow<'a, str>>,
}

impl Headers<'_> {
    pub fn new() -> Self {
        Self {
            filter: "headers",
            ..Self::default()
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Pair<'a> {
    pub name: Cow<'a, str>,
    pub value: Cow<'a, str>,
}
