//! `make chaos` (a short run inside `make test`): the operator is SIGKILLed
//! at kill points chosen from a seed, spread over every phase of a mount's
//! life, on Deployment, StatefulSet and bare Pod targets; after each kill it
//! is restarted, and the mount must still go its whole way (ACTIVE, a lost
//! pod restored and installed again, the target gone and back, deleted)
//! and leave its target exactly as it was, with nothing of it left behind.
//!
//! The points are the operator's own (`pontoon::chaos`): a census life per
//! target kind, traced, lists every point reached in order; the seed picks
//! from that list; each picked point gets a fresh life whose operator kills
//! itself with SIGKILL the n-th time it reaches that point.
//!
//! `PONTOON_CHAOS_POINTS` (default 9: every phase once, and the four named
//! steps of installing and uninstalling) and `PONTOON_CHAOS_SEED` (default:
//! from the clock; printed, to replay a run).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use pontoon::bridge_mount::GefyraBridgeMount;
use pontoon_tests::TestNamespace;

mod support;

use support::mounts::*;

const POINTS: &str = "PONTOON_CHAOS_POINTS";
const SEED: &str = "PONTOON_CHAOS_SEED";
const TRACE: &str = "PONTOON_CHAOS_TRACE";
const KILL_AT: &str = "PONTOON_CHAOS_KILL_AT";
const MOUNT: &str = "chaos-mount";
/// SIGKILL's number on Linux.
const SIGKILL: i32 = 9;

/// Every phase a kill point can be in (the mount's state when its reconcile
/// began; DELETING is the finalizer's uninstall).
const PHASES: [&str; 7] = [
    "REQUESTED",
    "PREPARING",
    "INSTALLING",
    "ACTIVE",
    "RESTORING",
    "MISSING",
    "DELETING",
];

/// Steps every run kills at, on a target kind the seed picks: between the
/// restore record and the pod patch, between the patch and the Carrier2
/// config commit, between the shadow's deletion and the pods' restore, and
/// after the uninstall (before the finalizer goes).
const NAMED: [&str; 4] = [
    "INSTALLING patch Pod",
    "INSTALLING exec Pod",
    "DELETING patch Pod",
    "DELETING uninstalled",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Deployment,
    StatefulSet,
    Pod,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Deployment, Kind::StatefulSet, Kind::Pod];

    fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "web",
            Kind::StatefulSet => "db",
            Kind::Pod => "solo",
        }
    }

    fn target(self) -> String {
        let prefix = match self {
            Kind::Deployment => "deploy",
            Kind::StatefulSet => "sts",
            Kind::Pod => "pod",
        };
        format!("{prefix}/{}", self.name())
    }

    fn selector(self) -> String {
        format!("app={}", self.name())
    }

    fn replicas(self) -> usize {
        match self {
            Kind::Pod => 1,
            _ => 2,
        }
    }

    async fn create(self, ns: &TestNamespace) -> anyhow::Result<()> {
        let pp = PostParams::default();
        match self {
            Kind::Deployment => {
                ns.api::<Deployment>()
                    .create(&pp, &deployment(self.name(), 2)?)
                    .await?;
            }
            Kind::StatefulSet => {
                ns.api::<StatefulSet>()
                    .create(&pp, &statefulset(self.name(), 2)?)
                    .await?;
            }
            Kind::Pod => {
                ns.api::<Pod>().create(&pp, &bare_pod(self.name())?).await?;
            }
        }
        Ok(())
    }

    async fn delete(self, ns: &TestNamespace) -> anyhow::Result<()> {
        let dp = DeleteParams::foreground();
        match self {
            Kind::Deployment => drop(ns.api::<Deployment>().delete(self.name(), &dp).await?),
            Kind::StatefulSet => drop(ns.api::<StatefulSet>().delete(self.name(), &dp).await?),
            Kind::Pod => drop(ns.api::<Pod>().delete(self.name(), &dp).await?),
        }
        Ok(())
    }

    /// Whether the target and its pods are all gone.
    async fn gone(self, ns: &TestNamespace) -> anyhow::Result<bool> {
        let exists = match self {
            Kind::Deployment => ns.api::<Deployment>().get_opt(self.name()).await?.is_some(),
            Kind::StatefulSet => ns
                .api::<StatefulSet>()
                .get_opt(self.name())
                .await?
                .is_some(),
            Kind::Pod => false,
        };
        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels(&self.selector()))
            .await?;
        Ok(!exists && pods.items.is_empty())
    }
}

