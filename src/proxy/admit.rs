//! Admitting a call: everything checked before any money moves. An error
//! here costs nothing and forwards nothing.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_LENGTH};
use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use crate::api::{check_hosted_tools, check_priced_options, Call};
use crate::budget::RunScope;
use crate::config::{KeyConfig, OnInsufficient, Provider};
use crate::error::GatewayError;
use crate::estimate::{bound, estimate, Estimate, TokenCounter};
use crate::family::{self, Credential, Route};
use crate::gateway::Gateway;
use crate::money::{parse_usd, UsdMicros, MAX_USD_MICROS};
use crate::prices::{ModelPrice, TierRequest};
use crate::upstream::Payload;

use super::customer::customer_of;

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

/// The header naming the agent run a call belongs to.
pub const RUN_HEADER: &str = "x-tollgate-run";
/// The header giving the run's cap, fixed by its first call.
pub const RUN_CAP_HEADER: &str = "x-tollgate-run-cap-usd";
/// The longest run id accepted.
const MAX_RUN_ID_BYTES: usize = 128;

/// A call that may be reserved and sent.
pub struct Admitted<'g> {
    pub key: Arc<KeyConfig>,
    /// The claim of the request's `Idempotency-Key`, if it sent one.
    pub claim: Option<String>,
    /// The agent run it belongs to (`x-tollgate-run`), if any.
    pub run: Option<RunScope>,
    /// The customer it is for (`x-tollgate-customer`, or the body's
    /// end-user field), if it names one.
    pub customer: Option<String>,
    /// How far its output limit may be lowered to fit what remains;
    /// `None`: its bound is fixed.
    pub fit: Option<Fit>,
    pub call: Call,
    pub route: &'g Route,
    pub price: &'g ModelPrice,
    pub provider: &'g Provider,
    /// What signs the call in to its provider.
    pub credential: Credential,
    pub estimate: Estimate,
    /// The provider's request, built before reserving: a request that
    /// cannot be sent costs nothing.
    pub upstream: Request<Payload>,
}

pub async fn admit<'g>(
    gateway: &'g Gateway,
    route: &'g Route,
    headers: &HeaderMap,
    uri: &http::Uri,
    body: &mut Incoming,
) -> Result<Admitted<'g>, GatewayError> {
    let presented = family::gateway_key(route.family, headers, uri);
    let key = gateway.directory.authenticate_key(presented.as_deref())?;
    let claim = idempotency_claim(headers, &key.id)?;
    let run = run_scope(headers, &key.id)?;
    let body = read_body(headers, body, gateway.config.server.max_request_bytes).await?;
    let body_len = body.len();
    let prices = &gateway.config.prices;
    let mut call = family::parse(route, body)?;
    family::price_as(&gateway.config.providers, route, &mut call)?;
    let customer = customer_of(&key, headers, &call)?;
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
    let provider = family::provider_for(
        &gateway.config.providers,
        route,
        &call.model,
        call.served_as.as_deref(),
    )?;
    if call.options.tier == TierRequest::Open && !provider.unnamed_tier_may_be_priority {
        // The provider serves a call that names no tier at the standard
        // one, and bills it so whether or not its answer says.
        call.options.tier = TierRequest::Standard;
    }
    family::read_priced_headers(route, &mut call, headers)?;
    check_priced_options(&call, price)?;
    check_hosted_tools(&call, price)?;
    family::bound_by_price(&mut call, price);
    call.bound_output(
        price.max_output_tokens.unwrap_or(DEFAULT_OUTPUT_LIMIT),
        &provider.output_limit_fields,
    );
    let credential = gateway.credentials.of(provider).await?;

    let counter = TokenCounter::for_model(provider.kind, &call.model)
        .at_bytes_per_token(price.input_bytes_per_token);
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
    let fit = Fit::of(
        &key,
        &call,
        price,
        &estimate,
        gateway.config.server.min_clamped_output_tokens,
    );
    let upstream = upstream_request(provider, &credential, route, headers, &call)?;
    Ok(Admitted {
        key,
        claim,
        run,
        customer,
        fit,
        call,
        route,
        price,
        provider,
        credential,
        estimate,
        upstream,
    })
}

/// The provider's request for `call`.
fn upstream_request(
    provider: &Provider,
    credential: &Credential,
    route: &Route,
    headers: &HeaderMap,
    call: &Call,
) -> Result<Request<Payload>, GatewayError> {
    let body = call.forward_body();
    family::upstream_request(provider, credential, route, call.served_as(), headers, body).map_err(|error| {
        tracing::error!(provider = %provider.name, %error, "could not build the provider request");
        GatewayError::UpstreamUnreachable {
            provider: provider.name.clone(),
            charged: None,
        }
    })
}

/// The range a call's output limit may be fitted in: from
/// `min_clamped_output_tokens` up to the limit it has now.
#[derive(Clone, Copy, Debug)]
pub struct Fit {
    pub min_tokens: u64,
    /// The call's bound at `min_tokens`: the least it can be reserved.
    pub min_amount: UsdMicros,
    /// The client set the limit (the key clamps): the response says so.
    pub client_limit: bool,
}

