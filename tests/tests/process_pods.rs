//! Process pods: the test bed really runs the pods of the images mapped in
//! `tests/testbed/process-images.yaml` (pod-runner), in its network
//! namespace where kube-proxy serves Services. What a user of the cluster
//! would notice: the pod answers on its IP, through its Service's ClusterIP
//! (from outside and from the pods themselves) and load-balancer address, with its volumes' files, only while it exists
//! and is reported Ready only when its readiness probe passes; its logs
//! come through the API server (`kubectl logs`), with sinceTime, tailLines
//! and follow.
//!
//! Reported as skipped, saying why, where the test bed has no network
//! namespace (not run as root); a failure under `CI=true` (see
//! `pontoon_tests::skip`).

use std::{collections::BTreeSet, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    ResourceExt,
    api::{DeleteParams, PostParams},
};
use pontoon_tests::{TestNamespace, traffic::TestbedNet, wait_for, wait_for_list};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
/// The test bed's own busybox image (process-images.yaml).
const BUSYBOX: &str = "testbed.pontoon.dev/busybox:1";

/// busybox's httpd on 8080 serving /www: `pod/name` (downward API: the
/// pod's name) and `config/greeting` (the ConfigMap `site`).
fn web_pod_spec(probe_path: &str) -> serde_json::Value {
    json!({
        "containers": [{
            "name": "web",
            "image": BUSYBOX,
            "command": ["busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
            "ports": [{ "name": "http", "containerPort": 8080 }],
            "readinessProbe": {
                "httpGet": { "path": probe_path, "port": "http" },
                "periodSeconds": 1
            },
            "volumeMounts": [
                { "name": "pod", "mountPath": "/www/pod", "readOnly": true },
                { "name": "config", "mountPath": "/www/config", "readOnly": true }
            ]
        }],
        "volumes": [
            { "name": "pod", "downwardAPI": { "items": [
                { "path": "name", "fieldRef": { "fieldPath": "metadata.name" } }
            ] } },
            { "name": "config", "configMap": { "name": "site" } }
        ]
    })
}

async fn site_config_map(ns: &TestNamespace, greeting: &str) -> anyhow::Result<()> {
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "site" },
        "data": { "greeting": greeting }
    }))?;
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &map)
        .await?;
    Ok(())
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Sends `count` requests to `url` and returns the distinct bodies.
fn answers(net: &TestbedNet, url: &str, count: usize) -> anyhow::Result<BTreeSet<String>> {
    (0..count).map(|_| net.get(url)).collect()
}

#[tokio::test]
async fn a_process_pod_serves_on_its_ip_its_service_and_its_load_balancer_address()
-> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    let ns = TestNamespace::new("process-pods").await?;
    site_config_map(&ns, "hello from a ConfigMap").await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": web_pod_spec("/pod/name")
            }
        }
    }))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app": "web" },
            "ports": [{ "port": 80, "targetPort": "http" }]
        }
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &service)
        .await?;

    let pods = wait_for_list(
        &ns.api::<Pod>(),
        "app=web",
        |pods: &[Pod]| pods.len() == 2 && pods.iter().all(ready),
        TIMEOUT,
    )
    .await?;
    let mut ips = BTreeSet::new();
    let mut names = BTreeSet::new();
    for pod in &pods {
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("a Ready pod has no IP")?;
        // Each pod answers on its own IP, with its own name (downward API)
        // and the ConfigMap's content at the mount path.
        assert_eq!(
            net.get(&format!("http://{ip}:8080/pod/name"))?,
            pod.name_any()
        );
        assert_eq!(
            net.get(&format!("http://{ip}:8080/config/greeting"))?,
            "hello from a ConfigMap"
        );
        ips.insert(ip);
        names.insert(pod.name_any());
    }
    assert_eq!(ips.len(), 2, "the two pods share an IP: {ips:?}");

    // Through the Service: its ClusterIP and its load-balancer address, both
    // pods answering (kube-proxy picks at random; 40 tries miss one pod with
    // a chance of 2^-39).
    let service = wait_for(
        &ns.api::<Service>(),
        "web",
        |s: Option<&Service>| {
            s.and_then(|s| s.status.as_ref())
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty())
        },
        TIMEOUT,
    )
    .await?
    .context("the Service went away")?;
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .context("no ClusterIP")?;
    let lb_ip = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first())
        .and_then(|i| i.ip.clone())
        .context("no load-balancer IP")?;
    for address in [&cluster_ip, &lb_ip] {
        let url = format!("http://{address}/pod/name");
        // kube-proxy may program a new Service a moment after its endpoints.
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while net.get(&url).is_err() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            answers(&net, &url, 40)?,
            names,
            "not every pod answered through {address}"
        );
    }

    // From inside each pod, through the ClusterIP: both pods answer, the
    // asking one too (a hairpin connection, masqueraded whichever node the
    // pod is on, as its own node's kube-proxy does).
    let url = format!("http://{cluster_ip}/pod/name");
    for pod in &pods {
        let inside = net.of_pod(pod)?;
        assert_eq!(
            answers(&inside, &url, 40)?,
            names,
            "not every pod answered {} through {cluster_ip} (node {:?})",
            pod.name_any(),
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
        );
    }

    // A deleted pod's process stops: its IP answers no more, or (kwok gives
    // a freed IP out again at once, maybe to the Deployment's replacement
    // pod) answers with another pod's name.
    let gone = &pods[0];
    let gone_ip = gone.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    ns.api::<Pod>()
        .delete(&gone.name_any(), &DeleteParams::default())
        .await?;
    let url = format!("http://{gone_ip}:8080/pod/name");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while net.get(&url).is_ok_and(|name| name == gone.name_any()) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the deleted pod {} still answers on {gone_ip}",
            gone.name_any()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_port_forward_through_the_api_server_reaches_a_process_pods_own_process()
-> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("process-forward").await?;
    site_config_map(&ns, "hello through the API server").await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "web", "labels": { "app": "web" } },
        "spec": web_pod_spec("/pod/name")
    }))?;
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    wait_for(
        &ns.api::<Pod>(),
        "web",
        |p: Option<&Pod>| p.is_some_and(ready),
        TIMEOUT,
    )
    .await?;
    // As `kubectl port-forward` does: from outside the pods' network, through
    // the API server (and kwok) into the pod's own network namespace.
    for _ in 0..2 {
        let mut forwarded = ns.api::<Pod>().portforward("web", &[8080]).await?;
        let mut stream = forwarded.take_stream(8080).context("no stream for 8080")?;
        stream
            .write_all(b"GET /config/greeting HTTP/1.0\r\nHost: web\r\n\r\n")
            .await?;
        // A WebSocket port-forward (kube's) closes a port's stream only
        // with the whole connection: read the answer, not to its end.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        let read = async {
            while !String::from_utf8_lossy(&answer).ends_with("hello through the API server") {
                let n = stream.read(&mut chunk).await?;
                anyhow::ensure!(n > 0, "the stream ended early");
                answer.extend_from_slice(&chunk[..n]);
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(TIMEOUT, read)
            .await
            .map_err(|_| anyhow::anyhow!("no answer: {}", String::from_utf8_lossy(&answer)))??;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1."), "{answer}");
        drop(stream);
        forwarded.abort();
    }
    Ok(())
}

#[tokio::test]
async fn a_failing_readiness_probe_keeps_a_process_pod_not_ready() -> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    let ns = TestNamespace::new("process-probe").await?;
    site_config_map(&ns, "hi").await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "web", "labels": { "app": "web" } },
        "spec": web_pod_spec("/no-such-page")
    }))?;
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    // Running, with its IP, and serving...
    let running = wait_for(
        &ns.api::<Pod>(),
        "web",
        |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .is_some_and(|s| s.phase.as_deref() == Some("Running") && s.pod_ip.is_some())
        },
        TIMEOUT,
    )
    .await?
    .context("the pod went away")?;
    let ip = running.status.unwrap().pod_ip.unwrap();
    let url = format!("http://{ip}:8080/pod/name");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while net.get(&url).is_err() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the pod never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ...yet not Ready while its probe's page is missing (five periods).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pod = ns.api::<Pod>().get("web").await?;
    assert!(
        !ready(&pod),
        "Ready although its probe fails: {:?}",
        pod.status
    );
    let container_ready = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.ready);
    assert_eq!(container_ready, Some(false));
    Ok(())
}