/// The `n`-th time the operator reaches `label` in a life of a `kind` mount.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct KillPoint {
    kind: Kind,
    label: String,
    n: u32,
}

impl KillPoint {
    fn phase(&self) -> &str {
        self.label.split(' ').next().unwrap_or_default()
    }
}

/// A bed whose operator is restarted whenever it dies, and what its deaths
/// cost: each time from a death to the step being waited for.
struct Life {
    bed: Bed,
    deaths: Vec<std::process::ExitStatus>,
    converged: Vec<Duration>,
    /// Whether the target was found exactly as before once the mount was
    /// gone (`None`: the life did not get that far).
    restored: Option<bool>,
}

impl Life {
    async fn new(env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut bed = Bed::new("chaos").await?;
        for (key, value) in env {
            bed.operator.set_env(key, Some(value));
        }
        bed.operator.restart()?;
        Ok(Self {
            bed,
            deaths: Vec::new(),
            converged: Vec::new(),
            restored: None,
        })
    }

    /// Polls `check` until it gives a value, restarting a dead operator
    /// (without the kill point: one kill per life).
    async fn until<T>(
        &mut self,
        what: &str,
        check: impl AsyncFn(&Bed) -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + TIMEOUT;
        let mut died = None;
        loop {
            if let Some(status) = self.bed.operator.exited()? {
                died = Some(Instant::now());
                self.deaths.push(status);
                self.bed.operator.set_env(KILL_AT, None);
                self.bed.operator.restart()?;
            }
            if let Some(value) = check(&self.bed).await? {
                if let Some(died) = died {
                    self.converged.push(died.elapsed());
                }
                return Ok(value);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{what}: not reached in {TIMEOUT:?}\n--- operator ---\n{}",
                self.bed.operator.log_tail(25)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A mount of `kind` from creation to restored: ACTIVE, a lost pod
    /// (restored and installed again; a bare pod has no such thing), the
    /// target deleted (MISSING, uninstalled) and created again (ACTIVE),
    /// then the mount deleted: the target exactly as before, nothing left.
    async fn live(&mut self, kind: Kind) -> anyhow::Result<()> {
        let ns = &self.bed.target;
        kind.create(ns).await?;
        ready_pods(ns, &kind.selector(), kind.replicas()).await?;
        let before = Before::take(ns, &kind.selector()).await?;
        self.bed.mount(MOUNT, &kind.target(), "app").await?;
        self.until("ACTIVE", async |bed| in_state(bed, "ACTIVE", None).await)
            .await?;

        if kind != Kind::Pod {
            let pods: Api<Pod> = self.bed.target.api();
            let victim = pods
                .list(&ListParams::default().labels(&kind.selector()))
                .await?
                .items
                .into_iter()
                .next()
                .context("no pod to lose")?;
            let lost = victim.uid().context("a pod without a uid")?;
            pods.delete(&victim.name_any(), &DeleteParams::default())
                .await?;
            // The replacement runs the original image: the mount intercepts
            // it again, through RESTORING, or in ACTIVE itself when an
            // operator that restarted meanwhile renders its bridges into
            // the pods it finds (an install, the new pod's restore record
            // written first). Either way the user sees an ACTIVE mount whose
            // every original pod, the replacement too, runs Carrier2.
            let selector = kind.selector();
            let replicas = kind.replicas();
            self.until(
                "ACTIVE again, the lost pod's replacement intercepted",
                async |bed| {
                    let Some(mount) = in_state(bed, "ACTIVE", None).await? else {
                        return Ok(None);
                    };
                    let pods = live(
                        bed.target
                            .api::<Pod>()
                            .list(&ListParams::default().labels(&selector))
                            .await?
                            .items,
                    );
                    let intercepted = pods.len() == replicas
                        && pods.iter().all(|p| {
                            p.uid().as_deref() != Some(lost.as_str())
                                && pontoon_tests::pod_ready(p)
                                && app_of(p)
                                    .is_ok_and(|c| c.image.as_deref() == Some(CARRIER_IMAGE))
                        });
                    Ok(intercepted.then_some(mount))
                },
            )
            .await?;
        }

        kind.delete(&self.bed.target).await?;
        self.until("MISSING and uninstalled", async |bed| {
            let mount = in_state(bed, "MISSING", None).await?;
            Ok(mount.filter(|m| {
                m.conditions()
                    .iter()
                    .any(|c| c.type_ == "Uninstalled" && c.status == "True")
            }))
        })
        .await?;
        self.until("the target gone", async |bed| {
            Ok(kind.gone(&bed.target).await?.then_some(()))
        })
        .await?;
        kind.create(&self.bed.target).await?;
        self.until("ACTIVE again after MISSING", async |bed| {
            in_state(bed, "ACTIVE", Some("MISSING")).await
        })
        .await?;

        self.bed
            .mounts()
            .delete(MOUNT, &DeleteParams::default())
            .await?;
        self.until("the mount gone", async |bed| {
            Ok(bed.mounts().get_opt(MOUNT).await?.is_none().then_some(()))
        })
        .await?;
        // A difference is an assertion (a panic): caught, to be counted.
        let restored = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            assert_restored(&self.bed, &before, &kind.selector(), kind.replicas()),
        ))
        .await;
        self.restored = Some(matches!(restored, Ok(Ok(()))));
        match restored {
            Ok(result) => result?,
            Err(_) => anyhow::bail!("the target is not as it was before the mount"),
        }
        self.until("no shadow pod left", async |bed| {
            let pods = bed.target.api::<Pod>().list(&ListParams::default()).await?;
            let left: Vec<String> = pods
                .items
                .iter()
                .map(|p| p.name_any())
                .filter(|n| n.contains("gefyra"))
                .collect();
            Ok(left.is_empty().then_some(()))
        })
        .await?;
        let services = self
            .bed
            .target
            .api::<Service>()
            .list(&ListParams::default())
            .await?;
        anyhow::ensure!(
            services
                .items
                .iter()
                .all(|s| !s.name_any().contains("gefyra")),
            "a shadow Service is left"
        );
        Ok(())
    }
}

/// The mount if it is in `state`, entered after it was last in `after`
/// (which it must have been in).
async fn in_state(
    bed: &Bed,
    state: &str,
    after: Option<&str>,
) -> anyhow::Result<Option<GefyraBridgeMount>> {
    let Some(mount) = bed.mounts().get_opt(MOUNT).await? else {
        return Ok(None);
    };
    if mount.fields.state.as_deref() != Some(state) {
        return Ok(None);
    }
    let transitions = mount.fields.state_transitions.clone().unwrap_or_default();
    let entered = transitions.get(state);
    let in_order = match after {
        None => true,
        Some(after) => transitions
            .get(after)
            .is_some_and(|at| entered.is_some_and(|e| e >= at)),
    };
    Ok(in_order.then_some(mount))
}

/// The points an operator reached, in order, from its log.
fn census(log: &str) -> Vec<(String, u32)> {
    log.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("chaos point label=")?;
            let (label, n) = rest.rsplit_once(" n=")?;
            Some((label.to_string(), n.trim().parse().ok()?))
        })
        .collect()
}

