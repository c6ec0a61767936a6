//! What a step reports: the condition to record, the Event announcing it,
//! and the provider call both name. Shared by the outcomes, the transitions
//! and the writer.

use std::fmt;

use kube::runtime::events::EventType;

use crate::{
    reason::Reason,
    status::{Observed, READY, UNINSTALLED},
};

/// A provider call, as messages and Events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Validate,
    Prepare,
    Prepared,
    Install,
    Ready,
    Uninstall,
    TargetExists,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Validate => "validate",
            Step::Prepare => "prepare",
            Step::Prepared => "prepared",
            Step::Install => "install",
            Step::Ready => "ready",
            Step::Uninstall => "uninstall",
            Step::TargetExists => "target-exists",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An Event about the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub type_: EventType,
    pub reason: Reason,
    pub action: &'static str,
    pub note: String,
}

/// A condition to record. Only when that changes it are the conditions
/// written and the notice posted, so a mount that stays where it is does not
/// write (and wake itself up) at every look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub observed: Observed,
    pub notice: Option<Notice>,
}

impl Report {
    /// Recorded without an Event.
    pub fn silent(observed: Observed) -> Self {
        Self {
            observed,
            notice: None,
        }
    }

    /// The provider's work recorded as undone, announced by an Event.
    pub fn uninstalled(message: &str) -> Self {
        Self {
            observed: Observed::new(UNINSTALLED, true, Reason::Uninstalled.as_str(), message),
            notice: Some(Notice {
                type_: EventType::Normal,
                reason: Reason::Uninstalled,
                action: Step::Uninstall.as_str(),
                note: message.into(),
            }),
        }
    }

    /// Ready False for `reason`, announced by a Warning with the same reason.
    pub fn not_ready(reason: Reason, action: &'static str, message: String) -> Self {
        Self {
            observed: Observed::new(READY, false, reason.as_str(), message.clone()),
            notice: Some(Notice {
                type_: EventType::Warning,
                reason,
                action,
                note: message,
            }),
        }
    }
}