#[tokio::test]
async fn a_deleted_pod_serves_through_its_pre_stop_sleep_then_stops() -> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    let ns = TestNamespace::new("prestop").await?;
    site_config_map(&ns, "still here").await?;
    let mut spec = web_pod_spec("/pod/name");
    spec["containers"][0]["lifecycle"] = json!({ "preStop": { "sleep": { "seconds": 4 } } });
    let pod: Pod =
        serde_json::from_value(json!({ "metadata": { "name": "draining" }, "spec": spec }))?;
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    let pod = wait_for(
        &ns.api::<Pod>(),
        "draining",
        |p: Option<&Pod>| p.is_some_and(ready),
        TIMEOUT,
    )
    .await?
    .context("the pod went away")?;
    let ip = pod.status.and_then(|s| s.pod_ip).context("no pod IP")?;
    let url = format!("http://{ip}:8080/config/greeting");
    ns.api::<Pod>()
        .delete("draining", &DeleteParams::default())
        .await?;
    let deleted = tokio::time::Instant::now();
    // As with a kubelet: the preStop sleep runs first, the pod serving on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        net.get(&url)?,
        "still here",
        "served during its preStop sleep"
    );
    while net.get(&url).is_ok() {
        anyhow::ensure!(
            deleted.elapsed() < TIMEOUT,
            "the deleted pod still answers on {ip}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stopped = deleted.elapsed();
    anyhow::ensure!(
        stopped >= Duration::from_secs(4),
        "it stopped {stopped:?} after deletion, before its 4 s preStop sleep ended"
    );
    Ok(())
}

/// The numbers of the `<word> N` lines of `logs`.
fn numbered(logs: &str, word: &str) -> Vec<u64> {
    logs.lines()
        .filter_map(|line| line.strip_prefix(word)?.strip_prefix(' ')?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_process_pods_logs_come_through_the_api_server() -> anyhow::Result<()> {
    use futures::{AsyncBufReadExt, StreamExt};
    use k8s_openapi::jiff::Timestamp;
    use kube::api::LogParams;
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("process-logs").await?;
    // A line of 65536 x's (more than four of the CRI log's 16 KiB chunks) and, once
    // it is surely logged (the other stream's lines may come between a long
    // line's chunks, as with a container runtime), one on stderr, then a
    // numbered line on each stream every 200 ms.
    let script = r#"l=x; while [ ${#l} -lt 65536 ]; do l=$l$l; done; echo "long:$l"
busybox sleep 1; echo 'to stderr' >&2
i=0
while true; do i=$((i+1)); echo "tick $i"; echo "tock $i" >&2; busybox sleep 0.2; done"#;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "talker" },
        "spec": { "containers": [{
            "name": "talk",
            "image": BUSYBOX,
            "command": ["busybox", "sh", "-c", script]
        }] }
    }))?;
    let pods = ns.api::<Pod>();
    pods.create(&PostParams::default(), &pod).await?;
    wait_for(
        &pods,
        "talker",
        |p: Option<&Pod>| p.is_some_and(ready),
        TIMEOUT,
    )
    .await?;
    let params = |since_time, tail_lines| LogParams {
        container: Some("talk".into()),
        since_time,
        tail_lines,
        ..LogParams::default()
    };

    // Both streams, the long line whole, in the order printed.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let all = loop {
        let logs = pods.logs("talker", &params(None, None)).await?;
        if numbered(&logs, "tick").len() >= 3 && numbered(&logs, "tock").len() >= 3 {
            break logs;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no ticks and tocks in the logs: {logs:.300}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let long = format!("long:{}", "x".repeat(65536));
    let lines: Vec<&str> = all.lines().collect();
    assert!(
        lines.first() == Some(&long.as_str()),
        "not the long line, whole, first; the lines' lengths: {:?}",
        lines.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert!(lines.contains(&"to stderr"), "{all:.300}");
    let ticks = numbered(&all, "tick");
    let tocks = numbered(&all, "tock");
    assert_eq!(ticks, (1..=ticks.len() as u64).collect::<Vec<_>>());
    assert_eq!(tocks, (1..=tocks.len() as u64).collect::<Vec<_>>());
    let printed = *ticks.last().context("no tick")?;

    // sinceTime (whole seconds, as the API has it): only what came after.
    // Every line above was printed over a second before it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let since = Timestamp::now();
    let later = loop {
        let logs = pods.logs("talker", &params(Some(since), None)).await?;
        if !numbered(&logs, "tick").is_empty() {
            break logs;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "nothing since {since}: {logs:.300}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !later.contains("long:") && !later.contains("to stderr"),
        "{later:.300}"
    );
    let first = numbered(&later, "tick")[0];
    assert!(
        first > printed,
        "since {since}: tick {first}, though tick {printed} was printed before: {later}"
    );
    assert!(
        numbered(&later, "tock").iter().all(|&n| n > printed),
        "{later}"
    );

    // tailLines.
    let tail = pods.logs("talker", &params(None, Some(2))).await?;
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(
        tail.lines()
            .all(|l| l.starts_with("tick ") || l.starts_with("tock ")),
        "{tail}"
    );

    // follow: new lines as they are printed.
    let newest = *numbered(&pods.logs("talker", &params(None, None)).await?, "tick")
        .last()
        .context("no tick")?;
    let follow = LogParams {
        follow: true,
        tail_lines: Some(0),
        ..params(None, None)
    };
    let mut lines = pods.log_stream("talker", &follow).await?.lines();
    let next = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next().await {
            let line = line?;
            if let Some(n) = numbered(&line, "tick").first() {
                return anyhow::Ok(*n);
            }
        }
        anyhow::bail!("the followed logs ended")
    })
    .await
    .map_err(|_| anyhow::anyhow!("no new tick followed in 10 s"))??;
    assert!(next > newest, "followed tick {next}, not after {newest}");
    Ok(())
}

/// A load-balancer address kube-proxy has not programmed (yet) refuses a
/// TCP connection at once, as an unready load balancer does, rather than
/// swallowing the SYN: a client that dialled a new Gateway's address a
/// moment too early would otherwise hang on its one conntrack entry.
#[test]
fn an_unprogrammed_load_balancer_address_refuses_at_once() -> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    for address in ["10.97.255.254", "10.97.0.3"] {
        let started = std::time::Instant::now();
        let out = net.curl(&[
            "--silent",
            "--max-time",
            "5",
            &format!("http://{address}:81/"),
        ])?;
        // curl's 7: "Failed to connect" (refused); 28 would be a timeout.
        anyhow::ensure!(
            out.status.code() == Some(7),
            "{address}: curl exit {:?} after {:?}",
            out.status.code(),
            started.elapsed()
        );
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(2),
            "{address} took {:?}",
            started.elapsed()
        );
    }
    Ok(())
}

