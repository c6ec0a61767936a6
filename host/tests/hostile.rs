//! Hostile provider modules used by real mounts: one that loops, one that
//! exhausts its memory, one that traps and one that blocks in a host call
//! (an exec that never returns), beside three mounts on carrier2mount, all
//! created at once. The hostile mounts go to ERROR naming what stopped
//! their provider; the good ones reach ACTIVE while the hostile calls still
//! run; the operator stays ready throughout.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::{core::v1::Pod, events::v1::Event};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use pontoon::bridge_mount::{GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{modules::test_module, providers::bundled_provider};
use serde_json::json;

mod support;

use support::mounts::*;

/// The operator's default: what a hostile call may hold a turn for.
const DEADLINE: Duration = Duration::from_secs(10);

/// A hostile mount: its provider, its parameters, and what its ERROR says.
struct Hostile {
    mount: &'static str,
    provider: &'static str,
    says: &'static str,
}

const HOSTILE: [Hostile; 4] = [
    Hostile {
        mount: "loops",
        provider: "infinite-loop",
        says: "did not finish `prepare` within its deadline",
    },
    Hostile {
        mount: "hogs",
        provider: "memory-hog",
        says: "exceeded its memory limit",
    },
    Hostile {
        mount: "traps",
        provider: "trap",
        says: "trapped in `prepare`",
    },
    Hostile {
        mount: "blocks",
        provider: "exec-probe",
        says: "did not finish `prepare` within its deadline",
    },
];

/// Mount `name` of the bare pod of the same name, on `provider`.
async fn mount_on(
    bed: &Bed,
    name: &str,
    provider: &str,
    parameter: Option<serde_json::Map<String, serde_json::Value>>,
) -> anyhow::Result<()> {
    let fields = BridgeMountFields {
        provider: Some(provider.into()),
        provider_parameter: parameter,
        ..Default::default()
    };
    bed.mount_with(name, &format!("pod/{name}"), "app", fields)
        .await?;
    Ok(())
}

fn state(mount: Option<GefyraBridgeMount>) -> String {
    mount.and_then(|m| m.fields.state).unwrap_or_default()
}

#[tokio::test]
async fn hostile_providers_fail_their_own_mounts_only() -> anyhow::Result<()> {
    // The bundled carrier2mount and the four hostile modules, side by side.
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        bundled_provider("carrier2mount")?,
        dir.path().join("carrier2mount.wasm"),
    )?;
    for module in ["infinite_loop", "memory_hog", "trap", "exec_probe"] {
        std::fs::copy(
            test_module(module)?,
            dir.path().join(format!("{module}.wasm")),
        )?;
    }
    let bed = Bed::with_providers("hostile", dir.path(), &[]).await?;
    let goods = ["web-a", "web-b", "web-c"];
    bed.deployments(&goods).await?;
    // Each hostile mount has a bare pod of its own (one mount per container).
    let pods = bed.target.api::<Pod>();
    for h in &HOSTILE {
        pods.create(&PostParams::default(), &bare_pod(h.mount)?)
            .await?;
    }
    ready_pods(&bed.target, "app", HOSTILE.len() + goods.len()).await?;

    // The hostile ones first: they reach the provider's turns first.
    let started = Instant::now();
    for h in &HOSTILE {
        let parameter = match h.provider {
            // An exec that never returns, into the mount's own pod.
            "exec-probe" => Some(
                json!({ "pod": h.mount, "container": "app", "command": ["sleep", "3600"] })
                    .as_object()
                    .cloned()
                    .context("an object")?,
            ),
            _ => None,
        };
        mount_on(&bed, h.mount, h.provider, parameter).await?;
    }
    for good in goods {
        bed.mount(good, &format!("deploy/{good}"), "app").await?;
    }

    // The good mounts progress while the looping and the blocked calls
    // still hold their turns: all ACTIVE before either could have ended.
    for good in goods {
        bed.wait_state(good, "ACTIVE").await?;
    }
    let goods_active = started.elapsed();
    let mounts = bed.mounts();
    for slow in ["loops", "blocks"] {
        let now = state(mounts.get_opt(slow).await?);
        assert_ne!(
            now, "ERROR",
            "{slow} is already ERROR: the good mounts took {goods_active:?}, past the hostile call's deadline"
        );
    }
    assert_eq!(
        bed.operator.get("/readyz").await?.0,
        200,
        "ready while hostile calls run"
    );

    // Each hostile mount: ERROR, its Ready condition naming the cause.
    for h in &HOSTILE {
        let failed = bed.wait_state(h.mount, "ERROR").await?;
        let (reason, message) = Bed::ready(&failed);
        assert_eq!(reason, "ProviderFailed", "{}: {message}", h.mount);
        assert!(
            message.contains(h.says) && message.contains(h.provider),
            "{}: {message:?} does not say {:?}",
            h.mount,
            h.says
        );
    }
    let hostile_done = started.elapsed();
    assert!(
        hostile_done >= DEADLINE,
        "the deadline errors came after {hostile_done:?}, before the deadline: not what was tested"
    );
    assert_eq!(
        bed.operator.get("/readyz").await?.0,
        200,
        "ready after the hostile calls"
    );
    // The good mounts stayed ACTIVE through it all.
    for good in goods {
        assert_eq!(state(mounts.get_opt(good).await?), "ACTIVE", "{good}");
    }
    // Each failure posted its Event (a trap's backtrace is longer than an
    // Event's note may be: cut, not refused).
    let events: Api<Event> = bed.gefyra.api();
    let posted = events.list(&ListParams::default()).await?;
    for h in &HOSTILE {
        assert!(
            posted.items.iter().any(|e| {
                e.reason.as_deref() == Some("ProviderFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(h.mount)
            }),
            "no ProviderFailed Event about {}",
            h.mount
        );
    }

    // A module once stopped takes turns one at a time: three more mounts
    // on the looping module and three more good ones, at once. Were the
    // three looping calls to run side by side, they would hold every turn
    // for the deadline and the good mounts would wait.
    let more = ["web-d", "web-e", "web-f"];
    bed.deployments(&more).await?;
    let loopers = ["loops-1", "loops-2", "loops-3"];
    for name in loopers {
        pods.create(&PostParams::default(), &bare_pod(name)?)
            .await?;
    }
    for name in loopers {
        ready_pods(&bed.target, &format!("app={name}"), 1).await?;
    }
    let again = Instant::now();
    for name in loopers {
        mount_on(&bed, name, "infinite-loop", None).await?;
    }
    for good in more {
        bed.mount(good, &format!("deploy/{good}"), "app").await?;
    }
    for good in more {
        bed.wait_state(good, "ACTIVE").await?;
    }
    let more_active = again.elapsed();
    let errored: Vec<&str> = {
        let mut errored = Vec::new();
        for name in loopers {
            if state(mounts.get_opt(name).await?) == "ERROR" {
                errored.push(name);
            }
        }
        errored
    };
    assert!(
        errored.is_empty(),
        "{errored:?} already ERROR when the good mounts were ACTIVE ({more_active:?}): the good ones waited for the looping calls"
    );
    assert_eq!(bed.operator.get("/readyz").await?.0, 200);
    for name in loopers {
        bed.wait_state(name, "ERROR").await?;
    }
    let loopers_done = again.elapsed();
    assert!(
        loopers_done >= DEADLINE * 2,
        "the three looping calls ended after {loopers_done:?}: they ran side by side"
    );

    println!(
        "hostile: 3 good mounts ACTIVE {:.2} s after creation; the 4 hostile ones ERROR after {:.2} s (deadline {} s); then, beside 3 more mounts on the looping module (one at a time: ERROR after {:.2} s), 3 more good ones ACTIVE in {:.2} s",
        goods_active.as_secs_f64(),
        hostile_done.as_secs_f64(),
        DEADLINE.as_secs(),
        loopers_done.as_secs_f64(),
        more_active.as_secs_f64(),
    );
    for good in goods.iter().chain(&more) {
        bed.delete_mount(good).await?;
    }
    for name in HOSTILE.iter().map(|h| h.mount).chain(loopers) {
        bed.delete_mount(name).await?;
    }
    Ok(())
}

