//! The gateway's HTTP server: accepts connections on a listener it is
//! given, routes each request, and on shutdown stops accepting and waits
//! for every in-flight call to finish and settle. The [`Gateway`] also runs
//! the periodic sweep that releases expired reservations.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::api::Api;
use crate::auth::Keys;
use crate::budget::{tag_for, BudgetStore, Scope, ScopeKind, SweeperGuard};
use crate::config::{Config, KeyConfig};
use crate::error::{GatewayError, Shape};
use crate::metrics::{self, Metrics, StoreOp};
use crate::settle::BackgroundSettles;
use crate::upstream::{self, UpstreamClient};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body the gateway sends.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Everything a request needs, shared by all connections.
pub struct Gateway {
    pub config: Config,
    pub keys: Keys,
    pub store: BudgetStore,
    pub client: UpstreamClient,
    pub metrics: Arc<Metrics>,
    /// Settlements finishing after their request is gone; shutdown waits
    /// for them.
    pub background: BackgroundSettles,
    /// Every tag the configured scopes' budget data lives under (see
    /// [`budget_tags`]): what the sweep and the metrics read.
    pub budget_tags: Vec<String>,
}

/// Every hash tag budget data can live under: each org, and each key
/// without one (see [`tag_for`]).
pub fn budget_tags(config: &Config) -> Vec<String> {
    let orgs = config.orgs.iter().map(|org| org.id.clone());
    let keys_alone = config
        .keys
        .iter()
        .filter(|key| key.org.is_none())
        .map(|key| tag_for(None, &key.id));
    orgs.chain(keys_alone).collect()
}

impl Gateway {
    pub fn new(config: Config, store: BudgetStore) -> std::io::Result<Gateway> {
        for provider in &config.providers {
            if provider.api_key.is_none() {
                tracing::warn!(
                    provider = %provider.name,
                    "provider has no API key: set {} (calls routed to it are refused until then)",
                    provider.api_key_env
                );
            }
        }
        crate::estimate::warm_up();
        Ok(Gateway {
            keys: Keys::new(config.keys.clone()),
            client: upstream::client()?,
            store,
            metrics: Arc::new(Metrics::new()),
            background: BackgroundSettles::default(),
            budget_tags: budget_tags(&config),
            config,
        })
    }

    /// Starts the periodic sweep on the current Tokio runtime: every
    /// `every`, due reservations under [`Gateway::budget_tags`] are
    /// released, so headroom comes back even when no call arrives, and
    /// counted in the metrics. The task holds the gateway weakly and ends
    /// when the guard drops or the gateway does.
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> SweeperGuard {
        let gateway = Arc::downgrade(self);
        let task = tokio::spawn(sweep_periodically(gateway, every.max(MIN_SWEEP_INTERVAL)));
        SweeperGuard::new(task.abort_handle())
    }

    /// The scopes a key spends from: itself and its org.
    pub fn scopes(&self, key: &KeyConfig) -> (Scope, Option<Scope>) {
        let key_scope = Scope {
            kind: ScopeKind::Key,
            id: key.id.clone(),
            cap: key.cap,
            period: key.period,
        };
        let org_scope = key.org.as_ref().and_then(|id| {
            self.config
                .orgs
                .iter()
                .find(|o| &o.id == id)
                .map(|org| Scope {
                    kind: ScopeKind::Org,
                    id: org.id.clone(),
                    cap: org.cap,
                    period: org.period,
                })
        });
        (key_scope, org_scope)
    }
}

/// A zero interval would make the sweep task spin.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(1);

/// Tags one sweep visits. Each costs Redis a script call, so with more tags
/// than this they are swept in turn, this many per tick: a reserve expires
/// what is due in its own tag before it checks the caps, so only idle tags
/// wait longer, and the sweep's load on Redis stays bounded however many
/// keys the config holds.
const SWEEP_TAGS_PER_TICK: usize = 256;

async fn sweep_periodically(gateway: Weak<Gateway>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Logged when the sweep starts failing and when it recovers, not on
    // every tick while the store is down.
    let mut failing = false;
    let mut next_tag = 0;
    loop {
        ticks.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            break;
        };
        let tags = next_sweep_tags(&gateway.budget_tags, &mut next_tag);
        let swept = gateway
            .metrics
            .time(StoreOp::Sweep, gateway.store.sweep(tags))
            .await;
        match swept {
            Ok(released) => {
                gateway.metrics.count_expired(released);
                if failing {
                    failing = false;
                    tracing::info!("budget sweep works again");
                }
            }
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "budget sweep failed");
            }
            Err(_) => {}
        }
    }
}

/// The tags the next sweep visits: up to [`SWEEP_TAGS_PER_TICK`] from
/// `*next`, which moves on past them and starts over at the end.
fn next_sweep_tags<'a>(tags: &'a [String], next: &mut usize) -> &'a [String] {
    if *next >= tags.len() {
        *next = 0;
    }
    let end = tags.len().min(*next + SWEEP_TAGS_PER_TICK);
    let batch = &tags[*next..end];
    *next = end;
    batch
}

/// How long shutdown waits for in-flight calls before it cuts them: a
/// little less than the 30 s an orchestrator usually grants, so every cut
/// call can still be settled before the process is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// How long shutdown then waits for settlements still in flight.
const SETTLE_DRAIN: Duration = Duration::from_secs(8);

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
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        let service = service_fn(move |request| {
            let gateway = gateway.clone();
            // Boxed, because hyper keeps a connection's slot for its
            // in-flight call, sized for the call's future, as long as the
            // connection lives: the call's state (some 6 KB) is then freed
            // once the response head is out, not held through a stream.
            Box::pin(async move { Ok::<_, Infallible>(route(&gateway, request).await) })
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
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
    let unsettled = gateway.background.drained(SETTLE_DRAIN).await;
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
        _ => "other",
    }
}

