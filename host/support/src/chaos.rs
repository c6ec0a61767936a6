//! Kill points for fault injection (`make chaos`): named places in a mount's
//! reconcile where the operator can be made to die with SIGKILL, exactly as
//! a crash or an OOM kill would end it, so that a run can kill it at one
//! chosen step and check what it converges to after a restart.
//!
//! Off unless the environment asks for it (one lookup at the first point):
//!
//! - `PONTOON_CHAOS_TRACE=1` logs every point reached, `chaos point
//!   label=<PHASE> <step> n=<count>`, the census a run chooses from;
//! - `PONTOON_CHAOS_KILL_AT=<PHASE> <step>#<n>` kills the process the
//!   `n`-th time that point is reached.
//!
//! A point's phase is the mount's state when its reconcile began
//! (`REQUESTED` for a new mount) or `DELETING` for the finalizer's cleanup;
//! its step names what is about to happen: `reconcile`, `write state
//! INSTALLING`, `wrote state INSTALLING`, `write conditions`, a provider's
//! cluster call as `<verb> <Kind>` (`patch Pod`, `exec Pod`), `uninstalled`.
//! Points outside a mount's reconcile are not counted.

use std::{
    collections::HashMap,
    fmt::Display,
    future::Future,
    sync::{LazyLock, Mutex},
};

tokio::task_local! {
    static PHASE: &'static str;
}

const TRACE: &str = "PONTOON_CHAOS_TRACE";
const KILL_AT: &str = "PONTOON_CHAOS_KILL_AT";

struct Chaos {
    trace: bool,
    kill_at: Option<(String, u32)>,
    reached: Mutex<HashMap<String, u32>>,
}

static CHAOS: LazyLock<Option<Chaos>> = LazyLock::new(|| {
    let trace = std::env::var(TRACE).is_ok_and(|v| v == "1");
    let kill_at = std::env::var(KILL_AT).ok().and_then(|v| parse_kill_at(&v));
    (trace || kill_at.is_some()).then(|| Chaos {
        trace,
        kill_at,
        reached: Mutex::default(),
    })
});

/// `<label>#<n>`: the label and the occurrence to kill at (from 1).
fn parse_kill_at(text: &str) -> Option<(String, u32)> {
    let (label, n) = text.rsplit_once('#')?;
    let n: u32 = n.parse().ok().filter(|n| *n > 0)?;
    Some((label.to_string(), n))
}

/// Runs `work` as the reconcile of a mount in `phase`.
pub async fn in_phase<F: Future>(phase: &'static str, work: F) -> F::Output {
    if CHAOS.is_none() {
        return work.await;
    }
    PHASE.scope(phase, work).await
}

/// A kill point: `step` is about to happen (or has just happened).
pub fn point(step: impl Display) {
    let Some(chaos) = CHAOS.as_ref() else {
        return;
    };
    let Ok(phase) = PHASE.try_with(|p| *p) else {
        return;
    };
    let label = format!("{phase} {step}");
    let n = {
        let mut reached = chaos.reached.lock().unwrap_or_else(|e| e.into_inner());
        let n = reached.entry(label.clone()).or_default();
        *n += 1;
        *n
    };
    // Straight to stderr (unbuffered): the line is out before a kill.
    if chaos.trace {
        eprintln!("chaos point label={label} n={n}");
    }
    if chaos
        .kill_at
        .as_ref()
        .is_some_and(|(at, k)| *at == label && *k == n)
    {
        eprintln!("chaos kill label={label} n={n}");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_kill_at;

    #[test]
    fn a_kill_point_names_a_label_and_an_occurrence() {
        assert_eq!(
            parse_kill_at("INSTALLING patch Pod#2"),
            Some(("INSTALLING patch Pod".into(), 2))
        );
        assert_eq!(parse_kill_at("INSTALLING patch Pod"), None);
        assert_eq!(parse_kill_at("INSTALLING patch Pod#0"), None);
        assert_eq!(parse_kill_at("ACTIVE reconcile#x"), None);
    }
}