/// The most resident memory the process `pid` has had, in MiB.
fn peak_rss_mib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/PID/status")?;
    Ok(kib / 1024)
}

/// A pod whose file read back never ends (a link to a device, as a sidecar
/// sharing `/tmp` could make): the exec streams into the operator no more
/// than its cap, the mount is told why, and the others keep working. (A
/// debug build's operator peaks near 100 MiB on the test bed; streaming
/// /dev/urandom for the call's 10 s deadline would hold gigabytes.)
#[tokio::test]
async fn a_read_back_that_never_ends_costs_the_operator_its_cap_and_no_more() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        bundled_provider("carrier2mount")?,
        dir.path().join("carrier2mount.wasm"),
    )?;
    std::fs::copy(
        test_module("exec_probe")?,
        dir.path().join("exec_probe.wasm"),
    )?;
    let bed = Bed::with_providers("floods", dir.path(), &[]).await?;
    bed.target
        .api::<Pod>()
        .create(&PostParams::default(), &bare_pod("floods")?)
        .await?;
    bed.deployments(&["web"]).await?;
    ready_pods(&bed.target, "app=floods", 1).await?;
    // The pod's /tmp, as the test bed's exec shim binds it.
    let tmp = pontoon_tests::testbed_dir()
        .join("pods")
        .join(bed.target.name())
        .join("floods")
        .join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::os::unix::fs::symlink("/dev/urandom", tmp.join("config.yaml"))?;
    let parameter =
        json!({ "pod": "floods", "container": "app", "command": ["cat", "/tmp/config.yaml"] });
    mount_on(&bed, "floods", "exec-probe", parameter.as_object().cloned()).await?;
    bed.mount("web", "deploy/web", "app").await?;
    let failed = bed.wait_state("floods", "ERROR").await?;
    let (reason, message) = Bed::ready(&failed);
    assert_eq!(reason, "ProviderFailed", "{message}");
    assert!(
        message.contains("exec in pod `floods`")
            && message.contains("its stdout passed 1 MiB, the most an exec may return"),
        "names the pod and the cap: {message}"
    );
    bed.wait_state("web", "ACTIVE").await?;
    let pid = bed.operator.pid().context("the operator runs")?;
    let peak = peak_rss_mib(pid)?;
    println!("floods: operator peak RSS {peak} MiB with an endless read-back capped");
    assert!(
        peak < 192,
        "the operator's RSS peaked at {peak} MiB: the read-back was not bounded"
    );
    assert_eq!(bed.operator.get("/readyz").await?.0, 200);
    bed.delete_mount("web").await?;
    bed.delete_mount("floods").await?;
    Ok(())
}
