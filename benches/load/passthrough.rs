//! P: the bare pass-through proxy the gateway is measured against. It does
//! what any reverse proxy must — accept, read the request, forward it on a
//! pooled connection, stream the response back — and nothing else: no
//! key, no parsing, no budget.
//!
//! To be a fair baseline it is built like the gateway: the same server
//! (hyper-util's auto connection builder, TCP_NODELAY on every accepted
//! socket), the same upstream client (`tollgate::upstream::client()` itself:
//! hyper-util's legacy pooled client, TCP_NODELAY, the same keep-alive and
//! pool settings), the request body read whole before forwarding as the
//! gateway does, a multi-threaded tokio runtime, its own process.
//!
//! It runs as this benchmark's own binary started with
//! `--serve-passthrough UPSTREAM`, logs `listening on ADDR` on stderr like
//! the gateway, and exits when its stdin closes, i.e. when the benchmark
//! that started it is gone.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HOST};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tollgate::upstream::{self, UpstreamClient};

use crate::child::accept_until_stdin_closes;
use crate::error::BenchError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

/// Request headers that belong to one hop, not to the request.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

struct Proxy {
    client: UpstreamClient,
    upstream: SocketAddr,
}

/// Serves until stdin closes.
pub fn serve(upstream: SocketAddr) -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let proxy = Arc::new(Proxy {
            client: upstream::client()?,
            upstream,
        });
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        eprintln!("pass-through proxy listening on {}", listener.local_addr()?);
        let builder = auto::Builder::new(TokioExecutor::new());
        accept_until_stdin_closes(listener, |stream| {
            let proxy = proxy.clone();
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(forward(&proxy, request).await) }
            });
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::spawn(async move {
                let _ = connection.await;
            });
        })
        .await;
        Ok(())
    })
}

async fn forward(proxy: &Proxy, request: Request<Incoming>) -> Response<Body> {
    match try_forward(proxy, request).await {
        Ok(response) => response,
        Err(error) => {
            let mut response = Response::new(
                Full::new(Bytes::from(error.to_string()))
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

async fn try_forward(
    proxy: &Proxy,
    request: Request<Incoming>,
) -> Result<Response<Body>, BoxError> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let uri: Uri = format!("http://{}{path}", proxy.upstream).parse()?;
    let mut upstream_request = Request::new(tollgate::upstream::Payload::from(body));
    *upstream_request.method_mut() = parts.method;
    *upstream_request.uri_mut() = uri;
    let headers = upstream_request.headers_mut();
    for (name, value) in &parts.headers {
        if name != HOST && !HOP_BY_HOP.contains(&name.as_str()) {
            headers.append(HeaderName::clone(name), value.clone());
        }
    }
    let response = proxy.client.request(upstream_request).await?;
    let (mut head, body) = response.into_parts();
    upstream::strip_response_headers(&mut head.headers);
    Ok(Response::from_parts(
        head,
        body.map_err(BoxError::from).boxed_unsync(),
    ))
}
