//! Test support: a client for the test bed (or any cluster named by `KUBECONFIG`)
//! and a throw-away namespace per test, so tests run in parallel without
//! seeing each other's objects.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::wait::{Condition, await_condition},
};
use rand::distr::{Alphanumeric, SampleString};

pub mod backends;
pub mod bench;
pub mod gateway_api;
pub mod kubelet;
pub mod modules;
pub mod netns;
pub mod operator;
pub mod praxis;
pub mod providers;
pub mod skip;
pub mod traffic;

pub use skip::skip;

/// A build done once per process: `build`'s path, or its error's message
/// for every caller (anyhow::Error is not Clone).
pub fn built_once(
    cell: &'static std::sync::OnceLock<Result<PathBuf, String>>,
    build: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<PathBuf> {
    cell.get_or_init(|| build().map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Root of the repository (the test bed lives in `.testbed/` under it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The test bed's directory: `TESTBED_DIR` if set (as for tests/testbed/*.sh),
/// else `.testbed/` in the repository.
pub fn testbed_dir() -> PathBuf {
    match std::env::var_os("TESTBED_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join(".testbed"),
    }
}

/// A program only the test bed's pods see (a stand-in for what their images
/// hold, e.g. `carrier2`), where tests/testbed/lib.sh puts it: the per-user
/// cache's `pod-bin/<first 12 hex of sha256(test bed dir)>/`.
pub fn pod_bin(name: &str) -> anyhow::Result<PathBuf> {
    use sha2::Digest as _;
    let cache = match std::env::var_os("PONTOON_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => match std::env::var_os("XDG_CACHE_HOME") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
        }
        .join("pontoon"),
    };
    let digest = sha2::Sha256::digest(testbed_dir().display().to_string().as_bytes());
    let key: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let path = cache.join("testbed/pod-bin").join(key).join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist: build the test bed's programs with `make testbed` (tests/testbed/build.sh)",
            path.display()
        );
    }
    Ok(path)
}

/// A program tests/testbed/build.sh put into the test bed's `bin/`, e.g.
/// `testbed_bin("echo-backend")`; an error saying how to build it if it is not there.
pub fn testbed_bin(name: &str) -> anyhow::Result<PathBuf> {
    let path = testbed_dir().join("bin").join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist: build the test bed's programs with `make testbed` (tests/testbed/build.sh)",
            path.display()
        );
    }
    Ok(path)
}

/// The kubeconfig the tests use: `KUBECONFIG` if set, else the test bed's.
pub fn kubeconfig_path() -> PathBuf {
    match std::env::var_os("KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => repo_root().join(".testbed/kubeconfig"),
    }
}

/// Client configuration for the test cluster.
pub async fn config() -> anyhow::Result<Config> {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "cannot read kubeconfig {} (start the test bed with `make testbed-up`, or set KUBECONFIG)",
            path.display()
        )
    })?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// A client for the test cluster.
pub async fn client() -> anyhow::Result<Client> {
    Ok(Client::try_from(config().await?)?)
}

/// A namespace created for one test and deleted when dropped (also when the test panics).
pub struct TestNamespace {
    pub client: Client,
    name: String,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and returns it with a client.
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        let client = client().await?;
        let suffix = Alphanumeric
            .sample_string(&mut rand::rng(), 6)
            .to_lowercase();
        let name = format!("{prefix}-{suffix}");
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("pontoon.dev/test".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating test namespace {name}"))?;
        // The service-account controller adds `default`; pods need it to be admitted.
        wait_for_default_service_account(&client, &name).await?;
        Ok(Self { client, name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A typed API in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await, and the test's runtime may be shutting down:
        // delete from a short-lived runtime of our own.
        let name = std::mem::take(&mut self.name);
        let outcome = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let client = client().await?;
                Api::<Namespace>::all(client)
                    .delete(&name, &DeleteParams::background())
                    .await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(err)) = outcome {
            eprintln!("warning: could not delete test namespace: {err:#}");
        }
    }
}

async fn wait_for_default_service_account(client: &Client, ns: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let found = |sa: Option<&ServiceAccount>| sa.is_some();
    wait_for(&api, "default", found, Duration::from_secs(30))
        .await
        .with_context(|| format!("namespace {ns} never got its `default` service account"))?;
    Ok(())
}

/// Waits until `condition` holds for the named object, or fails after `timeout`
/// saying what it was waiting for.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    condition: impl Condition<K>,
    timeout: Duration,
) -> anyhow::Result<Option<K>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, condition)).await {
        Ok(result) => Ok(result?),
        Err(_) => bail!(
            "timed out after {timeout:?} waiting for {} {name}",
            std::any::type_name::<K>()
                .rsplit("::")
                .next()
                .unwrap_or("object")
        ),
    }
}

/// Waits until `predicate` holds for the list of objects matching `selector`.
pub async fn wait_for_list<K>(
    api: &Api<K>,
    selector: &str,
    predicate: impl Fn(&[K]) -> bool,
    timeout: Duration,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    use kube::runtime::{reflector, watcher};
    let (reader, writer) = reflector::store();
    // Every event (deletions too) is a reason to look again.
    let stream = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().labels(selector)),
    );
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, stream.try_next()).await {
            // The store holds the full list only once the initial listing is done.
            Ok(Ok(Some(watcher::Event::Init | watcher::Event::InitApply(_)))) => continue,
            Ok(Ok(Some(_))) => {
                let objects: Vec<K> = reader.state().iter().map(|o| (**o).clone()).collect();
                if predicate(&objects) {
                    return Ok(objects);
                }
            }
            Ok(Ok(None)) => bail!("watch on {selector} ended"),
            Ok(Err(err)) => return Err(err.into()),
            Err(_) => {
                let names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
                bail!(
                    "timed out after {timeout:?} waiting on objects labelled {selector}; last seen: {names:?}"
                )
            }
        }
    }
}

/// Whether a pod's `Ready` condition is True (what `kubectl get pods` shows
/// as all containers ready).
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
