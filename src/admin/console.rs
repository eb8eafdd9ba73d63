//! The operator console (`GET /admin/`): one page, its script and its
//! stylesheet, built into the binary and served as they are. The page holds
//! no data; it asks for the admin key in the browser and calls the admin
//! API with it, so serving the files needs no key.
//!
//! The headers forbid inline code, framing and referrers: whatever a key id
//! or metadata holds, it can only ever be shown as text.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};

use crate::body::{full, Body};

const PAGE: &str = include_str!("console/index.html");
/// The script, served as one file (`/admin/console.js`): its parts, kept
/// apart by what they draw, joined in order into one scope.
const SCRIPT: &str = concat!(
    include_str!("console/session.js"),
    include_str!("console/format.js"),
    include_str!("console/keys.js"),
    include_str!("console/views.js"),
    include_str!("console/refresh.js"),
);
const STYLE: &str = include_str!("console/console.css");

/// Only the page's own files, and the admin API on the same origin.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The console's file at `path`, if `path` names one and the method is
/// GET (or HEAD, whose body the server leaves out).
pub fn serve(method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let (body, content_type) = match path {
        // `/admin` is the same page: it links its files by absolute path.
        "/admin" | "/admin/" | "/admin/index.html" => (PAGE, "text/html; charset=utf-8"),
        "/admin/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/admin/console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut response = Response::new(full(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary may ship a new script: never pair an old page with it.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_links_its_files_and_holds_no_inline_code() {
        assert!(PAGE.contains("src=\"/admin/console.js\""));
        assert!(PAGE.contains("href=\"/admin/console.css\""));
        assert!(!PAGE.contains("<style"));
        assert!(!PAGE.contains(" style="));
        assert!(!PAGE.contains("innerHTML"));
        assert!(!SCRIPT.contains("innerHTML"));
        assert!(!SCRIPT.contains("eval("));
    }

    #[test]
    fn only_the_console_files_are_served() {
        assert!(serve(&Method::GET, "/admin/").is_some());
        assert!(serve(&Method::GET, "/admin").is_some());
        assert!(serve(&Method::HEAD, "/admin/").is_some());
        assert!(serve(&Method::POST, "/admin/").is_none());
        assert!(serve(&Method::GET, "/admin/v1/keys").is_none());
        assert!(serve(&Method::GET, "/admin/console.map").is_none());
    }
}