/// splitmix64: a seed's stream of picks, the same on every machine.
struct Picks(u64);

impl Picks {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % bound as u64) as usize
    }
}

/// At least `count` kill points from `reached`: the named steps, a point of
/// every phase they leave out, then the phases in turn; within a phase, the
/// point the seed picks.
fn choose(reached: &BTreeSet<KillPoint>, count: usize, picks: &mut Picks) -> Vec<KillPoint> {
    let mut chosen: Vec<KillPoint> = Vec::new();
    let mut take = |matches: &dyn Fn(&KillPoint) -> bool, chosen: &mut Vec<KillPoint>| {
        let candidates: Vec<&KillPoint> = reached
            .iter()
            .filter(|p| matches(p) && !chosen.contains(p))
            .collect();
        if !candidates.is_empty() {
            chosen.push(candidates[picks.below(candidates.len())].clone());
        }
    };
    for named in NAMED {
        take(&|p| p.label == named && p.n == 1, &mut chosen);
    }
    // Every phase the named steps left out, then all phases in turn.
    for wanted in PHASES {
        if !chosen.iter().any(|p| p.phase() == wanted) {
            take(&|p| p.phase() == wanted, &mut chosen);
        }
    }
    let mut phase = 0;
    while chosen.len() < count && phase < count * PHASES.len() {
        let wanted = PHASES[phase % PHASES.len()];
        take(&|p| p.phase() == wanted, &mut chosen);
        phase += 1;
    }
    chosen
}

