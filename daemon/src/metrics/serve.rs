//! `GET /metrics` over plain HTTP/1.1 on `metrics_listen`, with hyper (in
//! the tree already through bollard and kube). Anything else is 404 (405
//! for another method on `/metrics`). Loopback is the intended address:
//! the figures say what runs on the host, so reaching them is for the
//! host's own scraper or a tunnel the operator sets up.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use super::Metrics;
use crate::provisioner::Driver;

/// Scrapers served at once; one more waits for a slot.
const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The OpenMetrics text format's media type (what prometheus-client writes).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `metrics_listen` before anything starts, so a bad or taken
/// address stops the daemon with the key named.
pub fn bind(address: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("cannot serve metrics on metrics_listen = \"{address}\""))?;
    listener
        .set_nonblocking(true)
        .context("metrics_listen: cannot make the listener non-blocking")?;
    Ok(listener)
}

/// Serves scrapes until the task is dropped.
pub async fn serve(
    listener: std::net::TcpListener,
    metrics: Arc<Metrics>,
    driver: Arc<dyn Driver>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "cannot serve metrics");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "metrics accept failed");
                continue;
            }
        };
        let (metrics, driver) = (metrics.clone(), driver.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let (metrics, driver) = (metrics.clone(), driver.clone());
                async move { Ok::<_, Infallible>(answer(request, &metrics, driver.as_ref()).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "metrics connection ended");
            }
            drop(slot);
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    metrics: &Metrics,
    driver: &dyn Driver,
) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_default()
    };
    if request.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".to_string(),
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET /metrics\n".to_string(),
        );
    }
    let census = match driver.census().await {
        Ok(census) => Some(census),
        Err(error) => {
            tracing::debug!(%error, "metrics: cannot count the sandboxes");
            None
        }
    };
    reply(
        StatusCode::OK,
        CONTENT_TYPE,
        metrics.encode(census.as_ref()),
    )
}