/// The status of container `name` of `pod`.
fn container<'a>(
    pod: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// How container `name` last ended: (exit code, reason).
fn last_termination(pod: &Pod, name: &str) -> Option<(i32, String)> {
    let ended = container(pod, name)?
        .last_state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some((ended.exit_code, ended.reason.clone().unwrap_or_default()))
}

fn restarts(pod: &Pod, name: &str) -> i32 {
    container(pod, name).map_or(0, |c| c.restart_count)
}

#[tokio::test]
async fn a_container_failing_its_liveness_probe_or_passing_its_memory_limit_is_killed_and_restarted()
-> anyhow::Result<()> {
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("process-health").await?;
    let httpd = |port: u16, live_path: &str, memory: &str| {
        json!({
            "image": BUSYBOX,
            "command": ["busybox", "httpd", "-f", "-p", port.to_string(), "-h", "/"],
            "livenessProbe": {
                "httpGet": { "path": live_path, "port": port },
                "periodSeconds": 1, "failureThreshold": 2
            },
            "resources": { "limits": { "memory": memory } }
        })
    };
    let mut sick = httpd(8080, "/no-such-page", "64Mi");
    sick["name"] = json!("sick");
    let mut well = httpd(8081, "/etc/hostname", "64Mi");
    well["name"] = json!("well");
    // 64 MiB read into one buffer, over and over, against a 32 MiB limit.
    let hog = json!({
        "name": "hog",
        "image": BUSYBOX,
        "command": ["busybox", "dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=100000000"],
        "resources": { "limits": { "memory": "32Mi" } }
    });
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "health" },
        "spec": { "containers": [sick, well, hog] }
    }))?;
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    let pod = wait_for(
        &ns.api::<Pod>(),
        "health",
        |p: Option<&Pod>| {
            p.is_some_and(|p| {
                restarts(p, "sick") >= 2
                    && last_termination(p, "hog").is_some_and(|(_, r)| r == "OOMKilled")
            })
        },
        TIMEOUT,
    )
    .await
    .context("the sick container was not restarted twice, or the hog never OOMKilled")?
    .context("the pod went away")?;
    // Killed as a kubelet kills: SIGKILL, 128 + 9.
    assert_eq!(
        last_termination(&pod, "sick"),
        Some((137, "Error".to_string())),
        "{:?}",
        pod.status
    );
    assert_eq!(
        last_termination(&pod, "hog"),
        Some((137, "OOMKilled".to_string())),
        "{:?}",
        pod.status
    );
    // The container whose probe passes, under its limit, was left alone.
    assert_eq!(restarts(&pod, "well"), 0, "{:?}", pod.status);
    assert_eq!(last_termination(&pod, "well"), None);
    Ok(())
}