/// A life of `point.kind` whose operator kills itself at `point`.
async fn kill_at(point: &KillPoint) -> anyhow::Result<Row> {
    let kill_at = format!("{}#{}", point.label, point.n);
    let mut life = Life::new(&[(KILL_AT, &kill_at)]).await?;
    let result = life.live(point.kind).await.map_err(|e| format!("{e:#}"));
    let log = life.bed.operator.log();
    let killed = log.contains(&format!("chaos kill label={} n={}", point.label, point.n))
        && life.deaths.len() == 1
        && life
            .deaths
            .iter()
            .all(|d| std::os::unix::process::ExitStatusExt::signal(d) == Some(SIGKILL));
    Ok(Row {
        point: point.clone(),
        killed,
        result,
        restored: life.restored,
        converged: life.converged,
    })
}

/// One row of the table.
struct Row {
    point: KillPoint,
    killed: bool,
    result: Result<(), String>,
    restored: Option<bool>,
    converged: Vec<Duration>,
}

#[tokio::test]
async fn the_operator_killed_at_any_step_converges_and_restores_exactly() -> anyhow::Result<()> {
    // `make chaos` passes empty values for what it was not given.
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let count: usize = set(POINTS)
        .map(|v| v.parse())
        .transpose()
        .context(POINTS)?
        .unwrap_or(9);
    let seed: u64 = match set(SEED) {
        Some(v) => v.parse().context(SEED)?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64,
    };
    println!(
        "chaos: seed {seed} ({count} kill points; replay with make chaos SEED={seed} POINTS={count})"
    );

    // The census: every point two untouched lives of each kind both
    // reach (a point only some lives reach, as a state a mount may skip
    // through, would be a kill that may not happen).
    let mut reached = BTreeSet::new();
    for kind in Kind::ALL {
        let mut both: Option<BTreeSet<KillPoint>> = None;
        for _ in 0..2 {
            let mut life = Life::new(&[(TRACE, "1")]).await?;
            life.live(kind)
                .await
                .with_context(|| format!("the census life of a {kind:?} mount"))?;
            anyhow::ensure!(life.deaths.is_empty(), "the operator died untouched");
            let points: BTreeSet<KillPoint> = census(&life.bed.operator.log())
                .into_iter()
                .map(|(label, n)| KillPoint { kind, label, n })
                .collect();
            both = Some(match both {
                None => points,
                Some(earlier) => earlier.intersection(&points).cloned().collect(),
            });
        }
        reached.extend(both.unwrap_or_default());
    }
    let phases_reached: BTreeSet<&str> = reached.iter().map(KillPoint::phase).collect();
    for phase in PHASES {
        anyhow::ensure!(
            phases_reached.contains(phase),
            "no kill point in phase {phase}: {phases_reached:?}"
        );
    }
    let mut picks = Picks(seed);
    let points = choose(&reached, count, &mut picks);

    let mut rows = Vec::new();
    let mut tried: BTreeSet<KillPoint> = points.iter().cloned().collect();
    let mut missed = Vec::new();
    for mut point in points {
        // A point the census saw twice may still not come (a retry that
        // did not happen this time): another of its phase is taken instead,
        // and the miss is reported.
        let row = loop {
            let row = kill_at(&point).await?;
            if row.killed {
                break row;
            }
            missed.push(format!("{:?} {}#{}", point.kind, point.label, point.n));
            let others: Vec<&KillPoint> = reached
                .iter()
                .filter(|p| p.phase() == point.phase() && !tried.contains(*p))
                .collect();
            if missed.len() > 5 || others.is_empty() {
                break row;
            }
            point = others[picks.below(others.len())].clone();
            tried.insert(point.clone());
        };
        rows.push(row);
    }

    print_table(seed, &rows);
    if !missed.is_empty() {
        println!(
            "chaos: {} points not reached and replaced by another of their phase: {}",
            missed.len(),
            missed.join(", ")
        );
    }
    for row in &rows {
        assert!(
            row.killed,
            "{:?} {}#{}: the operator was not killed there (the point was not reached)",
            row.point.kind, row.point.label, row.point.n
        );
        if let Err(err) = &row.result {
            panic!(
                "{:?} killed at {}#{}: {err}",
                row.point.kind, row.point.label, row.point.n
            );
        }
    }
    let covered: BTreeSet<&str> = rows.iter().map(|r| r.point.phase()).collect();
    for phase in PHASES {
        assert!(covered.contains(phase), "no kill in phase {phase}");
    }
    Ok(())
}

