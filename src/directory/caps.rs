//! The caps a call is reserved against beyond its key's and org's money:
//! each model group of the key and of its org that matches the call's
//! priced model (its money, then its rate limits), then the key's and the
//! org's own rate limits, as calendar-minute caps.

use crate::budget::caps::{customer_scope_id, model_scope_id};
use crate::budget::{Cap, Meter, ScopeKind};
use crate::config::{CustomerTemplate, Limits};
use crate::period::Period;

/// Adds to `into` the caps of `limits`, the key's or org's `owner_id`,
/// that a call of `model` is held against.
pub fn caps_of(
    limits: &Limits,
    owner: ScopeKind,
    owner_id: &str,
    model: &str,
    into: &mut Vec<Cap>,
) {
    for group in limits
        .model_caps
        .iter()
        .filter(|group| group.matches(model))
    {
        let id = model_scope_id(owner, owner_id, &group.name);
        if let Some(cap) = group.cap {
            into.push(Cap {
                kind: ScopeKind::Model,
                id: id.clone(),
                meter: Meter::Usd,
                period: group.period,
                limit: cap,
            });
        }
        rates(ScopeKind::Model, &id, group.rpm, group.tpm, into);
    }
    rates(owner, owner_id, limits.rpm, limits.tpm, into);
}

/// Adds to `into` the caps of `key_id`'s customer `customer`: the key's
/// customer template instantiated for it.
pub fn customer_caps(
    template: &CustomerTemplate,
    key_id: &str,
    customer: &str,
    into: &mut Vec<Cap>,
) {
    let id = customer_scope_id(key_id, customer);
    if let Some(cap) = template.cap {
        into.push(Cap {
            kind: ScopeKind::Customer,
            id: id.clone(),
            meter: Meter::Usd,
            period: template.period,
            limit: cap,
        });
    }
    rates(ScopeKind::Customer, &id, template.rpm, template.tpm, into);
}

/// A scope's `rpm` and `tpm` as caps of a calendar minute.
fn rates(kind: ScopeKind, id: &str, rpm: Option<u64>, tpm: Option<u64>, into: &mut Vec<Cap>) {
    for (meter, limit) in [(Meter::Requests, rpm), (Meter::Tokens, tpm)] {
        if let Some(limit) = limit {
            into.push(Cap {
                kind,
                id: id.to_owned(),
                meter,
                period: Period::Minute,
                limit,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelCapSpec;

    fn spec(name: &str, models: &[&str]) -> ModelCapSpec {
        ModelCapSpec {
            name: name.into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            cap_usd: Some("50.00".into()),
            period: Some("day".into()),
            rpm: None,
            tpm: None,
        }
    }

    #[test]
    fn a_call_is_held_against_every_group_it_matches_then_the_owners_rates() {
        let opus = ModelCapSpec {
            rpm: Some(10),
            ..spec("opus", &["claude-opus-*"])
        };
        let limits = Limits::check(
            &[opus, spec("claude", &["claude-*"]), spec("gpt", &["gpt-*"])],
            Some(60),
            Some(200_000),
        )
        .unwrap();
        let mut caps = Vec::new();
        caps_of(
            &limits,
            ScopeKind::Key,
            "alice",
            "claude-opus-4-1",
            &mut caps,
        );
        let named: Vec<(ScopeKind, &str, Meter, u64, Period)> = caps
            .iter()
            .map(|cap| (cap.kind, cap.id.as_str(), cap.meter, cap.limit, cap.period))
            .collect();
        assert_eq!(
            named,
            [
                (
                    ScopeKind::Model,
                    "key:alice/opus",
                    Meter::Usd,
                    50_000_000,
                    Period::Day
                ),
                (
                    ScopeKind::Model,
                    "key:alice/opus",
                    Meter::Requests,
                    10,
                    Period::Minute
                ),
                (
                    ScopeKind::Model,
                    "key:alice/claude",
                    Meter::Usd,
                    50_000_000,
                    Period::Day
                ),
                (ScopeKind::Key, "alice", Meter::Requests, 60, Period::Minute),
                (
                    ScopeKind::Key,
                    "alice",
                    Meter::Tokens,
                    200_000,
                    Period::Minute
                ),
            ]
        );
        caps.clear();
        caps_of(&limits, ScopeKind::Org, "acme", "gemini-2.5-pro", &mut caps);
        assert_eq!(caps.len(), 2, "{caps:?}");
    }
}
