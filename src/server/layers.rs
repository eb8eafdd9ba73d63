//! The tower-http layers around the routes.
//!
//! Around every request ([`every_request`]), outermost first:
//!
//! - `Authorization`, `Proxy-Authorization`, `x-api-key`, `x-goog-api-key`
//!   and `Cookie` (and a response's `Set-Cookie`) are marked sensitive, so
//!   no layer and no `Debug` print of a request shows them;
//! - a client's `x-tollgate-request-id` is dropped and a fresh one minted
//!   (a UUIDv7): the id names the call's reservation and ledger entry,
//!   which a client must not choose; it is returned on every response;
//! - a client's own `x-request-id` is left as it is: the access log
//!   shows it beside the gateway's id. It is not echoed, since a proxied
//!   response's `x-request-id` is the provider's id of the call (OpenAI's
//!   SDK reads it as the response's `_request_id`);
//! - a span named `request`, with the request id, method and path, holds
//!   every log line written while the request is served; a `debug` span
//!   (see [`RequestSpan`]), on with
//!   `RUST_LOG=info,tollgate::server::layers=debug`.
//!
//! Around some routes: [`cors`] on the proxied and the gateway's own `/v1`
//! routes when `server.cors_allowed_origins` is set; compression and a
//! timeout on the admin routes ([`admin`]). Neither compression nor a
//! timeout wraps a proxied call: its response is the provider's, streamed
//! through as it comes, and `server.upstream_timeout_secs` bounds it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, SET_COOKIE};
use http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::timeout::Timeout;
use tower::util::MapRequest;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestId, PropagateRequestId, RequestId, SetRequestId};
use tower_http::sensitive_headers::{
    SetSensitiveRequestHeaders, SetSensitiveRequestHeadersLayer, SetSensitiveResponseHeaders,
    SetSensitiveResponseHeadersLayer,
};
use tower_http::trace::{MakeSpan, Trace, TraceLayer};
use tracing::Span;
use uuid::Uuid;

use crate::access::REQUEST_ID;
use crate::body::Body;
use crate::config::CorsOrigins;
use crate::gateway::Gateway;

// === Every request ===

/// A service wrapped in the layers every request goes through.
pub type EveryRequest<S> = SetSensitiveRequestHeaders<
    SetSensitiveResponseHeaders<
        MapRequest<
            SetRequestId<
                PropagateRequestId<
                    Trace<
                        S,
                        SharedClassifier<ServerErrorsAsFailures>,
                        RequestSpan,
                        (),
                        (),
                        (),
                        (),
                        (),
                    >,
                >,
                MintRequestId,
            >,
            fn(Request<Incoming>) -> Request<Incoming>,
        >,
    >,
>;

/// `inner` behind the layers every request goes through.
pub fn every_request<S>(inner: S) -> EveryRequest<S> {
    let api_key = HeaderName::from_static("x-api-key");
    let google_key = HeaderName::from_static("x-goog-api-key");
    let azure_key = HeaderName::from_static("api-key");
    let sensitive: Arc<[HeaderName]> = Arc::new([
        AUTHORIZATION,
        PROXY_AUTHORIZATION,
        COOKIE,
        api_key,
        google_key,
        azure_key,
    ]);
    // The access log (`crate::access`) is the one line per call; the
    // layer's own request, response and failure events would repeat it.
    let trace = TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_request(())
        .on_response(())
        .on_body_chunk(())
        .on_eos(())
        .on_failure(());
    ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::from_shared(sensitive))
        .layer(SetSensitiveResponseHeadersLayer::new([SET_COOKIE]))
        .map_request(drop_client_request_id as fn(Request<Incoming>) -> Request<Incoming>)
        .layer(tower_http::request_id::SetRequestIdLayer::new(
            REQUEST_ID,
            MintRequestId,
        ))
        .layer(tower_http::request_id::PropagateRequestIdLayer::new(
            REQUEST_ID,
        ))
        .layer(trace)
        .service(inner)
}

