//! The provider families' own settings: a key variable for every kind
//! but `vertex`, a project, location and service account file for
//! `vertex` alone, deployments for `azure` alone, and the service tier a
//! request naming none is billed at.

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

const AZURE: &str = r#"
[[providers]]
name = "azure"
kind = "azure"
base_url = "https://my-resource.openai.azure.com"
api_key_env = "OPENAI_API_KEY"
deployments = { "prod-4o" = "gpt-4o-2024-08-06", "mini" = " gpt-4o-mini " }
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

#[test]
fn azure_maps_each_deployment_to_its_priced_model() {
    let config = with(AZURE).unwrap();
    let azure = config.providers.iter().find(|p| p.name == "azure").unwrap();
    assert_eq!(azure.kind, ProviderKind::Azure);
    assert_eq!(azure.deployment_model("prod-4o"), Some("gpt-4o-2024-08-06"));
    assert_eq!(azure.deployment_model("mini"), Some("gpt-4o-mini"));
    assert_eq!(azure.deployment_model("prod"), None);
    assert!(!azure.unnamed_tier_may_be_priority);
    let cases = [
        (AZURE.replace("deployments = {", "x = {"), "unknown field"),
        (
            AZURE.replace(
                "deployments = { \"prod-4o\" = \"gpt-4o-2024-08-06\", \"mini\" = \" gpt-4o-mini \" }\n",
                "",
            ),
            "providers[3].deployments: is required for an azure provider",
        ),
        (
            AZURE.replace("\"prod-4o\" =", "\"prod/4o\" ="),
            "\"prod/4o\" must be letters",
        ),
        (AZURE.replace("\" gpt-4o-mini \"", "\" \""), "\"mini\" must name the priced model"),
        (
            GEMINI.replace("models =", "deployments = { a = \"b\" }\nmodels ="),
            "providers[3].deployments: is a setting of azure providers",
        ),
    ];
    for (providers, expected) in cases {
        let error = with(&providers).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected:?} not in {error}");
    }
}

#[test]
fn only_openai_itself_or_a_provider_set_so_bills_an_unnamed_tier_at_priority() {
    let config = with("").unwrap();
    let tier_of = |config: &Config, name: &str| {
        config
            .providers
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .unnamed_tier_may_be_priority
    };
    // api.openai.com, an OpenAI-compatible server, and Anthropic.
    assert!(tier_of(&config, "openai"));
    assert!(!tier_of(&config, "local"));
    assert!(!tier_of(&config, "anthropic"));
    let set = with(&format!("{AZURE}service_tier_default = \"priority\"\n")).unwrap();
    assert!(tier_of(&set, "azure"));
    for (providers, expected) in [
        (
            format!("{AZURE}service_tier_default = \"scale\"\n"),
            "\"scale\" is not \"default\" or \"priority\"",
        ),
        (
            GEMINI.replace("models =", "service_tier_default = \"priority\"\nmodels ="),
            "is a setting of openai and azure providers",
        ),
    ] {
        let error = with(&providers).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected:?} not in {error}");
    }
}

const BEDROCK: &str = r#"
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"
region = "us-east-1"
models = ["anthropic.*"]
"#;

#[test]
fn bedrock_signs_with_aws_credentials_from_the_environment_or_a_bedrock_api_key() {
    let load = |providers: &str, vars: &[(&str, &str)]| {
        let text = base().replacen("[[orgs]]", &format!("{providers}\n[[orgs]]"), 1);
        let mut env = vec![("BOB_KEY", "bob-raw-key"), ("OPENAI_API_KEY", "sk-1")];
        env.extend_from_slice(vars);
        load_with(&text, &env)
    };
    let signed = load(
        BEDROCK,
        &[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ],
    )
    .unwrap();
    let bedrock = signed
        .providers
        .iter()
        .find(|p| p.name == "bedrock")
        .unwrap();
    assert_eq!(bedrock.kind, ProviderKind::Bedrock);
    let aws = bedrock.aws.as_ref().unwrap();
    assert_eq!(aws.region, "us-east-1");
    let keys = aws.keys.as_ref().unwrap();
    assert_eq!(keys.access_key_id.expose(), "AKID");
    assert!(keys.session_token.is_none());
    assert!(bedrock.api_key.is_none());
    // Variables of the operator's naming, a session token among them.
    let named = BEDROCK.replace(
        "models =",
        "access_key_id_env = \"K\"\nsecret_access_key_env = \"S\"\nsession_token_env = \"T\"\nmodels =",
    );
    let named = load(&named, &[("K", "AKID2"), ("S", "s2"), ("T", "t2")]).unwrap();
    let keys = named
        .providers
        .iter()
        .find(|p| p.name == "bedrock")
        .unwrap();
    let keys = keys.aws.as_ref().unwrap().keys.as_ref().unwrap();
    assert_eq!(keys.session_token.as_ref().map(Secret::expose), Some("t2"));
    // The design's shorter names read the same.
    let short = BEDROCK.replace(
        "models =",
        "access_key_env = \"K\"\nsecret_key_env = \"S\"\nmodels =",
    );
    let short = load(&short, &[("K", "AKID3"), ("S", "s3")]).unwrap();
    let short = short
        .providers
        .iter()
        .find(|p| p.name == "bedrock")
        .unwrap();
    let short = short.aws.as_ref().unwrap().keys.as_ref().unwrap();
    assert_eq!(short.access_key_id.expose(), "AKID3");
    // No credentials: the gateway starts, and the provider is unusable.
    let unset = load(BEDROCK, &[]).unwrap();
    let unset = unset
        .providers
        .iter()
        .find(|p| p.name == "bedrock")
        .unwrap();
    assert!(unset.aws.as_ref().unwrap().keys.is_none());
    for (providers, expected) in [
        (
            BEDROCK.replace("region = \"us-east-1\"\n", ""),
            "providers[3].region: is required for a bedrock provider",
        ),
        (
            BEDROCK.replace("\"us-east-1\"", "\"US East\""),
            "providers[3].region",
        ),
        (
            GEMINI.replace("models =", "region = \"us-east-1\"\nmodels ="),
            "providers[3].region: is a setting of bedrock providers",
        ),
    ] {
        let error = load(&providers, &[]).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected:?} not in {error}");
    }
}
