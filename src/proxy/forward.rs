//! Forwarding a reserved call and answering with the provider's response:
//! a stream goes through a [`MeteredBody`] that settles before its
//! terminal event; a plain body is read whole, settled, then sent.

use std::time::Duration;

use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::Response;
use http_body_util::BodyExt;
use tokio::time::{timeout_at, Instant};

use crate::body::{full, Body, BoxError};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::metered::MeteredBody;
use crate::settle::SettleTicket;
use crate::usage::parse_body_usage;

use super::admit::Admitted;

/// How a call failed after it was sent, before its usage was read.
enum Failure {
    /// The provider could not be reached: it saw nothing.
    NotConnected,
    /// The connection broke, or the body was cut.
    Broken,
    /// The upstream timeout passed.
    TimedOut,
}

pub async fn forward(
    gateway: &Gateway,
    admitted: Admitted<'_>,
    mut ticket: SettleTicket,
    exec_id: &str,
) -> Result<Response<Body>, GatewayError> {
    let Admitted {
        call,
        provider,
        estimate,
        upstream,
        ..
    } = admitted;
    let provider = provider.name.as_str();
    let timeout = gateway.config.server.upstream_timeout;
    let deadline = Instant::now() + timeout;

    let response = match timeout_at(deadline, gateway.client.request(upstream)).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(%exec_id, %provider, %error, "provider unreachable");
            let failure = if error.is_connect() {
                Failure::NotConnected
            } else {
                Failure::Broken
            };
            return Err(cut(ticket, failure, provider, timeout).await);
        }
        Err(_) => return Err(cut(ticket, Failure::TimedOut, provider, timeout).await),
    };

    let (mut head, body) = response.into_parts();
    crate::upstream::strip_response_headers(&mut head.headers);
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
            return Err(cut(ticket, Failure::Broken, provider, timeout).await);
        }
        Err(_) => return Err(cut(ticket, Failure::TimedOut, provider, timeout).await),
    };
    let settling = match parse_body_usage(call.api.usage_kind(), &body) {
        Some(reported) => ticket.settle_reported(reported),
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

/// Settles a call that failed after it was sent — nothing if the provider
/// never saw it, else by how far it got — and says what the client is
/// told.
async fn cut(
    mut ticket: SettleTicket,
    failure: Failure,
    provider: &str,
    timeout: Duration,
) -> GatewayError {
    let provider = provider.to_owned();
    match failure {
        Failure::NotConnected => {
            ticket.settle_nothing().await;
            GatewayError::UpstreamUnreachable { provider }
        }
        Failure::Broken => {
            ticket.settle_unseen().await;
            GatewayError::UpstreamUnreachable { provider }
        }
        Failure::TimedOut => {
            ticket.settle_unseen().await;
            GatewayError::UpstreamTimeout {
                provider,
                secs: timeout.as_secs(),
            }
        }
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}
