//! The gateway's HTTP server: accepts connections on the listeners it is
//! given and routes each request — proxied calls to [`crate::proxy`], the
//! admin API to [`crate::admin`] (on a listener of its own when
//! `server.admin_listen` is set), the gateway's own endpoints to
//! [`crate::endpoints`]. [`start`] is the one way to run it: it starts the
//! background tasks beside it (the sweep, the ledger drain, the keys and
//! orgs kept up to date with the store, alert delivery). On shutdown it
//! stops accepting and waits for every in-flight call to finish and
//! settle.
//!
//! Connections are bounded: at `server.max_connections` (or fewer, where
//! the open-files limit leaves less room), or when `accept` finds no file
//! descriptor left, the connections that have sent nothing longest are
//! closed to make room, and without one a new connection is closed at
//! once; [`watch`] closes one that is slow to send its request head or
//! idle too long.
//!
//! Every request goes through the tower-http [`layers`] (sensitive
//! headers, request id, a span), and every call but a health probe or a
//! scrape leaves one line in the access log ([`crate::access`]).

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::util::BoxCloneService;
use tower::ServiceExt;
use tower_http::cors::CorsLayer;

use crate::access::AccessRecord;
use crate::body::{close_connection, drain, Body};
use crate::directory::presented_key;
use crate::endpoints;
use crate::error::{GatewayError, Shape};
use crate::family::{self, Action};
use crate::gateway::Gateway;
use crate::provider::ProviderKind;
use crate::proxy::count_tokens;

mod layers;
mod start;
mod watch;

pub use start::{start, Options, Running};

use crate::budget::Upkeep;
use watch::{Limits, Open, Tracked, Watch, Watched};

/// How long shutdown waits for in-flight calls before it cuts them: a
/// little less than the 30 s an orchestrator usually grants, so every cut
/// call can still be settled before the process is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// How long shutdown then waits for settlements still in flight.
const SETTLE_DRAIN: Duration = Duration::from_secs(8);

/// File descriptors kept from client connections: for provider and store
/// connections, the SQLite files and the logs, so a call accepted can be
/// served.
const FD_RESERVE: u64 = 128;

/// How many silent connections are closed when `accept` finds no
/// descriptor left, and the pause before it tries again.
const SHED_BATCH: usize = 32;
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// How long a new connection waits for the slot of a silent one closed
/// for it.
const SHED_WAIT: Duration = Duration::from_millis(200);

/// Raises the soft limit on open files to the hard limit, so that
/// `server.max_connections` rather than the common default of 1,024
/// bounds the connections served, and logs the limit in force.
pub fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(limit, "open files limit (RLIMIT_NOFILE)"),
        Err(error) => tracing::warn!(%error, "could not raise the open files limit"),
    }
}

/// The client connections served at once: `max_connections`, or fewer
/// where the open-files limit leaves less room beside [`FD_RESERVE`].
fn connection_slots(max_connections: usize) -> usize {
    let Ok((soft, _)) = rlimit::Resource::NOFILE.get() else {
        return max_connections;
    };
    let room = usize::try_from(soft.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
    if room < max_connections {
        tracing::warn!(
            max_connections,
            open_files_limit = soft,
            serving = room,
            "the open files limit leaves room for fewer connections than \
             server.max_connections; raise the hard limit to serve them all"
        );
    }
    room.clamp(1, max_connections.max(1))
}

/// Where the gateway listens: every route on `main`, unless `admin` is
/// set; then the admin API is served there alone (with `/healthz`), and
/// not on `main`.
pub struct Listeners {
    pub main: TcpListener,
    pub admin: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    fn from(main: TcpListener) -> Listeners {
        Listeners { main, admin: None }
    }
}

/// Which routes a connection is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    All,
    /// The main listener beside an admin listener: no admin API.
    Public,
    /// The admin listener: the admin API and `/healthz`.
    Admin,
}

