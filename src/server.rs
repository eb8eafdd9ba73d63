//! The gateway's HTTP server: accepts connections on a listener it is
//! given and routes each request — proxied calls to [`crate::proxy`], the
//! gateway's own endpoints to [`crate::endpoints`]. On shutdown it stops
//! accepting and waits for every in-flight call to finish and settle.
//!
//! Connections are bounded: beyond `server.max_connections` a new one is
//! closed at once, and [`watch`] closes one that is slow to send its
//! request head or idle too long.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::api::Api;
use crate::body::{close_connection, drain, Body};
use crate::endpoints;
use crate::error::{GatewayError, Shape};
use crate::gateway::Gateway;
use crate::proxy::count_tokens;

mod watch;

use watch::{Limits, Tracked, Watch, Watched};

/// How long shutdown waits for in-flight calls before it cuts them: a
/// little less than the 30 s an orchestrator usually grants, so every cut
/// call can still be settled before the process is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// How long shutdown then waits for settlements still in flight.
const SETTLE_DRAIN: Duration = Duration::from_secs(8);

/// Raises the soft limit on open files to the hard limit, so that
/// `server.max_connections` rather than the common default of 1,024
/// bounds the connections served, and logs the limit in force.
pub fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(limit, "open files limit (RLIMIT_NOFILE)"),
        Err(error) => tracing::warn!(%error, "could not raise the open files limit"),
    }
}

/// Serves until `shutdown` completes. Then it stops accepting, lets
/// in-flight calls finish for up to `grace`, cuts the rest (each settles
/// what it saw) and waits for their settlements.
pub async fn run(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    run_with_grace(listener, gateway, shutdown, SHUTDOWN_GRACE).await
}

pub async fn run_with_grace(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let server = &gateway.config.server;
    let limits = Limits {
        header_read: server.header_read_timeout,
        idle: server.idle_timeout,
    };
    let slots = Arc::new(Semaphore::new(server.max_connections));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(error) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        // Beyond the limit, a connection is closed at once: the file
        // descriptors left serve the calls (and health checks) under way.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection limit reached: closing a new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        let watch = Watch::new();
        let calls = watch.clone();
        let service = service_fn(move |request| {
            let gateway = gateway.clone();
            let call = calls.call();
            // Boxed, because hyper keeps a connection's slot for its
            // in-flight call, sized for the call's future, as long as the
            // connection lives: the call's state (some 6 KB) is then freed
            // once the response head is out, not held through a stream.
            Box::pin(async move {
                let response = route(&gateway, request).await;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, call)))
            })
        });
        let io = TokioIo::new(Watched::new(stream, watch.clone()));
        let connection = builder.serve_connection(io, service).into_owned();
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            let _slot = slot;
            tokio::select! {
                ended = connection => if let Err(error) = ended {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                },
                reason = watch.expired(limits) => {
                    tracing::debug!(%peer, reason, "closing connection");
                }
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for in-flight calls to finish");
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = connections.len(),
            "calls still running after {grace:?}: cutting them (each is settled as seen)"
        );
        connections.abort_all();
    }
    while connections.join_next().await.is_some() {}
    let unsettled = gateway.settler.drained(SETTLE_DRAIN).await;
    if unsettled > 0 {
        tracing::error!(
            unsettled,
            "settlements still unfinished at exit; their reservations will expire"
        );
    }
    Ok(())
}

async fn route(gateway: &Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let route = route_label(request.uri().path());
    let response = respond(gateway, request).await;
    gateway.metrics.count_request(route, response.status());
    response
}

/// The `route` label of a path: one of the gateway's own, or `other`, so
/// the label's values stay few whatever clients ask for.
fn route_label(path: &str) -> &'static str {
    if let Some(api) = Api::from_path(path) {
        return api.path();
    }
    match path {
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1/budget" => "/v1/budget",
        count_tokens::PATH => count_tokens::PATH,
        _ if model_id(path).is_some() => "/v1/models/{id}",
        _ => "other",
    }
}

/// The model id of a `/v1/models/{id}` path: the rest of the path, which
/// may hold `/` (some providers' model ids do).
fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/models/").filter(|id| !id.is_empty())
}

async fn respond(gateway: &Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    if request.method() == Method::POST {
        if let Some(api) = Api::from_path(path) {
            return crate::proxy::handle(gateway, api, request).await;
        }
        if path == count_tokens::PATH {
            return count_tokens::handle(gateway, request).await;
        }
    }
    let shape = caller_shape(&request);
    let (parts, mut body) = request.into_parts();
    let headers = &parts.headers;
    let path = parts.uri.path();
    let result = match (&parts.method, path) {
        (&Method::GET, "/healthz") => Ok(endpoints::health::healthz()),
        (&Method::GET, "/readyz") => Ok(endpoints::health::readyz(gateway).await),
        (&Method::GET, "/metrics") => Ok(endpoints::health::scrape(gateway).await),
        (&Method::GET, "/v1/models") => endpoints::models::list(gateway, headers, shape),
        (&Method::GET, "/v1/budget") => endpoints::budget::show(gateway, headers).await,
        (&Method::GET, path) if model_id(path).is_some() => {
            let id = model_id(path).unwrap_or_default();
            endpoints::models::retrieve(gateway, headers, shape, id)
        }
        (method, path) => Err(GatewayError::NotFound {
            method: method.to_string(),
            path: path.to_owned(),
        }),
    };
    let mut response = result.unwrap_or_else(|error| error.into_response(shape, ""));
    // None of these routes reads a body: drain one a client sent anyway, so
    // that its next request on the connection is read as one.
    if !drain(&mut body).await {
        close_connection(&mut response);
    }
    response
}

/// Anthropic's SDK always sends `anthropic-version`; anything else is
/// answered in OpenAI's shape.
fn caller_shape<B>(request: &Request<B>) -> Shape {
    if request.headers().contains_key("anthropic-version")
        || request.uri().path().starts_with("/v1/messages")
    {
        Shape::Anthropic
    } else {
        Shape::OpenAi
    }
}
