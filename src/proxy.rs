//! One proxied call, from the client's request to its settlement:
//!
//! 1. authenticate the gateway key;
//! 2. read the body (bounded) and check it, setting an output limit if the
//!    client gave none;
//! 3. find the model's price and provider, and the key's right to it;
//! 4. estimate the call's upper bound and reserve it against every cap
//!    (refused with 409 while a request with the same `Idempotency-Key`
//!    under the same gateway key is still in flight);
//! 5. forward it with the provider's credential;
//! 6. settle the actual cost — before the body of a plain response, before
//!    the terminal event of a stream (see [`crate::metered`]).
//!
//! Every error before step 4 costs nothing and forwards nothing. From step
//! 4 on, a [`SettleTicket`] guarantees exactly one settlement on every path.
//! With the store down and `on_store_error = "allow"`, the call goes the
//! same way unmetered.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use tokio::time::{timeout_at, Instant};
use uuid::Uuid;

use crate::api::{Api, Call};
use crate::budget::{ClaimedReserve, ReserveOutcome, ReserveRequest};
use crate::config::{KeyConfig, OnStoreError, ProviderKind};
use crate::error::GatewayError;
use crate::estimate::{estimate, TokenCounter};
use crate::metered::MeteredBody;
use crate::metrics::StoreOp;
use crate::server::{full, Body, BoxError, Gateway};
use crate::settle::SettleTicket;
use crate::upstream;
use crate::usage::parse_body_usage;

/// Output allowance for a model whose price entry gives no maximum.
const DEFAULT_OUTPUT_LIMIT: u64 = 4_096;

/// Bodies larger than this are estimated on a blocking thread: counting the
/// tokens of a 100k-token prompt takes about 10 ms, which would stall
/// one of the runtime's workers and every call it serves.
const BLOCKING_ESTIMATE_BYTES: usize = 64 * 1024;

/// The header a client names a request with, so that a repeat sent while
/// the first is still in flight is refused instead of paid twice. It is
/// forwarded to the provider unchanged.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest `Idempotency-Key` accepted (as long as Stripe's and
/// OpenAI's).
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

pub async fn handle(
    gateway: &Arc<Gateway>,
    api: Api,
    request: Request<Incoming>,
) -> Response<Body> {
    let exec_id = Uuid::now_v7().to_string();
    let mut response = match proxy(gateway, api, request, &exec_id).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(%exec_id, status = error.status().as_u16(), %error, "refused");
            return error.into_response(api.shape(), &exec_id);
        }
    };
    if let Ok(id) = HeaderValue::from_str(&exec_id) {
        response.headers_mut().insert("x-tollgate-request-id", id);
    }
    response
}