fn print_table(seed: u64, rows: &[Row]) {
    let yes = |b: bool| if b { "yes" } else { "NO" };
    println!("chaos: seed {seed}");
    println!(
        "  {:<12} {:<40} {:>3}  {:<6} {:<9} {:<8} {:>8}",
        "target", "kill point", "n", "killed", "converged", "restored", "converge"
    );
    for row in rows {
        let converge = row
            .converged
            .first()
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:<12} {:<40} {:>3}  {:<6} {:<9} {:<8} {:>8}",
            format!("{:?}", row.point.kind),
            row.point.label,
            row.point.n,
            yes(row.killed),
            yes(row.restored.is_some()),
            match row.restored {
                Some(true) => "exactly",
                Some(false) => "NO",
                None => "-",
            },
            converge
        );
    }
    let mut per_phase: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for row in rows {
        let entry = per_phase.entry(row.point.phase()).or_default();
        entry.0 += usize::from(row.killed);
        entry.1 += usize::from(row.killed && row.result.is_ok());
    }
    let mut times: Vec<Duration> = rows.iter().flat_map(|r| r.converged.clone()).collect();
    times.sort();
    let p50 = times.get(times.len() / 2).copied().unwrap_or_default();
    let max = times.last().copied().unwrap_or_default();
    let killed = rows.iter().filter(|r| r.killed).count();
    let converged = rows
        .iter()
        .filter(|r| r.killed && r.restored.is_some())
        .count();
    let lost = rows.iter().filter(|r| r.restored == Some(false)).count();
    println!(
        "  kills per phase (killed/converged): {}",
        per_phase
            .iter()
            .map(|(p, (k, c))| format!("{p} {k}/{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "chaos: {converged}/{killed} kills converged ({} points chosen), {lost} originals not restored exactly; converge after a kill p50 {:.2} s, max {:.2} s",
        rows.len(),
        p50.as_secs_f64(),
        max.as_secs_f64()
    );
}

#[test]
fn the_census_reads_the_operators_points_and_the_seed_picks_every_phase() {
    let log = "chaos point label=REQUESTED reconcile n=1\nnoise\nchaos point label=INSTALLING patch Pod n=2\n";
    assert_eq!(
        census(log),
        vec![
            ("REQUESTED reconcile".to_string(), 1),
            ("INSTALLING patch Pod".to_string(), 2)
        ]
    );
    let mut reached = BTreeSet::new();
    for kind in Kind::ALL {
        for phase in PHASES {
            for step in ["reconcile", "patch Pod", "exec Pod", "uninstalled"] {
                for n in 1..=2 {
                    reached.insert(KillPoint {
                        kind,
                        label: format!("{phase} {step}"),
                        n,
                    });
                }
            }
        }
    }
    let chosen = choose(&reached, 9, &mut Picks(7));
    assert_eq!(chosen.len(), 9);
    let labels: Vec<&str> = chosen.iter().map(|p| p.label.as_str()).collect();
    for named in NAMED {
        assert!(labels.contains(&named), "{named} in {labels:?}");
    }
    let phases: BTreeSet<&str> = chosen.iter().map(KillPoint::phase).collect();
    assert_eq!(phases.len(), PHASES.len(), "{phases:?}");
    assert_eq!(choose(&reached, 9, &mut Picks(7)), chosen, "a seed replays");
}