/// Serves until `shutdown` completes. Then it stops accepting, lets
/// in-flight calls finish for up to `grace`, cuts the rest (each settles
/// what it saw), waits for their settlements and flushes the store.
async fn serve(
    listeners: Listeners,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()> {
    let Listeners {
        main: listener,
        admin,
    } = listeners;
    let main_role = if admin.is_some() {
        Role::Public
    } else {
        Role::All
    };
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let server = &gateway.config.server;
    let limits = Limits {
        header_read: server.header_read_timeout,
        idle: server.idle_timeout,
    };
    let cors = layers::cors(server.cors_allowed_origins.as_ref());
    let slots = Arc::new(Semaphore::new(connection_slots(server.max_connections)));
    let open = Open::default();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (accepted, role) = tokio::select! {
            accepted = listener.accept() => (accepted, main_role),
            accepted = accept(admin.as_ref()) => (accepted, Role::Admin),
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(error) => {
                // Out of file descriptors and the like: free some from
                // connections that have sent nothing, back off, go on.
                let shed = open.shed_silent(SHED_BATCH);
                tracing::warn!(%error, shed, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // At the limit, the connection open longest without sending a
        // byte makes room; without one, the new connection is closed at
        // once: the descriptors left serve the calls under way.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            Err(_) if open.shed_silent(1) == 1 => {
                tokio::time::timeout(SHED_WAIT, slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            tracing::warn!(%peer, "connection limit reached: closing a new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let routes = Arc::new(Routes {
            gateway: gateway.clone(),
            cors: cors.clone(),
            role,
        });
        // Boxed: the layers' futures and bodies are then one type the
        // compiler can see is `Send`. Boxing also frees a call's state (some
        // 6 KB) once its response head is out: hyper keeps a connection's
        // slot for its in-flight call, sized for the call's future, as long
        // as the connection lives.
        let stack =
            BoxCloneService::new(layers::every_request(tower::service_fn(move |request| {
                let routes = routes.clone();
                async move { Ok::<_, Infallible>(routes.route(request).await) }
            })));
        let watch = Watch::new();
        open.add(&watch);
        let calls = watch.clone();
        let service = service_fn(move |request| {
            let stack = stack.clone();
            let call = calls.call();
            async move {
                let response = stack.oneshot(request).await?;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body.boxed_unsync(), call)))
            }
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
    drop(admin);
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
    // The file a stopped gateway leaves holds every call it answered, for
    // whoever reads it next; what it cannot take stays in the journal.
    if let Err(error) = gateway.store.flush().await {
        tracing::warn!(%error, "the store's last changes stay in its journal until it opens again");
    }
    Ok(())
}

/// The next connection on the admin listener; never, without one.
async fn accept(
    listener: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// What a connection's requests are routed with.
struct Routes {
    gateway: Arc<Gateway>,
    /// Around the proxied and the gateway's own `/v1` routes, if set.
    cors: Option<CorsLayer>,
    role: Role,
}

impl Routes {
    async fn route(&self, mut request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        let route = route_label(path);
        // Probes and scrapes come every few seconds and say nothing of the
        // calls: they would drown the access log.
        let access = match path {
            _ if !self.gateway.config.server.access_log => None,
            "/healthz" | "/readyz" | "/metrics" => None,
            _ => Some(AccessRecord::start(&request)),
        };
        if let Some(access) = &access {
            request.extensions_mut().insert(access.clone());
        }
        let response = self.respond(request).await;
        self.gateway.metrics.count_request(route, response.status());
        let Some(access) = access else {
            return response;
        };
        access.responded(response.status());
        let (head, body) = response.into_parts();
        Response::from_parts(head, access.watch(body).boxed_unsync())
    }

    async fn respond(&self, request: Request<Incoming>) -> Response<Body> {
        let (gateway, role) = (&self.gateway, self.role);
        let path = request.uri().path();
        if crate::admin::is_admin_path(path) && role != Role::Public {
            return layers::admin(gateway.clone(), request).await;
        }
        if role == Role::Admin && path != "/healthz" {
            let not_found = GatewayError::NotFound {
                method: request.method().to_string(),
                path: path.to_owned(),
            };
            return not_found.into_response(Shape::OpenAi, "");
        }
        match &self.cors {
            Some(cors) if path.starts_with("/v1/") => {
                with_cors(cors.clone(), gateway.clone(), request).await
            }
            _ => respond(gateway, request).await,
        }
    }
}

/// Answers `request` behind the CORS layer: a preflight is answered by
/// the layer, before any key is read.
async fn with_cors(
    cors: CorsLayer,
    gateway: Arc<Gateway>,
    request: Request<Incoming>,
) -> Response<Body> {
    let routes = tower::service_fn(move |request| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(respond(&gateway, request).await) }
    });
    match tower::Layer::layer(&cors, routes).oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The `route` label of a path: one of the gateway's own, or `other`, so
/// the label's values stay few whatever clients ask for.
fn route_label(path: &str) -> &'static str {
    if let Some(route) = family::route(path, None) {
        return route.label;
    }
    match path {
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1beta/models" => "/v1beta/models",
        "/v1/budget" => "/v1/budget",
        _ if crate::admin::is_admin_path(path) => "/admin",
        _ if model_id(path).is_some() => "/v1/models/{id}",
        _ if google_model_id(path).is_some() => "/v1beta/models/{id}",
        _ => "other",
    }
}

/// The model id of a `/v1/models/{id}` path: the rest of the path, which
/// may hold `/` (some providers' model ids do).
fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/models/").filter(|id| !id.is_empty())
}

/// The model id of Google's `/v1beta/models/{id}`.
fn google_model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1beta/models/")
        .filter(|id| !id.is_empty())
}

