//! The server fields the HTTP layers read: defaults, and errors naming
//! the field.

use std::time::Duration;

use super::{base, error_after, load};
use crate::config::{CorsOrigins, LogFormat};

const SERVER: &str = "upstream_timeout_secs = 60\n";

fn with_server(lines: &str) -> String {
    base().replacen(SERVER, &format!("{SERVER}{lines}\n"), 1)
}

#[test]
fn the_defaults_are_plain_logs_no_cors_and_a_30_s_admin_timeout() {
    let config = load(&base()).unwrap();
    assert_eq!(config.server.log_format, LogFormat::Plain);
    assert_eq!(config.server.cors_allowed_origins, None);
    assert_eq!(config.server.admin_timeout, Duration::from_secs(30));
}

#[test]
fn the_fields_are_read() {
    let text = with_server(
        "log_format = \"json\"\ncors_allowed_origins = [\"https://app.example\", \"http://localhost:5173\"]\nadmin_timeout_secs = 5",
    );
    let server = load(&text).unwrap().server;
    assert_eq!(server.log_format, LogFormat::Json);
    let Some(CorsOrigins::List(origins)) = server.cors_allowed_origins else {
        panic!("{:?}", server.cors_allowed_origins);
    };
    assert_eq!(origins, ["https://app.example", "http://localhost:5173"]);
    assert_eq!(server.admin_timeout, Duration::from_secs(5));
    assert_eq!(
        server.token_count_cache_mb,
        crate::tokenizer::cache::DEFAULT_CACHE_MB
    );
    let off = load(&with_server("token_count_cache_mb = 0")).unwrap();
    assert_eq!(off.server.token_count_cache_mb, 0);
    let any = load(&with_server("cors_allowed_origins = [\"*\"]")).unwrap();
    assert_eq!(any.server.cors_allowed_origins, Some(CorsOrigins::Any));
    let none = load(&with_server("cors_allowed_origins = []")).unwrap();
    assert_eq!(none.server.cors_allowed_origins, None);
}

#[test]
fn bad_values_name_the_field() {
    for (lines, field, says) in [
        (
            "log_format = \"xml\"",
            "server.log_format",
            "\"plain\" or \"json\"",
        ),
        (
            "cors_allowed_origins = [\"https://app.example/\"]",
            "server.cors_allowed_origins",
            "no slash at the end",
        ),
        (
            "cors_allowed_origins = [\"*\", \"https://app.example\"]",
            "server.cors_allowed_origins",
            "list it alone",
        ),
        (
            "admin_timeout_secs = 0",
            "server.admin_timeout_secs",
            "above 0",
        ),
        (
            "token_count_cache_mb = 70000",
            "server.token_count_cache_mb",
            "at most 65536",
        ),
    ] {
        let error = error_after(SERVER, &format!("{SERVER}{lines}\n"));
        assert!(error.contains(field), "{lines}: {error}");
        assert!(error.contains(says), "{lines}: {error}");
    }
}
