//! The gateway's own credential to each provider: a key from the
//! environment, or, for Vertex AI, an OAuth2 access token from the
//! provider's service account (`vertex::token`), fetched and cached per
//! provider.

use std::collections::HashMap;

use super::vertex::token::{AccessToken, ServiceAccount, TokenError, TokenSource};
use crate::config::{AwsKeys, Config, Provider, Secret};
use crate::error::GatewayError;
use crate::upstream::UpstreamClient;

/// What signs a call in to its provider.
#[derive(Debug)]
pub enum Credential {
    /// An API key (`api_key_env`).
    Key(Secret),
    /// A Vertex AI access token.
    Token(AccessToken),
    /// AWS credentials, which sign each call (SigV4).
    Aws(AwsKeys),
}

impl Credential {
    /// What a key or token sends; empty for AWS credentials, which sign
    /// a request rather than travel in it.
    pub fn secret(&self) -> &str {
        match self {
            Credential::Key(key) => key.expose(),
            Credential::Token(token) => token.expose(),
            Credential::Aws(_) => "",
        }
    }
}

/// Every provider's source of credentials.
pub struct Credentials {
    /// One token source per `vertex` provider, by provider name.
    tokens: HashMap<String, TokenSource>,
}

impl Credentials {
    /// Reads every vertex provider's service account file: a file that
    /// cannot be read or holds no usable key stops the gateway at start-up.
    pub fn new(config: &Config, client: &UpstreamClient) -> Result<Credentials, TokenError> {
        let mut tokens = HashMap::new();
        for provider in &config.providers {
            if let Some(vertex) = &provider.vertex {
                let account = ServiceAccount::load(&vertex.credentials_file)?;
                tokens.insert(
                    provider.name.clone(),
                    TokenSource::new(account, client.clone()),
                );
            }
        }
        Ok(Credentials { tokens })
    }

    /// The credential for a call to `provider`: a 503 naming what is
    /// missing when the operator has not set its key, or its token
    /// endpoint fails (nothing is then sent, and the next call tries
    /// again).
    pub async fn of(&self, provider: &Provider) -> Result<Credential, GatewayError> {
        if let Some(source) = self.tokens.get(&provider.name) {
            return match source.token().await {
                Ok(token) => Ok(Credential::Token(token)),
                Err(error) => {
                    tracing::error!(provider = %provider.name, %error,
                        "could not get an access token; the call was not sent");
                    Err(GatewayError::ProviderAuthFailed {
                        provider: provider.name.clone(),
                    })
                }
            };
        }
        if let Some(key) = &provider.api_key {
            return Ok(Credential::Key(key.clone()));
        }
        match &provider.aws {
            // A Bedrock provider without an API key signs with its AWS
            // credentials.
            Some(aws) if provider.api_key_env.is_empty() => {
                aws.keys.clone().map(Credential::Aws).ok_or_else(|| {
                    GatewayError::ProviderKeyMissing {
                        provider: provider.name.clone(),
                        env: format!(
                            "{} and {}",
                            aws.access_key_id_env, aws.secret_access_key_env
                        ),
                    }
                })
            }
            _ => Err(GatewayError::ProviderKeyMissing {
                provider: provider.name.clone(),
                env: provider.api_key_env.clone(),
            }),
        }
    }
}