#[tokio::test]
async fn a_process_pod_gets_the_api_servers_address_and_a_service_account_token_kept_fresh()
-> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    let ns = TestNamespace::new("process-token").await?;
    // Serves the ServiceAccount's directory, and the API server's address
    // as its environment gives it.
    let script = "mkdir -p /tmp/www && \
        echo \"$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT\" > /tmp/www/api && \
        ln -s /var/run/secrets/kubernetes.io/serviceaccount /tmp/www/sa && \
        exec busybox httpd -f -p 8080 -h /tmp/www";
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "reader" },
        "spec": { "containers": [{
            "name": "reader",
            "image": BUSYBOX,
            "command": ["busybox", "sh", "-c", script],
            "readinessProbe": { "httpGet": { "path": "/api", "port": 8080 }, "periodSeconds": 1 }
        }] }
    }))?;
    // The API server adds the kube-api-access volume: token, ca.crt and
    // namespace at /var/run/secrets/kubernetes.io/serviceaccount.
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    let running = wait_for(
        &ns.api::<Pod>(),
        "reader",
        |p: Option<&Pod>| p.is_some_and(ready),
        TIMEOUT,
    )
    .await?
    .context("the pod went away")?;
    let ip = running.status.and_then(|s| s.pod_ip).context("no IP")?;
    let get = |path: &str| net.get(&format!("http://{ip}:8080/{path}"));
    assert_eq!(get("api")?.trim(), "10.96.0.1:443");
    assert_eq!(get("sa/namespace")?, ns.name());
    let root_ca: ConfigMap = ns.api().get("kube-root-ca.crt").await?;
    let ca = root_ca.data.unwrap_or_default().remove("ca.crt");
    assert_eq!(Some(get("sa/ca.crt")?), ca, "ca.crt is kube-root-ca.crt's");

    // The token is the pod's own (bound to it), and the API server takes it.
    let first = get("sa/token")?;
    let review: k8s_openapi::api::authentication::v1::TokenReview =
        serde_json::from_value(json!({ "spec": { "token": first.trim() } }))?;
    let reviewed =
        kube::Api::<k8s_openapi::api::authentication::v1::TokenReview>::all(ns.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
    let status = reviewed.status.context("no review status")?;
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.context("no user")?;
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{}:default", ns.name()).as_str())
    );
    let bound = user.extra.unwrap_or_default();
    assert_eq!(
        bound.get("authentication.kubernetes.io/pod-name"),
        Some(&vec!["reader".to_string()]),
        "{bound:?}"
    );
    // Renewed while the pod runs (every 30 s on the test bed).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(75);
    loop {
        let now = get("sa/token")?;
        if now != first {
            anyhow::ensure!(now.matches('.').count() == 2, "not a token: {now:?}");
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the token was never renewed"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_pod_that_runs_to_its_end_follows_its_restart_policy() -> anyhow::Result<()> {
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("process-end").await?;
    // Fails its first run and succeeds its second: an emptyDir outlives a
    // container's restart.
    let second_time_lucky = "test -f /work/ran && exit 0; touch /work/ran; exit 3";
    for (name, policy, script) in [
        ("once", "Never", "exit 0"),
        ("broken", "Never", "exit 3"),
        ("retried", "OnFailure", second_time_lucky),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "restartPolicy": policy,
                "containers": [{
                    "name": "job",
                    "image": BUSYBOX,
                    "command": ["busybox", "sh", "-c", script],
                    "volumeMounts": [{ "name": "work", "mountPath": "/work" }]
                }],
                "volumes": [{ "name": "work", "emptyDir": {} }]
            }
        }))?;
        ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    }
    let over = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
    };
    for (name, phase, code, restarted) in [
        ("once", "Succeeded", 0, 0),
        ("broken", "Failed", 3, 0),
        ("retried", "Succeeded", 0, 1),
    ] {
        let pod = wait_for(&ns.api::<Pod>(), name, over, TIMEOUT)
            .await
            .with_context(|| format!("pod {name} never ended"))?
            .context("the pod went away")?;
        let status = pod.status.clone().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some(phase), "{name}: {status:?}");
        let job = container(&pod, "job").context("no container status")?;
        let ended = job
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .with_context(|| format!("{name}: not terminated: {job:?}"))?;
        assert_eq!(ended.exit_code, code, "{name}: {job:?}");
        assert_eq!(
            ended.reason.as_deref(),
            Some(if code == 0 { "Completed" } else { "Error" }),
            "{name}: {job:?}"
        );
        assert_eq!(job.restart_count, restarted, "{name}: {job:?}");
    }
    Ok(())
}
