//! Finds the gateway key a request presents.
//!
//! Keys are configured as SHA-256 digests. The presented key is hashed and
//! compared with every configured digest in constant time, without an early
//! exit, so timing says nothing about which digests are close.

use http::HeaderMap;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::{hash_key, KeyConfig};
use crate::error::GatewayError;

/// The configured keys, ready for lookup.
pub struct Keys {
    keys: Vec<KeyConfig>,
}

impl Keys {
    pub fn new(keys: Vec<KeyConfig>) -> Keys {
        Keys { keys }
    }

    /// The key presented as `Authorization: Bearer …` or `x-api-key` (the
    /// OpenAI and Anthropic SDKs' headers).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<&KeyConfig, GatewayError> {
        let presented = presented_key(headers).ok_or(GatewayError::MissingKey)?;
        let digest = hash_key(presented);
        // One past the index of the matching key; 0 while none matched.
        let mut found = 0u32;
        for (index, key) in self.keys.iter().enumerate() {
            let matches = key.key_sha256.ct_eq(&digest);
            found = u32::conditional_select(&found, &(index as u32 + 1), matches);
        }
        found
            .checked_sub(1)
            .and_then(|index| self.keys.get(index as usize))
            .ok_or(GatewayError::InvalidKey)
    }
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?.trim();
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))?
            .trim();
        return (!token.is_empty()).then_some(token);
    }
    let value = headers.get("x-api-key")?.to_str().ok()?.trim();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::Period;

    fn key(id: &str, raw: &str) -> KeyConfig {
        KeyConfig {
            id: id.to_owned(),
            org: None,
            key_sha256: hash_key(raw),
            cap: 1,
            period: Period::Day,
            models: None,
        }
    }

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, value.parse().unwrap());
        h
    }

    #[test]
    fn finds_the_key_by_either_header() {
        let keys = Keys::new(vec![key("a", "secret-a"), key("b", "secret-b")]);
        let found = keys
            .authenticate(&headers("authorization", "Bearer secret-b"))
            .unwrap();
        assert_eq!(found.id, "b");
        let found = keys
            .authenticate(&headers("x-api-key", "secret-a"))
            .unwrap();
        assert_eq!(found.id, "a");
    }

    #[test]
    fn rejects_missing_and_unknown_keys() {
        let keys = Keys::new(vec![key("a", "secret-a")]);
        assert!(matches!(
            keys.authenticate(&HeaderMap::new()),
            Err(GatewayError::MissingKey)
        ));
        assert!(matches!(
            keys.authenticate(&headers("authorization", "Bearer ")),
            Err(GatewayError::MissingKey)
        ));
        assert!(matches!(
            keys.authenticate(&headers("authorization", "Basic abc")),
            Err(GatewayError::MissingKey)
        ));
        assert!(matches!(
            keys.authenticate(&headers("authorization", "Bearer secret-b")),
            Err(GatewayError::InvalidKey)
        ));
        assert!(keys
            .authenticate(&headers("x-api-key", "secret-a "))
            .is_ok());
    }
}
