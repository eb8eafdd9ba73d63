//! The operator console (`GET /admin/`): its page, script and stylesheet
//! served from the binary with their content types and the headers that
//! keep data from ever running as code; absent, like the admin API, when
//! no admin key is configured.

use reqwest::StatusCode;

use crate::common::{start, Harness, Setup};

const ADMIN: &str = "tg-admin-secret";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

async fn gateway() -> Harness {
    start(Setup::with_admin_key(ADMIN)).await
}

/// GETs `path` with no key; checks the security headers; returns the body.
async fn console_file(h: &Harness, path: &str, content_type: &str) -> String {
    let response = h
        .client()
        .get(format!("{}{path}", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let headers = response.headers().clone();
    let header = |name: &str| {
        headers
            .get(name)
            .unwrap_or_else(|| panic!("{path}: no {name}"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(header("content-type"), content_type, "{path}");
    assert_eq!(header("content-security-policy"), CSP, "{path}");
    assert_eq!(header("x-frame-options"), "DENY", "{path}");
    assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
    assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
    assert_eq!(header("cache-control"), "no-store", "{path}");
    response.text().await.unwrap()
}

/// Every element tag of an HTML text, from `<` to `>`, lower-cased;
/// comments and the doctype left out.
fn tags(html: &str) -> Vec<String> {
    let mut text = html.to_owned();
    while let Some(start) = text.find("<!--") {
        let end = text[start..]
            .find("-->")
            .map_or(text.len(), |at| start + at + 3);
        text.replace_range(start..end, "");
    }
    text.split('<')
        .skip(1)
        .filter_map(|rest| rest.split_once('>').map(|(tag, _)| tag.to_lowercase()))
        .filter(|tag| !tag.starts_with('!'))
        .collect()
}

#[tokio::test]
async fn the_page_its_script_and_its_stylesheet_are_served_with_strict_headers() {
    let h = gateway().await;
    let page = console_file(&h, "/admin/", "text/html; charset=utf-8").await;
    assert!(page.contains("<title>tollgate console</title>"));
    assert_eq!(
        console_file(&h, "/admin", "text/html; charset=utf-8").await,
        page
    );
    let script = console_file(&h, "/admin/console.js", "text/javascript; charset=utf-8").await;
    assert!(script.contains("/admin/v1/"));
    assert!(
        !script.contains("innerHTML"),
        "data is never parsed as HTML"
    );
    let style = console_file(&h, "/admin/console.css", "text/css; charset=utf-8").await;
    assert!(style.contains(".bar-spent"));

    // The API beside it still wants the key.
    let response = h
        .client()
        .get(format!("{}/admin/v1/keys", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = h
        .client()
        .get(format!("{}/admin/console.map", h.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_page_holds_no_inline_script_style_or_handler() {
    let h = gateway().await;
    let page = console_file(&h, "/admin/", "text/html; charset=utf-8").await;
    let tags = tags(&page);
    let scripts: Vec<_> = tags.iter().filter(|t| t.starts_with("script")).collect();
    assert_eq!(scripts.len(), 1, "{scripts:?}");
    assert!(scripts[0].contains("src=\"/admin/console.js\""));
    // The one script tag is empty: its code comes from the file.
    assert!(page.contains("<script src=\"/admin/console.js\" defer></script>"));
    assert!(!tags.iter().any(|t| t.starts_with("style")), "no <style>");
    for tag in &tags {
        for attribute in tag.split_whitespace().skip(1) {
            let name = attribute.split('=').next().unwrap_or_default();
            assert!(
                !(name.starts_with("on") && name.len() > 2),
                "inline handler in <{tag}>"
            );
            assert_ne!(name, "style", "inline style in <{tag}>");
        }
        assert!(!tag.contains("javascript:"), "<{tag}>");
    }
}

#[tokio::test]
async fn without_an_admin_key_the_console_is_not_there() {
    let h = start(Setup::default()).await;
    for path in [
        "/admin",
        "/admin/",
        "/admin/console.js",
        "/admin/console.css",
    ] {
        let response = h
            .client()
            .get(format!("{}{path}", h.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unknown_url", "{path}");
    }
}