async fn proxy(
    gateway: &Gateway,
    api: Api,
    request: Request<Incoming>,
    exec_id: &str,
) -> Result<Response<Body>, GatewayError> {
    let (parts, body) = request.into_parts();
    let key = gateway.keys.authenticate(&parts.headers)?;
    let claim = idempotency_claim(&parts.headers, &key.id)?;
    let body = read_body(
        &parts.headers,
        body,
        gateway.config.server.max_request_bytes,
    )
    .await?;
    let body_len = body.len();
    let prices = &gateway.config.prices;
    let call = Call::parse(api, body, |model| {
        prices
            .get(model)
            .and_then(|price| price.max_output_tokens)
            .unwrap_or(DEFAULT_OUTPUT_LIMIT)
    })?;
    if !key.allows_model(&call.model) {
        return Err(GatewayError::ModelNotAllowed {
            model: call.model,
            key: key.id.clone(),
        });
    }
    let unknown = || GatewayError::UnknownModel {
        model: call.model.clone(),
    };
    let price = prices.get(&call.model).ok_or_else(unknown)?;
    let provider = gateway
        .config
        .provider_for(&call.model)
        .ok_or_else(unknown)?;
    check_api_matches(api, provider.kind, &call.model)?;
    check_priced_options(api, &parts.headers, &call)?;
    let provider_key =
        provider
            .api_key
            .as_ref()
            .ok_or_else(|| GatewayError::ProviderKeyMissing {
                provider: provider.name.clone(),
                env: provider.api_key_env.clone(),
            })?;

    let counter = TokenCounter::for_model(provider.kind, &call.model);
    let (call, estimate) = if body_len > BLOCKING_ESTIMATE_BYTES {
        let price = price.clone();
        let counting = tokio::task::spawn_blocking(move || {
            let estimate = estimate(&call, &price, counter);
            (call, estimate)
        });
        counting
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    } else {
        let estimate = estimate(&call, price, counter);
        (call, estimate)
    };
    // Built before reserving: a request that cannot be sent costs nothing.
    let upstream_request = upstream::request(
        provider,
        provider_key,
        api,
        &parts.headers,
        call.forward_body(),
    )
    .map_err(|error| {
        tracing::error!(provider = %provider.name, %error, "could not build the provider request");
        GatewayError::UpstreamUnreachable {
            provider: provider.name.clone(),
        }
    })?;
    let mut ticket = SettleTicket::new(gateway, exec_id, key, &call.model, price, estimate);
    match reserve(gateway, key, exec_id, estimate.amount, claim.as_deref()).await {
        Ok(true) => {}
        // The store is down and the operator chose to let calls through
        // unmetered (each one is logged): nothing to settle.
        Ok(false) => ticket.disarm(),
        Err(error) => {
            // Nothing is sent. Denied or a duplicate, nothing was reserved.
            // When the store failed, a reserve may have landed with its
            // answer lost: the ticket, dropped armed, settles nothing
            // against it in the background, which frees its headroom at
            // once rather than at its deadline (and finds nothing to
            // release when it never landed).
            if !matches!(error, GatewayError::StoreUnavailable) {
                ticket.disarm();
            }
            return Err(error);
        }
    }
    ticket.sent(call.stream);

    let timeout = gateway.config.server.upstream_timeout;
    let deadline = Instant::now() + timeout;
    let response = match timeout_at(deadline, gateway.client.request(upstream_request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(%exec_id, provider = %provider.name, %error, "provider unreachable");
            if error.is_connect() {
                // Nothing reached the provider: nothing to pay.
                ticket.settle_nothing().await;
            } else {
                ticket.settle_unseen().await;
            }
            return Err(GatewayError::UpstreamUnreachable {
                provider: provider.name.clone(),
            });
        }
        Err(_) => {
            ticket.settle_unseen().await;
            return Err(GatewayError::UpstreamTimeout {
                provider: provider.name.clone(),
                secs: timeout.as_secs(),
            });
        }
    };

    let (mut head, body) = response.into_parts();
    upstream::strip_response_headers(&mut head.headers);
    if !head.status.is_success() {
        // The provider refused the call: it bills nothing, and its error
        // reaches the client unchanged.
        ticket.settle_nothing().await;
        return Ok(Response::from_parts(
            head,
            body.map_err(BoxError::from).boxed_unsync(),
        ));
    }
    if call.stream && is_event_stream(&head.headers) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let metered = MeteredBody::new(body, call.stream_kind(), ticket, remaining);
        return Ok(Response::from_parts(head, metered.boxed_unsync()));
    }

    let body = match timeout_at(deadline, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) => {
            tracing::warn!(%exec_id, %error, "provider response cut");
            ticket.settle_unseen().await;
            return Err(GatewayError::UpstreamUnreachable {
                provider: provider.name.clone(),
            });
        }
        Err(_) => {
            ticket.settle_unseen().await;
            return Err(GatewayError::UpstreamTimeout {
                provider: provider.name.clone(),
                secs: timeout.as_secs(),
            });
        }
    };
    let settling = match parse_body_usage(api.usage_kind(), &body) {
        Some(usage) => ticket.settle(usage, false),
        // A response without usage is charged its full upper bound.
        None => ticket.settle(estimate.fallback_usage(estimate.output_tokens), true),
    };
    let outcome = match settling {
        Some(settling) => settling.await,
        None => None,
    };
    if let Some(outcome) = outcome {
        head.headers.insert(
            "x-tollgate-cost-usd-micros",
            HeaderValue::from(outcome.actual),
        );
        head.headers.insert(
            "x-tollgate-budget-remaining-usd-micros",
            HeaderValue::from(outcome.key_remaining),
        );
    }
    Ok(Response::from_parts(head, full(body)))
}

/// Reads the request body, refusing one over `limit` before reading it when
/// its length is declared.
async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(GatewayError::BodyTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(GatewayError::BodyTooLarge { limit })
        }
        Err(error) => Err(GatewayError::BadRequest {
            message: format!("could not read the request body: {error}"),
            param: None,
        }),
    }
}

/// The claim the request's `Idempotency-Key` makes, if it sends one: the
/// hex SHA-256 of the gateway key's id, a NUL byte and the header value,
/// so the same header under another gateway key is another claim (key ids
/// never contain NUL). The header must appear once, with 1 to 255 visible
/// ASCII characters.
fn idempotency_claim(headers: &HeaderMap, key_id: &str) -> Result<Option<String>, GatewayError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |problem: String| GatewayError::BadRequest {
        message: format!("invalid Idempotency-Key header: {problem}"),
        param: None,
    };
    if values.next().is_some() {
        return Err(invalid("send it once".to_owned()));
    }
    let value = value.as_bytes();
    if value.is_empty() || value.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(invalid(format!(
            "it must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes long, not {}",
            value.len()
        )));
    }
    if !value.iter().all(u8::is_ascii_graphic) {
        return Err(invalid(
            "use visible ASCII characters only, without spaces".to_owned(),
        ));
    }
    let mut hasher = Sha256::new();
    hasher.update(key_id.as_bytes());
    hasher.update([0]);
    hasher.update(value);
    Ok(Some(hex::encode(hasher.finalize())))
}

