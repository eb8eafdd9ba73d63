//! Checking what the server's HTTP layers read: the log format, the
//! origins allowed to call from a browser, the admin routes' timeout.

use http::HeaderValue;

use super::super::{ConfigError, CorsOrigins, LogFormat};
use super::Checker;

/// Long enough for a spend report over a year of aggregates on a busy
/// store, short enough that a hung store frees the operator's console.
pub(super) const DEFAULT_ADMIN_TIMEOUT_SECS: u64 = 30;

impl Checker<'_> {
    pub(super) fn log_format(&self, text: Option<&str>) -> Result<LogFormat, ConfigError> {
        match text {
            None | Some("plain") => Ok(LogFormat::Plain),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(self.invalid(
                "server.log_format",
                format!("{other:?} is not a log format: use \"plain\" or \"json\""),
            )),
        }
    }

    /// The origins, each exactly as a browser sends it in `Origin`; `*`
    /// alone for any. Unset or empty: CORS off.
    pub(super) fn cors_origins(
        &self,
        texts: Option<&[String]>,
    ) -> Result<Option<CorsOrigins>, ConfigError> {
        let field = "server.cors_allowed_origins";
        let texts = texts.unwrap_or_default();
        if texts.is_empty() {
            return Ok(None);
        }
        if texts.iter().any(|text| text == "*") {
            if texts.len() > 1 {
                return Err(self.invalid(field, "\"*\" allows any origin: list it alone"));
            }
            return Ok(Some(CorsOrigins::Any));
        }
        let origins = texts
            .iter()
            .map(|text| {
                origin(text).ok_or_else(|| {
                    self.invalid(
                        field,
                        format!(
                            "{text:?} is not an origin like \"https://app.example\" \
                             (http or https, a host and an optional port; no path, no slash at the end)"
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(CorsOrigins::List(origins)))
    }
}

/// `text` as a browser's `Origin` header, if it is one: a browser sends
/// `scheme://host[:port]` and the match is exact, so anything else would
/// never match.
fn origin(text: &str) -> Option<HeaderValue> {
    let (scheme, rest) = text.split_once("://")?;
    let host_ok = !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !matches!(scheme, "http" | "https") || !host_ok {
        return None;
    }
    HeaderValue::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn origins_are_as_a_browser_sends_them() {
        assert!(origin("https://app.example").is_some());
        assert!(origin("http://localhost:5173").is_some());
        assert!(origin("http://[::1]:8080").is_some());
        assert!(origin("https://app.example/").is_none());
        assert!(origin("https://app.example/path").is_none());
        assert!(origin("app.example").is_none());
        assert!(origin("ftp://app.example").is_none());
        assert!(origin("https://").is_none());
    }
}
