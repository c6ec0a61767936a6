//! Praxis's request conditions, as Pontoon writes them: part of the output
//! schema (`praxis.rs`) that the module entries also write.

use serde::Serialize;

/// A request condition: `when` only (Pontoon never writes `unless`).
#[derive(Clone, Debug, Serialize)]
pub struct Condition {
    pub when: ConditionMatch,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ConditionMatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected_upstream: Option<SelectedUpstream>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelectedUpstream {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application_protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application_provider: Option<String>,
}