/// The request id is the gateway's to give.
fn drop_client_request_id(mut request: Request<Incoming>) -> Request<Incoming> {
    request.headers_mut().remove(REQUEST_ID);
    request
}

/// Mints the call's id: a UUIDv7, as the budget protocol's `exec_id`.
#[derive(Clone, Copy, Debug)]
pub struct MintRequestId;

impl MakeRequestId for MintRequestId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        let mut text = Uuid::encode_buffer();
        let id = Uuid::now_v7().hyphenated().encode_lower(&mut text);
        HeaderValue::from_str(id).ok().map(RequestId::new)
    }
}

/// Names the span every log line written while serving a request is in.
#[derive(Clone, Copy, Debug)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &Request<B>) -> Span {
        let id = request
            .headers()
            .get(REQUEST_ID)
            .and_then(|id| id.to_str().ok())
            .unwrap_or_default();
        // At debug level: at the default `info` the span would cost every
        // call its making, entering and closing, for lines that already
        // name their call (the access line, `exec_id` fields).
        tracing::debug_span!(
            "request",
            request_id = id,
            method = %request.method(),
            path = request.uri().path(),
        )
    }
}

// === CORS ===

/// Request headers a browser may send cross-origin: those the official
/// OpenAI and Anthropic SDKs send (their `openai-*`, `anthropic-*` and
/// `x-stainless-*` headers, by name: CORS has no wildcard for a prefix),
/// and the gateway's own.
const ALLOWED_HEADERS: [&str; 28] = [
    "authorization",
    "x-api-key",
    "content-type",
    "accept",
    "idempotency-key",
    "x-request-id",
    "x-tollgate-run",
    "x-tollgate-run-cap-usd",
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "x-stainless-arch",
    "x-stainless-async",
    "x-stainless-custom-poll-interval",
    "x-stainless-helper",
    "x-stainless-helper-method",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-poll-helper",
    "x-stainless-read-timeout",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
];

/// Response headers a page's script may read.
const EXPOSED_HEADERS: [&str; 8] = [
    "x-tollgate-request-id",
    "x-tollgate-cost-usd-micros",
    "x-tollgate-budget-remaining-usd-micros",
    "x-tollgate-output-limit-clamped",
    "x-request-id",
    "x-should-retry",
    "retry-after",
    "request-id",
];

/// How long a browser may reuse a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The CORS layer `origins` call for; `None` (CORS off) without any.
/// A preflight (`OPTIONS` with `Access-Control-Request-Method`) is
/// answered by the layer itself: no key, no body, nothing reserved.
/// Credentials (cookies) are not allowed: gateway keys travel in headers.
pub fn cors(origins: Option<&CorsOrigins>) -> Option<CorsLayer> {
    let allow_origin = match origins? {
        CorsOrigins::Any => AllowOrigin::any(),
        CorsOrigins::List(origins) => AllowOrigin::list(origins.iter().cloned()),
    };
    let names = |names: &[&'static str]| -> Vec<HeaderName> {
        names
            .iter()
            .map(|name| HeaderName::from_static(name))
            .collect()
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers(names(&ALLOWED_HEADERS))
            .expose_headers(names(&EXPOSED_HEADERS))
            .max_age(PREFLIGHT_MAX_AGE),
    )
}

// === Admin ===

/// Answers an admin request: compressed (gzip or brotli, as the client
/// accepts; the console's files and the JSON answers shrink several
/// times), and cut after `server.admin_timeout_secs` with a 503 in the
/// admin API's error shape.
pub async fn admin(gateway: Arc<Gateway>, request: Request<Incoming>) -> Response<Body> {
    let limit = gateway.config.server.admin_timeout;
    let handler = tower::service_fn(move |request: Request<Incoming>| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(crate::admin::handle(&gateway, request).await) }
    });
    let timed = Timeout::new(handler, limit);
    match CompressionLayer::new().layer(timed).oneshot(request).await {
        Ok(response) => response.map(|body| body.boxed_unsync()),
        // The handler never fails: the only error is the timeout's.
        Err(_) => crate::admin::timed_out(limit),
    }
}
