//! Fencing: a leader that may have lost its Lease writes nothing.
//!
//! A standby takes the Lease once it has seen no renewal for the lease
//! duration; the leader gives up after the (shorter) renew deadline. But a
//! process can stall (a frozen node, a long GC-like pause, SIGSTOP) and wake
//! with reconciles in flight that would write as if it still led. The
//! [`Fence`] is open until the start of the last successful renewal plus the
//! renew deadline, measured on this process's monotonic clock (which runs on
//! while the process is stopped); every request that changes the cluster
//! goes through [`FenceLayer`] and is refused, before it is sent, once the
//! fence is closed. A standby can only take over a lease duration after the
//! last renewal it saw, which is after the renewal began here, so between
//! the fence closing and the take-over there is the lease duration minus the
//! renew deadline for a request already on the wire to land.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use http::{Method, Request, header};
use tower::{BoxError, Layer, Service};

/// Whether this process may write, and until when.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    open_until: Arc<Mutex<Option<Instant>>>,
}

/// Why a request was not sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this replica's leader Lease may have passed to another replica (no renewal within the renew deadline), so it writes nothing more"
)]
pub struct Fenced;

impl Fence {
    /// A fence that is closed until a Lease is taken.
    pub fn closed() -> Self {
        Self::default()
    }

    /// The Lease was taken or renewed by a request that began at `began`:
    /// writes may go on for `renew_deadline` from then.
    pub fn renewed(&self, began: Instant, renew_deadline: Duration) {
        let until = began + renew_deadline;
        let mut open = self.lock();
        // A slow renewal that lands after a quicker later one must not
        // shorten the fence.
        if open.is_none_or(|current| current < until) {
            *open = Some(until);
        }
    }

    /// Leading ended: nothing more is written, whatever the clock says.
    pub fn close(&self) {
        *self.lock() = None;
    }

    pub fn is_open(&self) -> bool {
        self.is_open_at(Instant::now())
    }

    fn is_open_at(&self, now: Instant) -> bool {
        self.lock().is_some_and(|until| now < until)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.open_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether a request changes the cluster: every method but the reading ones,
/// and the upgraded connections (exec, attach, port-forward are GETs that
/// run commands in a pod).
pub fn writes<B>(request: &Request<B>) -> bool {
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    !reads || request.headers().contains_key(header::UPGRADE)
}

/// Refuses the writes of a client once its [`Fence`] is closed.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    pub fn new(fence: Fence) -> Self {
        Self { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// The service [`FenceLayer`] wraps a client's stack in.
#[derive(Clone, Debug)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
}

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // Checked when the request is made, not when the caller began its
        // work: a reconcile that stalled past the fence stops at its next
        // write.
        if writes(&request) && !self.fence.is_open() {
            tracing::warn!(method = %request.method(), uri = %request.uri(), "{Fenced}");
            return Box::pin(std::future::ready(Err(BoxError::from(Fenced))));
        }
        let call = self.inner.call(request);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, upgrade: bool) -> Request<()> {
        let mut builder = Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/pods/b");
        if upgrade {
            builder = builder.header(header::UPGRADE, "websocket");
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn changes_and_execs_are_writes_reads_and_watches_are_not() {
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(writes(&request(method.clone(), false)), "{method}");
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!writes(&request(method.clone(), false)), "{method}");
        }
        assert!(writes(&request(Method::GET, true)), "an exec is a write");
    }

    #[test]
    fn the_fence_is_open_for_the_renew_deadline_from_the_renewal_start() {
        let fence = Fence::closed();
        let began = Instant::now();
        assert!(!fence.is_open_at(began), "closed before any Lease");
        fence.renewed(began, Duration::from_secs(10));
        assert!(fence.is_open_at(began + Duration::from_secs(9)));
        assert!(!fence.is_open_at(began + Duration::from_secs(10)));
        // An older renewal landing late does not shorten it.
        fence.renewed(began - Duration::from_secs(5), Duration::from_secs(10));
        assert!(fence.is_open_at(began + Duration::from_secs(9)));
        fence.close();
        assert!(!fence.is_open_at(began), "closed when leading ends");
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_before_they_reach_the_service() {
        use tower::ServiceExt as _;
        let sent = Arc::new(Mutex::new(Vec::new()));
        let inner = {
            let sent = sent.clone();
            tower::service_fn(move |request: Request<()>| {
                sent.lock().unwrap().push(request.method().clone());
                async { Ok::<_, BoxError>(()) }
            })
        };
        let fence = Fence::closed();
        let mut service = FenceLayer::new(fence.clone()).layer(inner);
        let refused = service
            .ready()
            .await
            .unwrap()
            .call(request(Method::PATCH, false))
            .await;
        assert!(refused.unwrap_err().is::<Fenced>());
        service
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET, false))
            .await
            .unwrap();
        fence.renewed(Instant::now(), Duration::from_secs(10));
        service
            .ready()
            .await
            .unwrap()
            .call(request(Method::PATCH, false))
            .await
            .unwrap();
        assert_eq!(*sent.lock().unwrap(), [Method::GET, Method::PATCH]);
    }
}
