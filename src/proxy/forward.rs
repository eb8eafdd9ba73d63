//! Forwarding a reserved call and answering with the provider's response:
//! a stream goes through a [`MeteredBody`] that settles before its
//! terminal event; a plain body is read whole, settled, then sent.
//!
//! A plain call is read to its end and settled from its usage even when
//! its client leaves first: the provider bills the whole call, and only its
//! usage says how much.

use std::time::Duration;

use http::header::HeaderValue;
use http::{Request, Response};
use http_body_util::BodyExt;
use tokio::time::{timeout_at, Instant};

use crate::api::Call;
use crate::body::{full, Body, BoxError};
use crate::error::GatewayError;
use crate::estimate::Estimate;
use crate::family::{self, body_usage, Route};
use crate::gateway::Gateway;
use crate::metered::MeteredBody;
use crate::settle::SettleTicket;
use crate::upstream::Payload;
use crate::upstream::UpstreamClient;

use super::admit::Admitted;

/// One call's exchange with its provider, owning all it needs, so that it
/// can outlive the client's request.
struct Exchange {
    client: UpstreamClient,
    request: Request<Payload>,
    call: Call,
    route: Route,
    estimate: Estimate,
    ticket: SettleTicket,
    provider: String,
    exec_id: String,
    timeout: Duration,
}

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
    ticket: SettleTicket,
    exec_id: &str,
) -> Result<Response<Body>, GatewayError> {
    let exchange = Exchange {
        client: gateway.client.clone(),
        request: admitted.upstream,
        call: admitted.call,
        route: admitted.route.clone(),
        estimate: admitted.estimate,
        ticket,
        provider: admitted.provider.name.clone(),
        exec_id: exec_id.to_owned(),
        timeout: gateway.config.server.upstream_timeout,
    };
    if exchange.call.stream {
        return exchange.run().await;
    }
    gateway.settler.unabandoned(exchange.run()).await
}

impl Exchange {
    async fn run(self) -> Result<Response<Body>, GatewayError> {
        let Exchange {
            client,
            request,
            call,
            route,
            estimate,
            mut ticket,
            provider,
            exec_id,
            timeout,
        } = self;
        let deadline = Instant::now() + timeout;
        let response = match timeout_at(deadline, client.request(request)).await {
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
        let stream_kind = family::stream_kind(&route, &call);
        if let (true, Some(kind)) = (family::is_stream(&route, &head.headers), stream_kind) {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let metered = MeteredBody::new(body, kind, estimate.tools, ticket, remaining);
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
        let settling = match body_usage(call.api, &body) {
            Some(reported) => {
                ticket.settle_reported(reported.map(|usage| estimate.tools.reported(usage)))
            }
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
}

/// Settles a call that failed after it was sent — nothing if the provider
/// never saw it, else by how far it got — and says what the client is
/// told.
async fn cut(
    mut ticket: SettleTicket,
    failure: Failure,
    provider: String,
    timeout: Duration,
) -> GatewayError {
    match failure {
        Failure::NotConnected => {
            ticket.settle_nothing().await;
            GatewayError::UpstreamUnreachable {
                provider,
                charged: None,
            }
        }
        Failure::Broken => {
            let charged = ticket.settle_unseen().await.map(|outcome| outcome.actual);
            GatewayError::UpstreamUnreachable { provider, charged }
        }
        Failure::TimedOut => {
            let charged = ticket.settle_unseen().await.map(|outcome| outcome.actual);
            GatewayError::UpstreamTimeout {
                provider,
                secs: timeout.as_secs(),
                charged,
            }
        }
    }
}
