//! How the host calls config filters, as its metrics show an operator: a
//! module that exports `translate-batch` gets a batch in one call per 1024
//! filters; a module of the `config-filter-provider` world (no batch
//! function) is called filter by filter; a batch call that traps is done
//! again one filter at a time, so that only the filter at fault fails. One
//! test in a process of its own, so that the counts are exact.

use pontoon::{
    metrics::METRICS,
    plugins::{FilterModule, Limits, LoadedModule, PluginRuntime, bindings::RouteContext},
};
use pontoon_tests::modules::test_module;
use std::sync::Arc;

/// `pontoon_provider_calls_total` for a module, step and result.
fn calls(module: &str, step: &str, result: &str) -> u64 {
    let series = format!(
        r#"pontoon_provider_calls_total{{module="{module}",step="{step}",result="{result}"}} "#
    );
    METRICS
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

async fn filter(runtime: &Arc<PluginRuntime>, name: &str) -> anyhow::Result<FilterModule> {
    match runtime.load_file(&test_module(name)?).await? {
        LoadedModule::Filter(f) => Ok(f),
        LoadedModule::Provider(_) => anyhow::bail!("{name} loaded as a provider"),
    }
}

fn header(name: &str, value: &str) -> String {
    serde_json::json!({
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": { "set": [{ "name": name, "value": value }] }
    })
    .to_string()
}

fn stamp(name: &str) -> String {
    serde_json::json!({
        "type": "ExtensionRef",
        "extensionRef": { "group": "stamp.pontoon.dev", "kind": "HeaderStamp", "name": name }
    })
    .to_string()
}

fn contexts(count: usize) -> Vec<RouteContext> {
    (0..count)
        .map(|i| RouteContext {
            route_namespace: "shop".into(),
            route_name: format!("route-{i}"),
            rule_index: 0,
            filter_index: 0,
            gateway_namespace: "infra".into(),
            gateway_name: "edge".into(),
        })
        .collect()
}

/// The first `request_set` value of each answer, or the error's text.
async fn values(module: &FilterModule, filters: &[String]) -> anyhow::Result<Vec<String>> {
    let contexts = contexts(filters.len());
    let items: Vec<(&str, &RouteContext)> =
        filters.iter().map(String::as_str).zip(&contexts).collect();
    module
        .translate_all(&items)
        .await
        .into_iter()
        .map(|answer| match answer {
            Ok(entries) => {
                let entry: serde_json::Value = serde_json::from_str(&entries[0])?;
                Ok(entry["request_set"][0]["value"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string())
            }
            Err(err) => Ok(format!("error: {err}")),
        })
        .collect()
}

#[tokio::test]
async fn batches_go_in_one_call_and_a_trap_is_isolated_filter_by_filter() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let batching = filter(&runtime, "header_filter").await?;
    assert!(batching.takes_batches(), "the SDK exports translate-batch");

    // 2500 filters: three calls (1024, 1024, 452), answers in order.
    let filters: Vec<String> = (0..2500).map(|i| header("x-n", &i.to_string())).collect();
    let answers = values(&batching, &filters).await?;
    let expected: Vec<String> = (0..2500).map(|i| i.to_string()).collect();
    assert_eq!(answers, expected);
    assert_eq!(calls("header-filter", "translate-batch", "returned"), 3);
    assert_eq!(calls("header-filter", "translate", "returned"), 0);

    // A panic stops the batch call; its filters are then translated one by
    // one, and only the two that panic fail.
    let filters: Vec<String> = (0..6)
        .map(|i| match i {
            1 | 4 => header("x-panic", "boom"),
            _ => header("x-n", &i.to_string()),
        })
        .collect();
    let answers = values(&batching, &filters).await?;
    for (i, answer) in answers.iter().enumerate() {
        if i == 1 || i == 4 {
            assert!(
                answer.contains("trapped in `translate`") && answer.contains("panic"),
                "filter {i}: {answer}"
            );
        } else {
            assert_eq!(answer, &i.to_string(), "filter {i}");
        }
    }
    assert_eq!(calls("header-filter", "translate-batch", "stopped"), 1);
    assert_eq!(calls("header-filter", "translate", "returned"), 4);
    assert_eq!(calls("header-filter", "translate", "stopped"), 2);

    // A module built for the world without batches: filter by filter.
    let single = filter(&runtime, "header_stamp").await?;
    assert!(!single.takes_batches());
    let filters: Vec<String> = ["blue", "green", "red"].map(stamp).to_vec();
    assert_eq!(values(&single, &filters).await?, ["blue", "green", "red"]);
    assert_eq!(calls("header-stamp", "translate", "returned"), 3);
    assert_eq!(calls("header-stamp", "translate-batch", "returned"), 0);
    Ok(())
}