/// Reserves the call's upper bound, under the request's idempotency claim
/// when it has one. `Ok(false)`: the store is down and the operator opted
/// to let calls through (`on_store_error = "allow"`).
async fn reserve(
    gateway: &Gateway,
    key: &KeyConfig,
    exec_id: &str,
    amount: u64,
    claim: Option<&str>,
) -> Result<bool, GatewayError> {
    let (key_scope, org_scope) = gateway.scopes(key);
    let request = ReserveRequest {
        exec_id: exec_id.to_owned(),
        key: key_scope,
        org: org_scope,
        amount,
        ttl: gateway.config.store.reservation_ttl,
    };
    let reserving = async {
        match claim {
            Some(claim) => gateway.store.reserve_claimed(&request, claim).await,
            None => gateway
                .store
                .reserve(&request)
                .await
                .map(ClaimedReserve::Ran),
        }
    };
    let outcome = match gateway.metrics.time(StoreOp::Reserve, reserving).await {
        // The first request under this claim is still in flight: nothing
        // was charged, and nothing is sent.
        Ok(ClaimedReserve::Duplicate) => return Err(GatewayError::IdempotencyConflict),
        Ok(ClaimedReserve::Ran(outcome)) => Ok(outcome),
        Err(error) => Err(error),
    };
    gateway.metrics.count_reserve(&outcome);
    match outcome {
        Ok(ReserveOutcome::Reserved) => Ok(true),
        Ok(ReserveOutcome::Denied(denial)) => Err(GatewayError::BudgetExceeded(denial)),
        Err(error) => match gateway.config.store.on_store_error {
            OnStoreError::Reject => {
                tracing::error!(%exec_id, %error, "budget store error: call refused");
                Err(GatewayError::StoreUnavailable)
            }
            OnStoreError::Allow => {
                tracing::error!(%exec_id, key = %key.id, amount_usd_micros = amount, %error,
                    "budget store error: call let through UNMETERED (on_store_error = \"allow\")");
                Ok(false)
            }
        },
    }
}

/// An OpenAI-shaped route can only reach an OpenAI-compatible provider, and
/// `/v1/messages` only Anthropic.
fn check_api_matches(api: Api, kind: ProviderKind, model: &str) -> Result<(), GatewayError> {
    let (expected, hint) = match kind {
        ProviderKind::Anthropic => (Api::Messages == api, "/v1/messages"),
        ProviderKind::OpenAi => (
            Api::Messages != api,
            "/v1/chat/completions, /v1/responses, /v1/completions or /v1/embeddings",
        ),
    };
    if expected {
        Ok(())
    } else {
        Err(GatewayError::BadRequest {
            message: format!(
                "model `{model}` is not served on {}: call {hint}",
                api.path()
            ),
            param: Some("model"),
        })
    }
}

/// Refuses options the providers bill at rates the price table does not
/// hold, which would charge the call less than it costs: OpenAI's priority
/// tier and Anthropic's 1M-context beta.
fn check_priced_options(api: Api, headers: &HeaderMap, call: &Call) -> Result<(), GatewayError> {
    if call.body.get("service_tier").and_then(|v| v.as_str()) == Some("priority") {
        return Err(GatewayError::BadRequest {
            message: "service_tier \"priority\" is billed at rates this gateway does not price; \
                      use \"auto\", \"default\" or \"flex\""
                .to_owned(),
            param: Some("service_tier"),
        });
    }
    if api != Api::Messages {
        return Ok(());
    }
    if has_hour_long_cache(&call.body) {
        return Err(GatewayError::BadRequest {
            message: "cache_control ttl \"1h\" is billed at a cache-write rate this gateway \
                      does not price; use the default 5-minute cache"
                .to_owned(),
            param: None,
        });
    }
    let long_context = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("context-1m"));
    if long_context {
        return Err(GatewayError::BadRequest {
            message: "the anthropic-beta context-1m option is billed at rates this gateway does \
                      not price; remove it from the anthropic-beta header"
                .to_owned(),
            param: None,
        });
    }
    Ok(())
}

/// Whether any `cache_control` in the body asks for Anthropic's 1-hour
/// cache, whose writes cost twice the input price instead of 1.25 times.
fn has_hour_long_cache(body: &serde_json::Map<String, serde_json::Value>) -> bool {
    fn walk(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::Array(items) => items.iter().any(walk),
            serde_json::Value::Object(map) => map.iter().any(|(key, value)| {
                (key == "cache_control" && value.get("ttl").and_then(|t| t.as_str()) == Some("1h"))
                    || walk(value)
            }),
            _ => false,
        }
    }
    body.values().any(walk)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}
