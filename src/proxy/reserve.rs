//! Reserving an admitted call's upper bound against every cap that applies,
//! under the request's idempotency claim when it has one. A call whose
//! output limit may be fitted reserves a range, and gets the most of it
//! that fits.

use crate::budget::{ClaimedReserve, Meter, ReserveOutcome, ReserveRequest};
use crate::config::OnStoreError;
use crate::error::{BudgetRefusal, GatewayError};
use crate::gateway::Gateway;
use crate::metrics::StoreOp;
use crate::money::UsdMicros;
use crate::settle::SettleTicket;

use super::admit::Admitted;
use crate::budget::Books;
use crate::rate_headers::RateHeaders;
use chrono::Utc;

/// What a reserve held: the amount, and the state of the call's rate
/// limits after it (`None`: it has none, or the reserve was a retry).
pub struct Held {
    pub amount: UsdMicros,
    pub rates: Option<RateHeaders>,
}

/// Reserves the call's bound, and tells `ticket` what is left to settle.
/// Returns what was held, `None` when the call goes unmetered. Refused
/// (denied, a duplicate, a run cap conflict, the store down): nothing is
/// sent.
pub async fn reserve(
    gateway: &Gateway,
    admitted: &Admitted<'_>,
    exec_id: &str,
    ticket: &mut SettleTicket,
) -> Result<Option<Held>, GatewayError> {
    match reserve_bound(gateway, admitted, exec_id).await {
        Ok(Some(held)) => Ok(Some(held)),
        // The store is down and the operator chose to let calls through
        // unmetered (each one is logged): nothing to settle.
        Ok(None) => {
            ticket.disarm();
            Ok(None)
        }
        Err(error) => {
            // Refused, nothing was reserved. When the store failed, a
            // reserve may have landed with its answer lost: the ticket,
            // dropped armed, settles nothing against it in the background,
            // which frees its headroom at once rather than at its deadline
            // (and finds nothing to release when it never landed).
            if !matches!(error, GatewayError::StoreUnavailable) {
                ticket.disarm();
            }
            Err(error)
        }
    }
}

/// `Ok(None)`: the store is down and the operator opted to let calls
/// through (`on_store_error = "allow"`).
async fn reserve_bound(
    gateway: &Gateway,
    admitted: &Admitted<'_>,
    exec_id: &str,
) -> Result<Option<Held>, GatewayError> {
    let (key_scope, org_scope) = gateway.directory.scopes(&admitted.key);
    let amount = admitted.estimate.amount;
    let estimate = &admitted.estimate;
    let request = ReserveRequest {
        exec_id: exec_id.to_owned(),
        key: key_scope,
        org: org_scope,
        run: admitted.run.clone(),
        caps: gateway.directory.caps(
            &admitted.key,
            &admitted.call.model,
            admitted.customer.as_deref(),
        ),
        tokens: estimate.input_tokens.saturating_add(estimate.output_tokens),
        customer: admitted.customer.clone(),
        model: admitted.call.model.clone(),
        min_amount: admitted
            .fit
            .map_or(amount, |fit| fit.min_amount.min(amount)),
        amount,
        ttl: gateway.config.store.reservation_ttl,
    };
    let reserving = async {
        match &admitted.claim {
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
    gateway
        .alerts
        .after_reserve(&gateway.directory, &admitted.key, &request, &outcome);
    match outcome {
        Ok(ReserveOutcome::Reserved { amount, levels }) => Ok(Some(Held {
            amount,
            rates: RateHeaders::after_reserve(&request.caps, &levels, Utc::now()),
        })),
        Ok(ReserveOutcome::Denied(denial)) if denial.meter != Meter::Usd => {
            Err(GatewayError::RateLimited {
                denial: Box::new(denial),
                tokens: request.tokens,
            })
        }
        Ok(ReserveOutcome::Denied(denial)) => {
            let fitting_output_limit = admitted.fitting_output_limit(denial.remaining);
            Err(GatewayError::BudgetExceeded(Box::new(BudgetRefusal {
                denial,
                bound: amount,
                fitting_output_limit,
                limit_fields: admitted.call.api.output_limit_fields(),
            })))
        }
        Ok(ReserveOutcome::RunCapConflict { cap }) => {
            let run = admitted.run.as_ref();
            Err(GatewayError::RunCapConflict {
                run: run.map(|run| run.run_id().to_owned()).unwrap_or_default(),
                fixed: cap,
                named: run.and_then(|run| run.cap).unwrap_or_default(),
            })
        }
        Err(error) => match gateway.config.store.on_store_error {
            OnStoreError::Reject => {
                tracing::error!(%exec_id, %error, "budget store error: call refused");
                Err(GatewayError::StoreUnavailable)
            }
            OnStoreError::Allow => {
                tracing::error!(%exec_id, key = %admitted.key.id, amount_usd_micros = amount, %error,
                    "budget store error: call let through UNMETERED (on_store_error = \"allow\")");
                Ok(None)
            }
        },
    }
}