async fn respond(gateway: &Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    if request.method() == Method::POST {
        if let Some(api) = Api::from_path(path) {
            return crate::proxy::handle(gateway, api, request).await;
        }
    }
    let shape = caller_shape(&request);
    let result = match (request.method(), path) {
        (&Method::GET, "/healthz") => Ok(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        (&Method::GET, "/readyz") => Ok(readiness(gateway).await),
        (&Method::GET, "/metrics") => Ok(scrape(gateway).await),
        (&Method::GET, "/v1/models") => models(gateway, &request, shape),
        (&Method::GET, "/v1/budget") => budget(gateway, &request).await,
        (method, path) => Err(GatewayError::NotFound {
            method: method.to_string(),
            path: path.to_owned(),
        }),
    };
    result.unwrap_or_else(|error| error.into_response(shape, ""))
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

pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn readiness(gateway: &Gateway) -> Response<Body> {
    let ping = gateway.metrics.time(StoreOp::Ping, gateway.store.ping());
    match ping.await {
        Ok(()) => json_response(
            StatusCode::OK,
            &json!({"status": "ready", "store": gateway.store.backend_name()}),
        ),
        Err(error) => {
            tracing::warn!(%error, "not ready");
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"status": "unavailable", "store": gateway.store.backend_name()}),
            )
        }
    }
}

/// `GET /metrics`: asks for no key, like `/healthz`, so it belongs on a
/// private network (see [`crate::metrics`]).
async fn scrape(gateway: &Gateway) -> Response<Body> {
    match gateway
        .metrics
        .scrape(&gateway.store, &gateway.budget_tags)
        .await
    {
        Ok(text) => {
            let mut response = Response::new(full(text));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            response
        }
        Err(error) => {
            tracing::error!(%error, "could not encode the metrics");
            let mut response = Response::new(full(""));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// The models the calling key may use: priced, routed to a provider, and on
/// the key's allow-list.
fn models(
    gateway: &Gateway,
    request: &Request<Incoming>,
    shape: Shape,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.keys.authenticate(request.headers())?;
    let available = gateway
        .config
        .prices
        .models()
        .filter(|(model, _)| key.allows_model(model))
        .filter_map(|(model, _)| gateway.config.provider_for(model).map(|p| (model, p)));
    let body = match shape {
        Shape::OpenAi => {
            let data: Vec<Value> = available
                .map(|(model, provider)| json!({"id": model, "object": "model", "created": 0, "owned_by": provider.name}))
                .collect();
            json!({"object": "list", "data": data})
        }
        Shape::Anthropic => {
            let data: Vec<Value> = available
                .map(|(model, _)| {
                    json!({"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z"})
                })
                .collect();
            let first = data.first().and_then(|m| m.get("id")).cloned();
            let last = data.last().and_then(|m| m.get("id")).cloned();
            json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// `GET /v1/budget`: the calling key's scopes in their current periods.
async fn budget(
    gateway: &Gateway,
    request: &Request<Incoming>,
) -> Result<Response<Body>, GatewayError> {
    let key = gateway.keys.authenticate(request.headers())?;
    let (key_scope, org_scope) = gateway.scopes(key);
    let key_json = scope_json(gateway, &key_scope).await?;
    let org_json = match &org_scope {
        Some(scope) => scope_json(gateway, scope).await?,
        None => Value::Null,
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"key": key_json, "org": org_json}),
    ))
}

async fn scope_json(gateway: &Gateway, scope: &Scope) -> Result<Value, GatewayError> {
    let state = gateway
        .metrics
        .time(StoreOp::State, gateway.store.scope_state(scope));
    let state = state.await.map_err(|error| {
        tracing::error!(%error, "budget store error");
        GatewayError::StoreUnavailable
    })?;
    let remaining = scope
        .cap
        .saturating_sub(state.spent.saturating_add(state.reserved));
    Ok(json!({
        "id": scope.id,
        "period": scope.period.as_str(),
        "period_id": state.period_id,
        "cap_usd_micros": scope.cap,
        "spent_usd_micros": state.spent,
        "reserved_usd_micros": state.reserved,
        "remaining_usd_micros": remaining,
        "resets_at": state.resets_at.map(|at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("tag-{i}")).collect()
    }

    #[test]
    fn many_tags_are_swept_in_turn() {
        let tags = tags(SWEEP_TAGS_PER_TICK * 2 + 1);
        let mut next = 0;
        let mut swept = Vec::new();
        for size in [SWEEP_TAGS_PER_TICK, SWEEP_TAGS_PER_TICK, 1] {
            let batch = next_sweep_tags(&tags, &mut next);
            assert_eq!(batch.len(), size);
            swept.extend_from_slice(batch);
        }
        assert_eq!(swept, tags);
        // Then the turn starts over.
        assert_eq!(
            next_sweep_tags(&tags, &mut next),
            &tags[..SWEEP_TAGS_PER_TICK]
        );
    }

    #[test]
    fn a_few_tags_are_all_swept_every_tick() {
        let tags = tags(3);
        let mut next = 0;
        for _ in 0..3 {
            assert_eq!(next_sweep_tags(&tags, &mut next), &tags[..]);
        }
        assert!(next_sweep_tags(&[], &mut next).is_empty());
    }
}
