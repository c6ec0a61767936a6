//! `pontoon run`'s HTTP port (`--metrics-addr`): `/healthz` (the process
//! answers), `/readyz` (providers loaded and every running controller's cache
//! synced; 503 naming what is not) and `/metrics` (Prometheus text).

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Bytes, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::METRICS;

/// What must be ready before `/readyz` says so, by name.
#[derive(Debug, Default)]
pub struct Health {
    parts: Mutex<BTreeMap<String, bool>>,
}

impl Health {
    /// `part` must become ready before the process is.
    pub fn expect(&self, part: &str) {
        self.parts().entry(part.to_string()).or_insert(false);
    }

    pub fn set_ready(&self, part: &str, ready: bool) {
        self.parts().insert(part.to_string(), ready);
    }

    /// `Err` with the parts not ready yet.
    pub fn ready(&self) -> Result<(), Vec<String>> {
        let waiting: Vec<String> = self
            .parts()
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(part, _)| part.clone())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting)
        }
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn route(health: &Health, request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if request.method() != Method::GET {
        return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match request.uri().path() {
        "/healthz" => respond(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match health.ready() {
            Ok(()) => respond(StatusCode::OK, TEXT, "ok\n".into()),
            Err(waiting) => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: waiting for {}\n", waiting.join(", ")),
            ),
        },
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            METRICS.render(),
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: /healthz, /readyz, /metrics\n".into(),
        ),
    }
}

/// Binds `addr` (an error says which address could not be bound).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on --metrics-addr {addr}: {e}"))
}

/// Serves the endpoints on `listener` until the process ends.
pub async fn serve(listener: TcpListener, health: Arc<Health>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::debug!(error = %err, "metrics port: accept failed");
                continue;
            }
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let response = route(&health, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %err, "metrics port: connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_expected_part_is() {
        let health = Health::default();
        assert!(health.ready().is_ok(), "nothing expected yet");
        health.expect("providers");
        health.expect("bridge-mount cache");
        assert_eq!(
            health.ready(),
            Err(vec![
                "bridge-mount cache".to_string(),
                "providers".to_string()
            ])
        );
        health.set_ready("providers", true);
        health.set_ready("bridge-mount cache", true);
        assert!(health.ready().is_ok());
        health.expect("providers");
        assert!(health.ready().is_ok(), "expecting again keeps the state");
    }
}
