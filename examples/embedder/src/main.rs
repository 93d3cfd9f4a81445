//! A small embedder: the engine and the runner in your own process, on
//! the public API alone (no CLI, no gateway). CI builds and runs it:
//!
//! ```text
//! cargo run --manifest-path examples/embedder/Cargo.toml
//! ```
//!
//! It loads the defaults plus one operator rule, reads a config, and runs
//! one request whose primary model is rate-limited: the runner cools the
//! profile down, falls back to the next model, and says so once.

use std::sync::Arc;

use failover::state::{AuthProfiles, MemoryStore, Profile};
use failover::{AttemptError, Format, GatewayConfig, ProviderError, ProviderFailure, RunRequest};
use failover::{Rules, Runner};

const CONFIG: &str = r#"
agents:
  defaults:
    model:
      primary: acme/large
      fallbacks: [openai/gpt-5.2]
"#;

const RULES: &str = r#"
provider acme {
  # Acme's proxy says "queue full" when its upstream pool is saturated.
  rule overloaded.acme.queue_full
    when message has "queue full"
    => overloaded
}
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. The rules: an operator layer over the embedded defaults. Bad
    //    rules are one typed error that renders every diagnostic.
    let engine = Rules::new().source("acme.rules", RULES).build()?;
    let c = engine.classify(&ProviderError::message("Queue full, retry").with_provider("acme"));
    println!("classify: {} by {}", c.reason, c.rule.unwrap_or("-"));
    assert_eq!(c.rule, Some("overloaded.acme.queue_full"));

    // 2. The config and the state: here in memory; `FileStore`,
    //    `SqliteStore` and `RedisStore` are the durable backends.
    let config = GatewayConfig::parse(CONFIG, Format::Yaml, "embed.yaml")?.config;
    let mut profiles = AuthProfiles::default();
    for (id, provider) in [("acme:default", "acme"), ("openai:default", "openai")] {
        profiles.profiles.insert(
            id.into(),
            Profile::api_key(provider, "sk-example-not-a-key"),
        );
    }
    let store = Arc::new(MemoryStore::new("main").with_profiles(profiles));
    let runner = Runner::new(Arc::new(engine), Arc::new(config), store)?;

    // 3. A run: the attempt function makes the model call. Acme answers
    //    429; OpenAI answers.
    let out = runner
        .run(
            &RunRequest::session("agent:main:example"),
            |attempt| async move {
                println!(
                    "attempt {}: {}/{} with profile {}",
                    attempt.number,
                    attempt.provider,
                    attempt.model,
                    attempt.profile_id.as_deref().unwrap_or("-")
                );
                if attempt.provider == "acme" {
                    Err(AttemptError::Provider(
                        ProviderFailure::message("Rate limit reached for requests")
                            .with_status(429),
                    ))
                } else {
                    Ok(format!("hello from {}", attempt.model))
                }
            },
        )
        .await?;
    println!("answer: {} (from {})", out.value, out.model_ref());
    for notice in &out.notices {
        println!("notice: {notice}");
    }
    assert_eq!(out.model_ref(), "openai/gpt-5.2");
    Ok(())
}