/// Answers a request on the proxied and the gateway's own routes.
async fn respond(gateway: &Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    if request.method() == Method::POST {
        if let Some(route) = family::route(path, request.uri().query()) {
            return match route.action {
                Action::Call => crate::proxy::handle(gateway, route, request).await,
                Action::CountTokens => count_tokens::handle(gateway, route, request).await,
            };
        }
    }
    let shape = caller_shape(&request);
    let (parts, mut body) = request.into_parts();
    let headers = &parts.headers;
    let path = parts.uri.path();
    let presented = match shape {
        Shape::Google => family::gateway_key(ProviderKind::Gemini, headers, &parts.uri),
        _ => presented_key(headers).map(Cow::Borrowed),
    };
    let presented = presented.as_deref();
    let result = match (&parts.method, path) {
        (&Method::GET, "/healthz") => Ok(endpoints::health::healthz()),
        (&Method::GET, "/readyz") => Ok(endpoints::health::readyz(gateway).await),
        (&Method::GET, "/metrics") => Ok(endpoints::health::scrape(gateway).await),
        (&Method::GET, "/v1/models" | "/v1beta/models") => {
            endpoints::models::list(gateway, presented, shape)
        }
        (&Method::GET, "/v1/budget") => endpoints::budget::show(gateway, headers).await,
        (&Method::GET, path) if model_id(path).or(google_model_id(path)).is_some() => {
            let id = model_id(path).or(google_model_id(path)).unwrap_or_default();
            endpoints::models::retrieve(gateway, presented, shape, id)
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

/// Anthropic's SDK always sends `anthropic-version`; Google's clients
/// call `/v1beta/` or send their key as `x-goog-api-key` or `?key=`;
/// anything else is answered in OpenAI's shape.
fn caller_shape<B>(request: &Request<B>) -> Shape {
    let uri = request.uri();
    let google_key = request.headers().contains_key("x-goog-api-key")
        || uri.query().is_some_and(|query| {
            form_urlencoded::parse(query.as_bytes()).any(|(name, _)| name == "key")
        });
    if request.headers().contains_key("anthropic-version") || uri.path().starts_with("/v1/messages")
    {
        Shape::Anthropic
    } else if google_key
        || uri.path().starts_with("/v1beta/")
        || uri.path().starts_with("/v1beta1/")
    {
        Shape::Google
    } else {
        Shape::OpenAi
    }
}