impl Fit {
    /// A call's output limit is fitted to what remains when the gateway
    /// set it (the client gave none), or when the client's does not fit
    /// and its key clamps. Never the provider's own small default of the
    /// legacy completions API, nor a limit a thinking budget must stay
    /// below.
    fn of(
        key: &KeyConfig,
        call: &Call,
        price: &ModelPrice,
        estimate: &Estimate,
        min_clamped: u64,
    ) -> Option<Fit> {
        let fitted_by_gateway = !call.limit_given() && call.default_limit.is_none();
        let clamped = call.limit_given() && key.on_insufficient == OnInsufficient::Clamp;
        if !(fitted_by_gateway || clamped)
            || call.api.output_limit_fields().is_empty()
            || call.has_thinking_budget()
        {
            return None;
        }
        let min_tokens = min_clamped.min(call.output_limit);
        (min_tokens < call.output_limit).then(|| Fit {
            min_tokens,
            min_amount: bound(call, price, estimate.seen_input_tokens, min_tokens).amount,
            client_limit: call.limit_given(),
        })
    }
}

impl Admitted<'_> {
    /// Lowers the call's output limit to the most that `reserved` pays for
    /// (never below the fit's least), with its bound and its provider
    /// request to match. Returns the new limit, or `None` when the whole
    /// bound was reserved and nothing changed.
    pub fn fit_to(
        &mut self,
        reserved: UsdMicros,
        headers: &HeaderMap,
    ) -> Result<Option<u64>, GatewayError> {
        let Some(fit) = self.fit else {
            return Ok(None);
        };
        if reserved >= self.estimate.amount {
            return Ok(None);
        }
        let limit = largest_fitting(
            &self.call,
            self.price,
            self.estimate.seen_input_tokens,
            reserved,
            fit.min_tokens,
            self.call.output_limit,
        )
        .unwrap_or(fit.min_tokens);
        self.call
            .fit_output(limit, &self.provider.output_limit_fields);
        self.estimate = bound(
            &self.call,
            self.price,
            self.estimate.seen_input_tokens,
            self.call.output_bound(),
        );
        self.upstream = upstream_request(
            self.provider,
            &self.credential,
            self.route,
            headers,
            &self.call,
        )?;
        Ok(Some(limit))
    }

    /// The largest output limit below the call's own with which its bound
    /// fits in `remaining`, for a refusal to say how to fit; `None` when
    /// none does, or the call has no output limit to lower.
    pub fn fitting_output_limit(&self, remaining: UsdMicros) -> Option<u64> {
        if self.call.api.output_limit_fields().is_empty() || self.call.output_limit <= 1 {
            return None;
        }
        largest_fitting(
            &self.call,
            self.price,
            self.estimate.seen_input_tokens,
            remaining,
            1,
            self.call.output_limit - 1,
        )
    }
}

/// The largest output limit in `[low, high]` whose bound is at most
/// `budget`, by bisection (the bound grows with the limit); `None` when
/// not even `low` fits.
fn largest_fitting(
    call: &Call,
    price: &ModelPrice,
    seen_input_tokens: u64,
    budget: UsdMicros,
    low: u64,
    high: u64,
) -> Option<u64> {
    let fits = |limit: u64| {
        bound(call, price, seen_input_tokens, call.output_bound_at(limit)).amount <= budget
    };
    if low > high || !fits(low) {
        return None;
    }
    let (mut fits_up_to, mut too_much) = (low, high.saturating_add(1));
    while too_much - fits_up_to > 1 {
        let middle = fits_up_to + (too_much - fits_up_to) / 2;
        if fits(middle) {
            fits_up_to = middle;
        } else {
            too_much = middle;
        }
    }
    Some(fits_up_to)
}

/// The run the request names, as a scope of its key: `x-tollgate-run`
/// (1 to 128 of `A-Z a-z 0-9 . _ : -`), with the cap it names, if any, in
/// `x-tollgate-run-cap-usd` (a decimal USD string).
pub fn run_scope(headers: &HeaderMap, key_id: &str) -> Result<Option<RunScope>, GatewayError> {
    let invalid = |message: String| GatewayError::BadRequest {
        message,
        param: None,
        code: Some("invalid_run_header"),
    };
    let single = |name: &str| -> Result<Option<&str>, GatewayError> {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(invalid(format!("send the {name} header once")));
        }
        value
            .to_str()
            .map(Some)
            .map_err(|_| invalid(format!("the {name} header must be visible ASCII")))
    };
    let run = single(RUN_HEADER)?;
    let cap = single(RUN_CAP_HEADER)?;
    let Some(run) = run else {
        if cap.is_some() {
            return Err(invalid(format!(
                "{RUN_CAP_HEADER} caps a run: send it with {RUN_HEADER}, which names the run"
            )));
        }
        return Ok(None);
    };
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if run.is_empty() || run.len() > MAX_RUN_ID_BYTES || !run.chars().all(valid_char) {
        return Err(invalid(format!(
            "{RUN_HEADER} must be 1 to {MAX_RUN_ID_BYTES} characters of A-Z, a-z, 0-9, \
             '.', '_', ':' and '-', not {run:?}"
        )));
    }
    let cap = match cap {
        None => None,
        Some(text) => Some(
            parse_usd(text.trim())
                .ok()
                .filter(|cap| *cap <= MAX_USD_MICROS)
                .ok_or_else(|| {
                    invalid(format!(
                        "{RUN_CAP_HEADER} must be a decimal USD amount such as \"2.00\", \
                         not {text:?}"
                    ))
                })?,
        ),
    };
    Ok(Some(RunScope::new(key_id, run, cap)))
}

/// Reads the request body, refusing one over `limit` before reading it when
/// its length is declared.
pub(super) async fn read_body(
    headers: &HeaderMap,
    body: &mut Incoming,
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
            code: None,
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
        code: None,
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
