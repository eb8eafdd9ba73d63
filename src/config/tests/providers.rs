//! The provider families' own settings: a key variable for every kind
//! but `vertex`, and a project, location and service account file for
//! `vertex` alone.

use super::*;

const GEMINI: &str = r#"
[[providers]]
name = "gemini"
kind = "gemini"
base_url = "https://generativelanguage.googleapis.com"
api_key_env = "GEMINI_API_KEY"
models = ["gemini-*"]
"#;

const VERTEX: &str = r#"
[[providers]]
name = "vertex"
kind = "vertex"
base_url = "https://us-central1-aiplatform.googleapis.com"
project = "my-project"
location = "us-central1"
credentials_file = "vertex-sa.json"
models = ["gemini-*", "claude-*@*"]
"#;

fn with(providers: &str) -> Result<Config, ConfigError> {
    let text = base().replacen("[[orgs]]", &format!("{providers}\n[[orgs]]"), 1);
    load_with(
        &text,
        &[
            ("BOB_KEY", "bob-raw-key"),
            ("OPENAI_API_KEY", "sk-1"),
            ("GEMINI_API_KEY", "g-1"),
        ],
    )
}

#[test]
fn gemini_and_vertex_providers_load() {
    let config = with(&format!("{GEMINI}{VERTEX}")).unwrap();
    let gemini = config
        .providers
        .iter()
        .find(|p| p.name == "gemini")
        .unwrap();
    assert_eq!(gemini.kind, ProviderKind::Gemini);
    assert_eq!(gemini.api_key.as_ref().map(Secret::expose), Some("g-1"));
    assert!(gemini.vertex.is_none());
    let vertex = config
        .providers
        .iter()
        .find(|p| p.name == "vertex")
        .unwrap();
    assert_eq!(vertex.kind, ProviderKind::Vertex);
    let settings = vertex.vertex.as_ref().unwrap();
    assert_eq!(
        (settings.project.as_str(), settings.location.as_str()),
        ("my-project", "us-central1")
    );
    // Beside the config file, like the SQLite file.
    assert_eq!(
        settings.credentials_file,
        Path::new(ORIGIN).parent().unwrap().join("vertex-sa.json")
    );
}

#[test]
fn each_kind_takes_only_its_own_settings() {
    let cases = [
        (
            VERTEX.replace("location = \"us-central1\"\n", ""),
            "providers[3].location: is required",
        ),
        (
            VERTEX.replace("credentials_file = \"vertex-sa.json\"\n", ""),
            "credentials_file: is required",
        ),
        (
            VERTEX.replace("project = \"my-project\"", "project = \"a/b\""),
            "providers[3].project",
        ),
        (
            VERTEX.replace("models =", "api_key_env = \"K\"\nmodels ="),
            "signs in with its service account",
        ),
        (
            GEMINI.replace("models =", "project = \"p\"\nmodels ="),
            "providers[3].project: is a setting of vertex providers",
        ),
        (
            GEMINI.replace("api_key_env = \"GEMINI_API_KEY\"\n", ""),
            "providers[3].api_key_env",
        ),
        (
            GEMINI.replace("kind = \"gemini\"", "kind = \"bard\""),
            "\"vertex\"",
        ),
    ];
    for (providers, expected) in cases {
        let error = with(&providers).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected:?} not in {error}");
    }
}
