//! The one pooled HTTP client to every provider, and the provider's
//! request for a checked call: the client's headers without its
//! credential (each family adds the provider's, in `family`) and
//! without anything that could change the response's encoding, so usage
//! can still be read.

mod payload;

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use payload::Payload;

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, Payload>;

/// Builds the shared client: TCP_NODELAY so streamed tokens are not held
/// back by Nagle's algorithm, HTTP/2 where the provider offers it.
pub fn client() -> Result<UpstreamClient, std::io::Error> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_keepalive(Some(Duration::from_secs(60)));
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(std::io::Error::other)?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    // An idle connection is dropped before most servers would drop it
    // (many close one idle for 30 to 60 s): a request written on a
    // connection the provider is closing at that moment may have reached
    // it, so it is charged and answered 502.
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(20))
        .build(https))
}

/// Headers never passed from the client to the provider: hop-by-hop
/// headers, the client's gateway credential, and content negotiation that
/// would compress the response past the usage reader.
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "host",
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "content-length",
    "accept-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "cookie",
    // The client's own OpenAI account scoping: the provider key is the
    // gateway's, and a mismatched organization or project is refused.
    "openai-organization",
    "openai-project",
];

/// The provider's `POST` request to `path_and_query` under `base_url`,
/// carrying the client's headers but no credential.
pub fn request_to(
    base_url: &Uri,
    path_and_query: &str,
    client_headers: &HeaderMap,
    body: Payload,
) -> Result<Request<Payload>, http::Error> {
    let mut request = Request::new(body);
    *request.method_mut() = Method::POST;
    *request.uri_mut() = provider_uri(base_url, path_and_query)?;
    let headers = request.headers_mut();
    let hop_by_hop = connection_options(client_headers);
    for (name, value) in client_headers {
        if !DROPPED_REQUEST_HEADERS.contains(&name.as_str())
            && !hop_by_hop.contains(name)
            && !is_gateway_header(name)
        {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    Ok(request)
}

/// The gateway's own request headers (`x-tollgate-…`, such as an agent
/// run's id and cap) speak to the gateway alone: none reaches the provider.
fn is_gateway_header(name: &HeaderName) -> bool {
    name.as_str().starts_with("x-tollgate-")
}

/// The headers a message's `Connection` header names: hop-by-hop, meant
/// for this connection only, never forwarded (RFC 9110 §7.6.1).
fn connection_options(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// `base_url` (which may carry a path prefix) joined with the API path.
fn provider_uri(base: &Uri, path: &str) -> Result<Uri, http::Error> {
    let prefix = base.path().trim_end_matches('/');
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(format!("{prefix}{path}").parse()?);
    Ok(Uri::from_parts(parts)?)
}

/// Removes the response headers not passed back to the client: hop-by-hop
/// headers, and the length of a body the gateway may change.
pub fn strip_response_headers(headers: &mut HeaderMap) {
    for name in connection_options(headers) {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
        header::TRAILER,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_base_path_and_api_path() {
        let uri = provider_uri(
            &"https://api.openai.com".parse().unwrap(),
            "/v1/chat/completions",
        )
        .unwrap();
        assert_eq!(uri, "https://api.openai.com/v1/chat/completions");
        let uri = provider_uri(
            &"http://127.0.0.1:9/openai/".parse().unwrap(),
            "/v1/embeddings",
        )
        .unwrap();
        assert_eq!(uri, "http://127.0.0.1:9/openai/v1/embeddings");
    }

    #[test]
    fn the_gateways_own_headers_stay_at_the_gateway() {
        let mut client = HeaderMap::new();
        client.insert("x-tollgate-run", HeaderValue::from_static("run-1"));
        client.insert("x-tollgate-run-cap-usd", HeaderValue::from_static("2.00"));
        client.insert("x-goog-api-key", HeaderValue::from_static("tg-key"));
        client.insert("x-request-tag", HeaderValue::from_static("kept"));
        let base = "http://127.0.0.1:9".parse().unwrap();
        let sent = request_to(&base, "/v1/chat/completions", &client, Payload::default()).unwrap();
        assert!(!sent
            .headers()
            .keys()
            .any(|n| n.as_str().starts_with("x-tollgate-") || n == "x-goog-api-key"));
        assert_eq!(sent.headers()["x-request-tag"], "kept");
    }

    #[test]
    fn headers_named_in_connection_are_not_passed_back() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("x-hop, Keep-Alive"),
        );
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("x-end", HeaderValue::from_static("2"));
        strip_response_headers(&mut headers);
        assert!(!headers.contains_key("x-hop"));
        assert!(!headers.contains_key(header::CONNECTION));
        assert_eq!(headers["x-end"], "2");
    }
}
