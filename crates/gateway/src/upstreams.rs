//! Upstreams and gateway settings from the config file (DESIGN "Gateway
//! mode"): `models.providers.<id>` and the `serve` block.
//!
//! ```yaml
//! models:
//!   providers:
//!     openai:
//!       baseUrl: https://api.openai.com/v1      # `/chat/completions` is appended
//!       api: openai-completions
//!       apiKey: "${OPENAI_API_KEY}"             # an environment reference only
//!       timeouts: { connectMs: 5000, firstByteMs: 60000, firstTokenMs: 60000, idleMs: 30000, totalMs: 600000 }
//!       retries: { max: 2, baseDelayMs: 500, maxDelayMs: 8000 }   # same-candidate retries
//!       models:                                 # listed by GET /v1/models
//!         - gpt-5.2
//!         - { id: gpt-5.2-mini, contextWindow: 400000, continuation: restart }
//!     anthropic:
//!       baseUrl: https://api.anthropic.com      # `/v1/messages` is appended
//!       api: anthropic-messages
//!     local:
//!       baseUrl: http://127.0.0.1:11434/v1
//!       api: openai-completions
//!       auth: none                              # takes no credential
//! serve:
//!   maxBodyBytes: 16777216
//!   maxConcurrentRequests: 1024
//!   shutdownGraceMs: 10000
//!   requestTimeoutMs: 600000                  # the whole chain of one request
//!   continuation: { maxBytes: 1048576 }       # text kept to continue a broken stream
//! ```
//!
//! Secrets never live in the config (SPEC R5): a literal `apiKey` is
//! refused with an error that names the key path and not the value; an
//! environment reference is resolved once, at start (and at each reload),
//! and becomes the provider's `default` profile in memory — never written
//! to `auth-profiles.json`. A `baseUrl` with a user or password in it is
//! refused for the same reason. No message here quotes a value from the
//! file except a provider id, an `api` name or an environment variable's
//! name.
//!
//! A provider is called with a credential or not at all: an attempt for
//! which the agent has no profile of the provider (and the provider no
//! `apiKey` reference) is refused before it is sent, as `auth`, unless the
//! provider is declared `auth: none`. Each agent's credentials are its own
//! (`agents/<id>/agent/auth-profiles.json`, SPEC R5.1); an agent does not
//! borrow `main`'s. At start and on every reload the gateway warns, per
//! agent, of each provider its chains reach without a credential.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_yaml::Value;

use failover::state::Secret;

/// How an upstream is spoken to (`api`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Chat Completions, and every server that copies it (OpenRouter,
    /// Groq, Together, DeepSeek, Mistral, vLLM, Ollama, llama.cpp, LM
    /// Studio): `POST {baseUrl}/chat/completions`.
    OpenAiCompletions,
    /// Anthropic Messages: `POST {baseUrl}/v1/messages`.
    AnthropicMessages,
    /// OpenAI Responses: `POST {baseUrl}/responses`.
    OpenAiResponses,
    /// Google Gemini: `POST {baseUrl}/models/{model}:generateContent`,
    /// `:streamGenerateContent?alt=sse` when streaming; `x-goog-api-key`.
    GoogleGenerativeAi,
    /// Azure OpenAI Responses: `POST {baseUrl}/responses` when `baseUrl`
    /// ends in `/openai/v1`, else `{baseUrl}/openai/responses?api-version=V`;
    /// `api-key`.
    AzureOpenAiResponses,
    /// Azure OpenAI chat deployments: `POST
    /// {baseUrl}/openai/deployments/{model}/chat/completions?api-version=V`,
    /// or `{baseUrl}/chat/completions` when `baseUrl` ends in `/openai/v1`;
    /// `api-key`.
    AzureOpenAiCompletions,
    /// Amazon Bedrock Converse: `POST {baseUrl}/model/{model}/converse`,
    /// `/converse-stream` when streaming; `baseUrl` defaults to
    /// `https://bedrock-runtime.{region}.amazonaws.com`. Signed with SigV4
    /// (an `aws` profile or the AWS environment), or a Bedrock API key as
    /// Bearer.
    BedrockConverseStream,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAiCompletions => "openai-completions",
            Api::AnthropicMessages => "anthropic-messages",
            Api::OpenAiResponses => "openai-responses",
            Api::GoogleGenerativeAi => "google-generative-ai",
            Api::AzureOpenAiResponses => "azure-openai-responses",
            Api::AzureOpenAiCompletions => "azure-openai-completions",
            Api::BedrockConverseStream => "bedrock-converse-stream",
        }
    }

    fn from_name(s: &str) -> Option<Api> {
        match s {
            // Ollama's OpenAI-compatible API (`{host}/v1`).
            "openai-completions" | "ollama" => Some(Api::OpenAiCompletions),
            "anthropic-messages" => Some(Api::AnthropicMessages),
            "openai-responses" => Some(Api::OpenAiResponses),
            "google-generative-ai" => Some(Api::GoogleGenerativeAi),
            "azure-openai-responses" => Some(Api::AzureOpenAiResponses),
            "azure-openai-completions" => Some(Api::AzureOpenAiCompletions),
            "bedrock-converse-stream" => Some(Api::BedrockConverseStream),
            _ => None,
        }
    }

    /// Every `api` name, for messages.
    const EXPECTED: &'static str = "expected `openai-completions`, `anthropic-messages`, `openai-responses`, `google-generative-ai`, `azure-openai-responses`, `azure-openai-completions`, `bedrock-converse-stream` or `ollama`";

    /// Whether the Azure conventions apply (`api-key`, `api-version`).
    pub fn is_azure(self) -> bool {
        matches!(
            self,
            Api::AzureOpenAiResponses | Api::AzureOpenAiCompletions
        )
    }
}

/// Per-provider deadlines (`timeouts`), each in milliseconds in the
/// config. Before anything reached the client a deadline is a failure
/// classified as `timeout` and the chain moves on; after, `idleMs` and
/// `totalMs` break the stream, which the next candidate continues
/// (`stream.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `connectMs`: TCP (and TLS) connect.
    pub connect: Duration,
    /// `firstByteMs`: from sending the request to the response head and,
    /// when streaming, to the first event of the body.
    pub first_byte: Duration,
    /// `firstTokenMs`: from sending the request to the first *content* of
    /// a stream (a text, tool-call or reasoning delta, or the end of the
    /// answer): `message_start`, role-only chunks and pings do not count.
    pub first_token: Duration,
    /// `idleMs`: the longest gap between two chunks of a stream once its
    /// content has begun.
    pub idle: Duration,
    /// `totalMs`: the whole attempt, body included.
    pub total: Duration,
}

impl Timeouts {
    /// Connect 10 s: a live provider answers a SYN in milliseconds. First
    /// byte 120 s: a long prompt on a slow model takes that long before the
    /// first token. First token and idle: the first-byte value (120 s
    /// unless `firstByteMs` is set), so a reasoning model that thinks in
    /// silence is not cut. Total 10 min: the longest answer a gateway
    /// should hold a connection for.
    pub const DEFAULT: Timeouts = Timeouts {
        connect: Duration::from_secs(10),
        first_byte: Duration::from_secs(120),
        first_token: Duration::from_secs(120),
        idle: Duration::from_secs(120),
        total: Duration::from_secs(600),
    };
}

/// How a candidate continues an answer that another one's stream broke
/// off after its first byte (issue 32; `models.providers.<id>.models[]
/// .continuation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuation {
    /// The original request plus the text delivered so far as a trailing
    /// assistant message; the answer's continuation is forwarded. The
    /// default of `anthropic-messages`.
    Prefill,
    /// The original request again; its output is held until it has passed
    /// the delivered text, checked to begin with exactly that text, and
    /// only the rest forwarded. The default of `openai-completions`
    /// (OpenAI gives a trailing assistant message no defined meaning).
    Restart,
    /// The candidate does not continue answers (the stream ends with the
    /// error event).
    None,
}

impl Continuation {
    /// The config and metric name.
    pub fn name(self) -> &'static str {
        match self {
            Continuation::Prefill => "prefill",
            Continuation::Restart => "restart",
            Continuation::None => "none",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        match s {
            "prefill" => Some(Continuation::Prefill),
            "restart" => Some(Continuation::Restart),
            "none" => Some(Continuation::None),
            _ => None,
        }
    }

    /// The default for an `api`.
    pub fn default_for(api: Api) -> Self {
        match api {
            Api::AnthropicMessages => Continuation::Prefill,
            Api::OpenAiCompletions
            | Api::OpenAiResponses
            | Api::GoogleGenerativeAi
            | Api::AzureOpenAiResponses
            | Api::AzureOpenAiCompletions
            | Api::BedrockConverseStream => Continuation::Restart,
        }
    }
}

/// One entry of `models.providers.<id>.models`: a model id, or a mapping
/// `{ id, contextWindow, continuation }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    pub id: String,
    /// `contextWindow`, in tokens, when declared.
    pub context_window: Option<u64>,
    /// `continuation`, when declared (else the `api`'s default).
    pub continuation: Option<Continuation>,
}

/// One `models.providers.<id>`.
#[derive(Clone)]
pub struct Upstream {
    /// The provider id, lower-cased (the `provider` of `provider/model`).
    pub id: String,
    /// `baseUrl` without a trailing `/`.
    pub base_url: String,
    pub api: Api,
    pub timeouts: Timeouts,
    /// `retries`: the same-candidate retry budget (issue 32; `max: 0`, no
    /// retry, unless set).
    pub retries: failover::RetryBudget,
    /// `apiKey: "${VAR}"` resolved; becomes the `<id>:default` profile.
    pub env_key: Option<Secret>,
    /// `auth: none`: the provider takes no credential (a local server).
    /// Without it, an attempt with no profile for the provider is refused
    /// before it is sent (issue 35).
    pub keyless: bool,
    /// `models`: ids listed by `GET /v1/models`.
    pub models: Vec<String>,
    /// `models` as declared, with their context windows and continuation
    /// modes.
    pub model_info: Vec<ModelInfo>,
    /// Azure's `api-version` (`apiVersion`, else `$AZURE_OPENAI_API_VERSION`
    /// read at start, else the api's default), when the URL takes one.
    pub api_version: Option<String>,
    /// The AWS region (Bedrock): `region`, else the one in the
    /// `bedrock-runtime.{region}.amazonaws.com` base URL, else
    /// `$AWS_REGION` / `$AWS_DEFAULT_REGION` read at start.
    pub region: Option<String>,
    /// Bedrock without a `baseUrl`: the regional endpoint is built from
    /// the region (an `aws` profile's own region first).
    pub base_from_region: bool,
    /// Bedrock: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
    /// `AWS_SESSION_TOKEN`, read at start; becomes the `<id>:default`
    /// profile (kind `aws`) unless a key (`apiKey`,
    /// `AWS_BEARER_TOKEN_BEDROCK`) is given.
    pub(crate) env_aws: Option<crate::aws::AwsCredentials>,
    /// [`Upstream::endpoint`] parsed once, when the config is read: parsing
    /// a URL per request was about 10% of the gateway's own instructions
    /// (callgrind, benches/README.md "Gateway").
    endpoint_uri: axum::http::Uri,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("id", &self.id)
            .field("base_url", &self.base_url)
            .field("api", &self.api)
            .field("timeouts", &self.timeouts)
            .field("env_key", &self.env_key.as_ref().map(|_| "<redacted>"))
            .field("env_aws", &self.env_aws)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// The endpoint URL (DESIGN: OpenAI's base URL ends in `/v1`,
    /// Anthropic's does not).
    pub fn endpoint(&self) -> String {
        endpoint_of(&self.base_url, self.api, self.api_version.as_deref())
    }

    /// Whether the URL names the model (Gemini; Azure's classic
    /// deployment URLs), so that it is built per call.
    fn per_model(&self) -> bool {
        match self.api {
            Api::GoogleGenerativeAi | Api::BedrockConverseStream => true,
            Api::AzureOpenAiCompletions => !self.base_url.ends_with("/openai/v1"),
            _ => false,
        }
    }

    /// The URI of a call for `model`: [`Upstream::endpoint_uri`], or,
    /// when the URL names the model, built for it (a model id with
    /// characters a path segment cannot hold is refused, never encoded
    /// into another path).
    pub fn uri_for(&self, model: &str, stream: bool) -> Result<axum::http::Uri, String> {
        self.uri_in(model, stream, None)
    }

    /// The AWS region a Bedrock call is signed for, given the profile's
    /// own region: the profile's when the endpoint is built from the
    /// region, else the provider's (`region`, the base URL's host, the
    /// environment), else the profile's.
    pub(crate) fn signing_region<'a>(&'a self, profile: Option<&'a str>) -> Option<&'a str> {
        if self.base_from_region {
            profile.or(self.region.as_deref())
        } else {
            self.region.as_deref().or(profile)
        }
    }

    /// [`Upstream::uri_for`], in `region` when the endpoint is built from
    /// the region (Bedrock without a `baseUrl`).
    pub(crate) fn uri_in(
        &self,
        model: &str,
        stream: bool,
        region: Option<&str>,
    ) -> Result<axum::http::Uri, String> {
        if !self.per_model() {
            return Ok(self.endpoint_uri.clone());
        }
        if self.api == Api::BedrockConverseStream {
            // A Smithy label: every byte outside the unreserved set
            // percent-encoded (`:` → `%3A`, `/` → `%2F`).
            if model.is_empty() || model.len() > 2048 {
                return Err("a Bedrock model id is 1 to 2048 bytes".into());
            }
            let mut label = String::with_capacity(model.len() * 3);
            for b in model.bytes() {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    label.push(b as char);
                } else {
                    label.push_str(&format!("%{b:02X}"));
                }
            }
            let op = if stream {
                "converse-stream"
            } else {
                "converse"
            };
            let base = match region {
                // Issue 44 item 12: a profile's region becomes the host;
                // only a region name may (the provider's is checked when
                // the config is read).
                Some(r) if self.base_from_region && !is_region(r) => {
                    return Err(format!(
                        "the AWS region of the profile for `{}` is not a region name (like `us-east-1`); the call was not made",
                        self.id
                    ))
                }
                Some(r) if self.base_from_region => {
                    format!("https://bedrock-runtime.{r}.amazonaws.com")
                }
                _ => self.base_url.clone(),
            };
            let url = format!("{base}/model/{label}/{op}");
            return axum::http::Uri::try_from(url).map_err(|e| format!("not a valid URL: {e}"));
        }
        let (prefix, id) = match model.split_once('/') {
            Some((p @ ("models" | "tunedModels"), id)) if self.api == Api::GoogleGenerativeAi => {
                (p, id)
            }
            _ => ("models", model),
        };
        let ok = !id.is_empty()
            && id != "."
            && id != ".."
            && id.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'@')
            });
        if !ok {
            return Err(format!(
                "model id `{}` cannot be put in {}'s URL",
                model.chars().take(80).collect::<String>(),
                self.api.name()
            ));
        }
        let url = match self.api {
            Api::GoogleGenerativeAi if stream => format!(
                "{}/{prefix}/{id}:streamGenerateContent?alt=sse",
                self.base_url
            ),
            Api::GoogleGenerativeAi => format!("{}/{prefix}/{id}:generateContent", self.base_url),
            _ => format!(
                "{}/openai/deployments/{id}/chat/completions?api-version={}",
                self.base_url,
                self.api_version
                    .as_deref()
                    .unwrap_or(AZURE_CHAT_API_VERSION)
            ),
        };
        axum::http::Uri::try_from(url).map_err(|e| format!("not a valid URL: {e}"))
    }

    /// How `model` continues a broken answer: as declared, else the
    /// `api`'s default.
    pub fn continuation(&self, model: &str) -> Continuation {
        self.model_info
            .iter()
            .find(|m| m.id == model)
            .and_then(|m| m.continuation)
            .unwrap_or(Continuation::default_for(self.api))
    }

    /// The declared context window of `model`, in tokens.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.model_info
            .iter()
            .find(|m| m.id == model)
            .and_then(|m| m.context_window)
    }

    /// [`Upstream::endpoint`], parsed (and normalised as a URL).
    pub fn endpoint_uri(&self) -> &axum::http::Uri {
        &self.endpoint_uri
    }
}

/// Azure's classic chat deployments' `api-version` when none is set (the
/// last GA, `2024-10-21`).
const AZURE_CHAT_API_VERSION: &str = "2024-10-21";
/// Azure's classic Responses `api-version` when none is set (openclaw's
/// default).
const AZURE_RESPONSES_API_VERSION: &str = "preview";

fn endpoint_of(base_url: &str, api: Api, api_version: Option<&str>) -> String {
    let v1 = base_url.ends_with("/openai/v1");
    let query = |default: &str| match (api_version, v1) {
        (Some(v), _) => format!("?api-version={v}"),
        (None, true) => String::new(),
        (None, false) => format!("?api-version={default}"),
    };
    match api {
        Api::OpenAiCompletions => format!("{base_url}/chat/completions"),
        Api::AnthropicMessages => format!("{base_url}/v1/messages"),
        Api::OpenAiResponses => format!("{base_url}/responses"),
        // The model is in the path: built per call (`uri_for`); this is
        // the form the config check parses.
        Api::GoogleGenerativeAi => format!("{base_url}/models/m:generateContent"),
        Api::AzureOpenAiResponses if v1 => {
            format!("{base_url}/responses{}", query(AZURE_RESPONSES_API_VERSION))
        }
        Api::AzureOpenAiResponses => format!(
            "{base_url}/openai/responses{}",
            query(AZURE_RESPONSES_API_VERSION)
        ),
        Api::AzureOpenAiCompletions if v1 => {
            format!(
                "{base_url}/chat/completions{}",
                query(AZURE_CHAT_API_VERSION)
            )
        }
        Api::AzureOpenAiCompletions => format!(
            "{base_url}/openai/deployments/m/chat/completions{}",
            query(AZURE_CHAT_API_VERSION)
        ),
        Api::BedrockConverseStream => format!("{base_url}/model/m/converse"),
    }
}

/// `serve.clientAuth` (SPEC R18.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuthMode {
    /// Every request but `/healthz` and `/readyz` needs a client key.
    Required,
    /// Anyone who reaches the gateway may use it.
    Off,
}

/// The `serve` block: limits of the gateway itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeSettings {
    /// A request body larger than this is refused with 413 before it is
    /// read whole.
    pub max_body_bytes: usize,
    /// Requests served at once; one more gets 503 with `Retry-After`.
    pub max_concurrent: usize,
    /// How long in-flight requests may finish after SIGTERM / Ctrl-C.
    pub shutdown_grace: Duration,
    /// `serve.continuation.maxBytes`: the most text of a stream kept so
    /// that another candidate can continue it after a break (issue 44
    /// item 1); a longer answer is relayed whole but not continued.
    pub continuation_max_bytes: usize,
    /// `serve.requestTimeoutMs`: the whole chain of one request — every
    /// attempt, retry and wait, a stream's relay included — ends within it
    /// (issue 44 item 7). Unwritten: 10 minutes, or the longest `totalMs`
    /// of a provider when that is longer.
    pub request_timeout: Duration,
    /// Upstream bodies held in memory at once, all requests together
    /// (whole answers being read or translated, error heads): a new
    /// answer that would go past it is refused with a clear error rather
    /// than read (issue 30). Takes effect at the next start.
    pub max_buffered_bytes: usize,
    /// `serve.maxRequestBufferedBytes`: the share of
    /// [`max_buffered_bytes`](Self::max_buffered_bytes) one request may
    /// hold at once (issue 44), so that one large answer cannot take the
    /// whole budget from the others. Unwritten: half the budget. Takes
    /// effect at the next start.
    pub max_request_buffered_bytes: Option<usize>,
    /// `serve.clientAuth`; unwritten: decided at start (SPEC R18.6).
    pub client_auth: Option<ClientAuthMode>,
    /// `serve.metricsToken: "${VAR}"`: the bearer token `/metrics` asks
    /// for (SPEC R18.2); none: `/metrics` is open.
    pub metrics_token: Option<Secret>,
}

impl ServeSettings {
    /// 16 MiB holds a long conversation with a few images as base64;
    /// 1,024 requests at once is far past what one 2-core gateway answers
    /// while each holds at most one body in memory; 10 s lets a short
    /// answer finish; 256 MiB of upstream bodies is four answers at the
    /// per-answer limit (64 MiB) or thousands of ordinary ones. A request
    /// gets 10 minutes in all: the default `totalMs` of one attempt, so a
    /// chain never takes longer than its slowest single answer could. A
    /// stream is continuable for its first MiB of text (some 250,000
    /// tokens, past the longest outputs models give), which also bounds
    /// the prefill a continuation sends.
    pub const DEFAULT: ServeSettings = ServeSettings {
        max_body_bytes: 16 << 20,
        max_concurrent: 1024,
        shutdown_grace: Duration::from_secs(10),
        request_timeout: Duration::from_secs(600),
        continuation_max_bytes: 1 << 20,
        max_buffered_bytes: 256 << 20,
        max_request_buffered_bytes: None,
        client_auth: None,
        metrics_token: None,
    };
}

/// Which evidence model the gateway consults (the config's `classify:`
/// block; docs/model.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum ModelSetting {
    /// Not written: the embedded model, unless the default rules are left
    /// out (`--no-defaults`).
    #[default]
    Unset,
    /// `builtin`: the embedded model.
    Builtin,
    /// `off`: the rules alone.
    Off,
    /// A model file from `failover model train`, relative to the config
    /// file's directory.
    Path(std::path::PathBuf),
}

/// The config's `classify:` block.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ClassifySettings {
    /// `model`.
    pub(crate) model: ModelSetting,
    /// `minConfidence`: the probability the model's top reason needs.
    pub(crate) min_confidence: Option<f32>,
}

/// Reads the config's `classify:` block; problems name their key path.
pub(crate) fn classify_settings(text: &str) -> Result<ClassifySettings, Vec<UpstreamProblem>> {
    let mut out = ClassifySettings::default();
    let mut problems = Vec::new();
    let Ok(mut root) = serde_yaml::from_str::<Value>(text) else {
        return Ok(out);
    };
    let _ = root.apply_merge();
    let Some(block) = root.as_mapping().and_then(|r| get(r, "classify")) else {
        return Ok(out);
    };
    let map = match block {
        Value::Mapping(m) => m,
        Value::Null => return Ok(out),
        _ => {
            return Err(vec![UpstreamProblem {
                path: "classify".into(),
                message: "expected a mapping (`model`, `minConfidence`)".into(),
            }])
        }
    };
    for (k, v) in map {
        let Some(name) = key_of(k) else { continue };
        let path = format!("classify.{name}");
        match name {
            "model" => match v.as_str() {
                Some("builtin") => out.model = ModelSetting::Builtin,
                Some("off") => out.model = ModelSetting::Off,
                Some(p) if !p.trim().is_empty() => out.model = ModelSetting::Path(p.into()),
                _ => problems.push(UpstreamProblem {
                    path,
                    message: "expected `builtin`, `off` or the path of a model file".into(),
                }),
            },
            "minConfidence" => match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => out.min_confidence = Some(p as f32),
                _ => problems.push(UpstreamProblem {
                    path,
                    message: "expected a probability between 0 and 1".into(),
                }),
            },
            _ => problems.push(UpstreamProblem {
                path,
                message: "unknown key: expected `model` or `minConfidence`".into(),
            }),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Every upstream of a config, by provider id.
#[derive(Clone, Debug, Default)]
pub struct Upstreams {
    pub providers: BTreeMap<String, Upstream>,
}

impl Upstreams {
    pub fn get(&self, provider: &str) -> Option<&Upstream> {
        self.providers.get(&provider.to_ascii_lowercase())
    }
}

/// A problem with `models.providers` or `serve`: the key path and what is
/// wrong, never the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamProblem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for UpstreamProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

fn key_of(v: &Value) -> Option<&str> {
    v.as_str()
}

fn get<'a>(map: &'a serde_yaml::Mapping, key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| key_of(k) == Some(key))
        .map(|(_, v)| v)
}

/// `${NAME}`: the whole value is one environment reference.
fn env_reference(s: &str) -> Option<&str> {
    let name = s.trim().strip_prefix("${")?.strip_suffix('}')?;
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(name)
}

fn millis(v: &Value, path: &str, problems: &mut Vec<UpstreamProblem>) -> Option<Duration> {
    match v.as_u64() {
        Some(ms) if ms > 0 => Some(Duration::from_millis(ms)),
        _ => {
            problems.push(UpstreamProblem {
                path: path.into(),
                message: "expected a positive whole number of milliseconds".into(),
            });
            None
        }
    }
}

/// Reads `models.providers` and `serve` from config text (already checked
/// by [`GatewayConfig::parse`](failover::GatewayConfig::parse)).
/// `env` looks up environment variables.
pub(crate) fn parse(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Upstreams, ServeSettings), Vec<UpstreamProblem>> {
    let mut problems = Vec::new();
    let mut out = Upstreams::default();
    let mut settings = ServeSettings::DEFAULT;
    let mut request_timeout_written = false;
    let mut root: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(_) => {
            return Err(vec![UpstreamProblem {
                path: String::new(),
                message: "the config is not valid YAML".into(),
            }])
        }
    };
    let _ = root.apply_merge();
    let Some(root) = root.as_mapping() else {
        return Ok((out, settings));
    };
    let providers = get(root, "models")
        .and_then(Value::as_mapping)
        .and_then(|m| get(m, "providers"));
    match providers {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(map)) => {
            for (k, v) in map {
                let Some(id) = key_of(k) else { continue };
                let path = format!("models.providers.{id}");
                if let Some(u) = provider(id, v, &path, env, &mut problems) {
                    out.providers.insert(u.id.clone(), u);
                }
            }
        }
        Some(_) => problems.push(UpstreamProblem {
            path: "models.providers".into(),
            message: "expected a mapping of provider ids to upstreams".into(),
        }),
    }
    if let Some(serve) = get(root, "serve") {
        match serve {
            Value::Mapping(m) => {
                for (k, v) in m {
                    let Some(name) = key_of(k) else { continue };
                    let path = format!("serve.{name}");
                    match name {
                        "maxBodyBytes" => match v.as_u64() {
                            Some(n) if n > 0 => {
                                settings.max_body_bytes = usize::try_from(n).unwrap_or(usize::MAX)
                            }
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected a positive whole number of bytes".into(),
                            }),
                        },
                        "maxConcurrentRequests" => match v.as_u64() {
                            Some(n) if n > 0 => {
                                settings.max_concurrent =
                                    usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20)
                            }
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected a positive whole number".into(),
                            }),
                        },
                        "shutdownGraceMs" => {
                            if let Some(d) = millis(v, &path, &mut problems) {
                                settings.shutdown_grace = d;
                            }
                        }
                        "continuation" => match v.get("maxBytes").and_then(Value::as_u64) {
                            Some(n) if v.as_mapping().is_some_and(|m| m.len() == 1) => {
                                settings.continuation_max_bytes =
                                    usize::try_from(n).unwrap_or(usize::MAX)
                            }
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected `{ maxBytes: N }` (bytes of text; 0: never continue)".into(),
                            }),
                        },
                        "requestTimeoutMs" => {
                            request_timeout_written = true;
                            if let Some(d) = millis(v, &path, &mut problems) {
                                settings.request_timeout = d;
                            }
                        }
                        "maxBufferedBytes" => match v.as_u64() {
                            Some(n) if n > 0 => {
                                settings.max_buffered_bytes =
                                    usize::try_from(n).unwrap_or(usize::MAX)
                            }
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected a positive whole number of bytes".into(),
                            }),
                        },
                        "maxRequestBufferedBytes" => match v.as_u64() {
                            Some(n) if n > 0 => {
                                settings.max_request_buffered_bytes =
                                    Some(usize::try_from(n).unwrap_or(usize::MAX))
                            }
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected a positive whole number of bytes".into(),
                            }),
                        },
                        "clientAuth" => match v.as_str().map(str::trim) {
                            Some("required") => {
                                settings.client_auth = Some(ClientAuthMode::Required)
                            }
                            Some("off") => settings.client_auth = Some(ClientAuthMode::Off),
                            _ => problems.push(UpstreamProblem {
                                path,
                                message: "expected `required` or `off`".into(),
                            }),
                        },
                        "metricsToken" => match v.as_str().map(str::trim) {
                            Some(t) => match env_reference(t) {
                                Some(name) => match env(name) {
                                    Some(val) if !val.trim().is_empty() => {
                                        settings.metrics_token = Some(Secret::new(val.trim()))
                                    }
                                    _ => problems.push(UpstreamProblem {
                                        path,
                                        message: format!(
                                            "environment variable `{name}` is not set or empty"
                                        ),
                                    }),
                                },
                                None => problems.push(UpstreamProblem {
                                    path,
                                    message: "a literal token is refused: secrets never live in the config; write `metricsToken: \"${ENV_VAR}\"`".into(),
                                }),
                            },
                            None => problems.push(UpstreamProblem {
                                path,
                                message: "expected an environment reference such as `\"${FAILOVER_METRICS_TOKEN}\"`".into(),
                            }),
                        },
                        _ => problems.push(UpstreamProblem {
                            path,
                            message: "unknown key: expected `maxBodyBytes`, `maxConcurrentRequests`, `maxBufferedBytes`, `maxRequestBufferedBytes`, `shutdownGraceMs`, `requestTimeoutMs`, `continuation`, `clientAuth` or `metricsToken`".into(),
                        }),
                    }
                }
            }
            Value::Null => {}
            _ => problems.push(UpstreamProblem {
                path: "serve".into(),
                message: "expected a mapping".into(),
            }),
        }
    }
    // Unwritten, a request's deadline is never shorter than one attempt
    // may take: a provider given a longer `totalMs` keeps it.
    if !request_timeout_written {
        let longest = out.providers.values().map(|u| u.timeouts.total).max();
        settings.request_timeout = settings.request_timeout.max(longest.unwrap_or_default());
    }
    if problems.is_empty() {
        Ok((out, settings))
    } else {
        Err(problems)
    }
}

/// The keys a provider's block may have (`models.providers.<id>`): every
/// other is ignored, warned about by `check --config` (issue 44 item 15).
pub(crate) const PROVIDER_KEYS: &[&str] = &[
    "baseUrl",
    "api",
    "apiKey",
    "auth",
    "apiVersion",
    "region",
    "timeouts",
    "retries",
    "models",
];

/// A credential written literally where the gateway does not read it: a
/// secret-named key (`api_key`, `token`, …) or a credential header under
/// `headers` (issue 44 item 15). The message never holds the value.
fn literal_secret_at(name: &str, v: &Value) -> Option<(String, String)> {
    let literal = |v: &Value| {
        v.as_str()
            .map(str::trim)
            .is_some_and(|s| !s.is_empty() && env_reference(s).is_none())
    };
    let lower = name.to_ascii_lowercase().replace(['_', '-'], "");
    let secret_named = [
        "key",
        "token",
        "secret",
        "password",
        "authorization",
        "bearer",
    ]
    .iter()
    .any(|w| lower.contains(w));
    if secret_named && literal(v) {
        return Some((
            name.to_string(),
            format!("a literal API key is refused; `{name}` is not read by the gateway: write `apiKey: \"${{ENV_VAR}}\"` (secrets never live in the config, SPEC R5)"),
        ));
    }
    if lower == "headers" {
        for (hk, hv) in v.as_mapping()? {
            let Some(h) = hk.as_str() else { continue };
            let hl = h.to_ascii_lowercase();
            let credential = matches!(
                hl.as_str(),
                "authorization"
                    | "proxy-authorization"
                    | "x-api-key"
                    | "api-key"
                    | "x-goog-api-key"
            ) || hl.contains("token")
                || hl.contains("secret");
            if credential && literal(hv) {
                return Some((
                    format!("{name}.{h}"),
                    format!("a literal API key is refused; `{name}` is not read by the gateway, and a credential header never lives in the config: write `apiKey: \"${{ENV_VAR}}\"` (SPEC R5)"),
                ));
            }
        }
    }
    None
}

/// Whether `name: v` under a provider is a literal credential (refused).
pub(crate) fn literal_secret(name: &str, v: &Value) -> bool {
    literal_secret_at(name, v).is_some()
}

fn provider(
    id: &str,
    v: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<UpstreamProblem>,
) -> Option<Upstream> {
    let Some(map) = v.as_mapping() else {
        problems.push(UpstreamProblem {
            path: path.into(),
            message: "expected a mapping with `baseUrl` and `api`".into(),
        });
        return None;
    };
    for (k, v) in map {
        let Some(name) = k.as_str() else { continue };
        if PROVIDER_KEYS.contains(&name) {
            continue;
        }
        if let Some((at, message)) = literal_secret_at(name, v) {
            problems.push(UpstreamProblem {
                path: format!("{path}.{at}"),
                message,
            });
        }
    }
    let mut bad = |key: &str, message: String| {
        problems.push(UpstreamProblem {
            path: format!("{path}.{key}"),
            message,
        })
    };
    let base_url = match get(map, "baseUrl").map(|v| v.as_str()) {
        Some(Some(s)) => {
            let s = s.trim().trim_end_matches('/');
            let rest = s
                .strip_prefix("http://")
                .or_else(|| s.strip_prefix("https://"));
            match rest {
                Some(rest) if !rest.is_empty() => {
                    let authority = rest.split('/').next().unwrap_or("");
                    if authority.contains('@') {
                        bad(
                            "baseUrl",
                            "a user or password in the URL is refused: secrets never live in the config (SPEC R5); put the key in auth-profiles.json".into(),
                        );
                        None
                    } else {
                        Some(s.to_string())
                    }
                }
                _ => {
                    bad("baseUrl", "expected an `http://` or `https://` URL".into());
                    None
                }
            }
        }
        Some(None) => {
            bad("baseUrl", "expected a URL string".into());
            None
        }
        None if get(map, "api").and_then(Value::as_str).map(str::trim)
            == Some("bedrock-converse-stream") =>
        {
            // Filled from the region below.
            Some(String::new())
        }
        None => {
            bad(
                "baseUrl",
                "missing: the upstream's base URL is required".into(),
            );
            None
        }
    };
    let api = match get(map, "api").map(|v| v.as_str()) {
        Some(Some(s)) => match Api::from_name(s.trim()) {
            Some(a) => Some(a),
            None => {
                bad("api", format!("unknown api: {}", Api::EXPECTED));
                None
            }
        },
        _ => {
            bad("api", format!("missing: {}", Api::EXPECTED));
            None
        }
    };
    let mut env_key = None;
    if let Some(v) = get(map, "apiKey") {
        match v.as_str().map(str::trim) {
            Some(s) => match env_reference(s) {
                Some(name) => match env(name) {
                    Some(val) if !val.trim().is_empty() => {
                        env_key = Some(Secret::new(val.trim()))
                    }
                    _ => bad(
                        "apiKey",
                        format!("environment variable `{name}` is not set or empty"),
                    ),
                },
                None => bad(
                    "apiKey",
                    "a literal API key is refused: secrets never live in the config (SPEC R5); store it in auth-profiles.json or write `apiKey: \"${ENV_VAR}\"`".into(),
                ),
            },
            None => bad(
                "apiKey",
                "expected an environment reference such as `\"${OPENAI_API_KEY}\"`".into(),
            ),
        }
    }
    let keyless = match get(map, "auth") {
        None => false,
        Some(v) if v.as_str().map(str::trim) == Some("none") => true,
        Some(_) => {
            bad(
                "auth",
                "expected `none` (a provider that takes no credential, such as a local server); credentials go in auth-profiles.json or `apiKey: \"${ENV_VAR}\"`".into(),
            );
            false
        }
    };
    if keyless && env_key.is_some() {
        bad(
            "auth",
            "`auth: none` and `apiKey` together: a keyless provider sends no key".into(),
        );
    }
    let api_version = match get(map, "apiVersion") {
        None => env("AZURE_OPENAI_API_VERSION").filter(|v| is_api_version(v)),
        Some(v) => match v.as_str().map(str::trim) {
            Some(s) if is_api_version(s) => Some(s.to_string()),
            _ => {
                bad(
                    "apiVersion",
                    "expected an Azure api-version such as `2024-10-21`, `preview` or `v1`".into(),
                );
                None
            }
        },
    };
    let region = match get(map, "region") {
        None => None,
        Some(v) => match v.as_str().map(str::trim) {
            Some(s) if is_region(s) => Some(s.to_string()),
            _ => {
                bad(
                    "region",
                    "expected an AWS region such as `us-east-1`".into(),
                );
                None
            }
        },
    };
    let mut timeouts = Timeouts::DEFAULT;
    let (mut first_token, mut idle) = (None, None);
    if let Some(t) = get(map, "timeouts") {
        match t.as_mapping() {
            Some(tm) => {
                for (k, v) in tm {
                    let Some(name) = key_of(k) else { continue };
                    let p = format!("{path}.timeouts.{name}");
                    let Some(d) = (match name {
                        "connectMs" | "firstByteMs" | "firstTokenMs" | "idleMs" | "totalMs" => {
                            millis(v, &p, problems)
                        }
                        _ => {
                            problems.push(UpstreamProblem {
                                path: p,
                                message: "unknown key: expected `connectMs`, `firstByteMs`, `firstTokenMs`, `idleMs` or `totalMs`".into(),
                            });
                            continue;
                        }
                    }) else {
                        continue;
                    };
                    match name {
                        "connectMs" => timeouts.connect = d,
                        "firstByteMs" => timeouts.first_byte = d,
                        "firstTokenMs" => first_token = Some(d),
                        "idleMs" => idle = Some(d),
                        _ => timeouts.total = d,
                    }
                }
            }
            None => problems.push(UpstreamProblem {
                path: format!("{path}.timeouts"),
                message: "expected a mapping of `connectMs`, `firstByteMs`, `firstTokenMs`, `idleMs`, `totalMs`".into(),
            }),
        }
    }
    // Unset, both follow `firstByteMs` (the documented defaults).
    timeouts.first_token = first_token.unwrap_or(timeouts.first_byte);
    timeouts.idle = idle.unwrap_or(timeouts.first_byte);
    let mut retries = failover::RetryBudget::DEFAULT;
    if let Some(t) = get(map, "retries") {
        match t.as_mapping() {
            Some(tm) => {
                for (k, v) in tm {
                    let Some(name) = key_of(k) else { continue };
                    let p = format!("{path}.retries.{name}");
                    let n = match v.as_u64() {
                        Some(n) => n,
                        None => {
                            problems.push(UpstreamProblem {
                                path: p,
                                message: "expected a whole number".into(),
                            });
                            continue;
                        }
                    };
                    match name {
                        "max" if n <= 10 => retries.max = n as u32,
                        "max" => problems.push(UpstreamProblem {
                            path: p,
                            message: "expected at most 10 retries".into(),
                        }),
                        "baseDelayMs" => retries.base_delay_ms = n,
                        "maxDelayMs" => retries.max_delay_ms = n,
                        _ => problems.push(UpstreamProblem {
                            path: p,
                            message: "unknown key: expected `max`, `baseDelayMs` or `maxDelayMs`"
                                .into(),
                        }),
                    }
                }
            }
            None => problems.push(UpstreamProblem {
                path: format!("{path}.retries"),
                message: "expected a mapping of `max`, `baseDelayMs`, `maxDelayMs`".into(),
            }),
        }
    }
    let mut models = Vec::new();
    let mut model_info = Vec::new();
    if let Some(Value::Sequence(list)) = get(map, "models") {
        for (i, m) in list.iter().enumerate() {
            let mut info = match m {
                Value::String(s) => ModelInfo {
                    id: s.trim().to_string(),
                    context_window: None,
                    continuation: None,
                },
                Value::Mapping(mm) => match get(mm, "id").and_then(Value::as_str) {
                    Some(id) => ModelInfo {
                        id: id.trim().to_string(),
                        context_window: None,
                        continuation: None,
                    },
                    None => continue,
                },
                _ => continue,
            };
            if let Value::Mapping(mm) = m {
                let p = format!("{path}.models[{i}]");
                match get(mm, "contextWindow") {
                    None => {}
                    Some(v) => match v.as_u64() {
                        Some(n) if n > 0 => info.context_window = Some(n),
                        _ => problems.push(UpstreamProblem {
                            path: format!("{p}.contextWindow"),
                            message: "expected a positive whole number of tokens".into(),
                        }),
                    },
                }
                match get(mm, "continuation") {
                    None => {}
                    Some(v) => match v.as_str().map(str::trim).and_then(Continuation::from_name) {
                        Some(c) => info.continuation = Some(c),
                        None => problems.push(UpstreamProblem {
                            path: format!("{p}.continuation"),
                            message: "expected `prefill`, `restart` or `none`".into(),
                        }),
                    },
                }
            }
            models.push(info.id.clone());
            model_info.push(info);
        }
    }
    let (mut base_url, api) = (base_url?, api?);
    // A Bedrock API key from the standard variable, read at start like
    // `apiKey: "${VAR}"`.
    if api == Api::BedrockConverseStream && env_key.is_none() && !keyless {
        env_key = env("AWS_BEARER_TOKEN_BEDROCK")
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret::new(v.trim()));
    }
    let api_version = api_version.filter(|_| api.is_azure());
    let region = match api {
        Api::BedrockConverseStream => region
            .or_else(|| region_of_host(&base_url))
            .or_else(|| crate::aws::region_from_env(env).filter(|r| is_region(r))),
        _ => None,
    };
    let env_aws = (api == Api::BedrockConverseStream && env_key.is_none() && !keyless)
        .then(|| crate::aws::AwsCredentials::from_env(env))
        .flatten();
    let base_from_region = base_url.is_empty();
    if base_url.is_empty() {
        match &region {
            Some(r) => base_url = format!("https://bedrock-runtime.{r}.amazonaws.com"),
            None => {
                problems.push(UpstreamProblem {
                    path: format!("{path}.baseUrl"),
                    message: "missing: give `baseUrl`, or `region` (or set AWS_REGION) for Bedrock's regional endpoint".into(),
                });
                return None;
            }
        }
    }
    // Read as a URL first (normalised: host case, percent-encoding), then
    // as the request URI the client sends.
    let parsed = url::Url::parse(&endpoint_of(&base_url, api, api_version.as_deref()))
        .map_err(|e| e.to_string())
        .and_then(|u| axum::http::Uri::try_from(u.as_str()).map_err(|e| e.to_string()));
    let endpoint_uri = match parsed {
        Ok(u) => u,
        Err(e) => {
            problems.push(UpstreamProblem {
                path: format!("{path}.baseUrl"),
                message: format!("not a valid URL: {e}"),
            });
            return None;
        }
    };
    Some(Upstream {
        id: id.trim().to_ascii_lowercase(),
        base_url,
        api,
        timeouts,
        retries,
        env_key,
        keyless,
        models,
        model_info,
        api_version,
        region,
        base_from_region,
        env_aws,
        endpoint_uri,
    })
}

/// An AWS region name (`us-east-1`, `eu-central-2`, `us-gov-west-1`).
fn is_region(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The region of a `bedrock-runtime[-fips].{region}.amazonaws.com` URL.
fn region_of_host(base_url: &str) -> Option<String> {
    let host = base_url.split("://").nth(1)?.split(['/', ':']).next()?;
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest.strip_suffix(".amazonaws.com")?;
    is_region(region).then(|| region.to_string())
}

/// An `api-version` value: letters, digits, `-`, `.` (it goes in a query).
fn is_api_version(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TEST_KEY").then(|| "sk-from-env-0123456789".to_string())
    }

    // SPEC R5, R16.11: a literal key is refused without being echoed.
    #[test]
    fn r5_literal_api_key_is_refused_unechoed() {
        let text = "models:\n  providers:\n    openai:\n      baseUrl: http://127.0.0.1:1/v1\n      api: openai-completions\n      apiKey: sk-LITERAL-SECRET-123\n";
        let e = parse(text, &env).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].path, "models.providers.openai.apiKey");
        assert!(e[0].message.contains("refused"));
        assert!(!e[0].to_string().contains("LITERAL"));
    }

    #[test]
    fn r5_env_reference_becomes_the_key() {
        let text = "models:\n  providers:\n    OpenAI:\n      baseUrl: http://127.0.0.1:1/v1/\n      api: openai-completions\n      apiKey: \"${TEST_KEY}\"\n      timeouts: { firstByteMs: 250 }\n";
        let (u, _) = parse(text, &env).unwrap();
        let o = u.get("openai").unwrap();
        assert_eq!(
            o.env_key.as_ref().unwrap().expose(),
            "sk-from-env-0123456789"
        );
        assert_eq!(o.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
        assert_eq!(o.timeouts.first_byte, Duration::from_millis(250));
        // Unset, first token and idle follow the first byte.
        assert_eq!(o.timeouts.first_token, Duration::from_millis(250));
        assert_eq!(o.timeouts.idle, Duration::from_millis(250));
        assert!(!format!("{o:?}").contains("sk-from-env"));
        let missing = text.replace("TEST_KEY", "NOPE_KEY");
        let e = parse(&missing, &env).unwrap_err();
        assert!(e[0].message.contains("`NOPE_KEY` is not set"));
    }

    #[test]
    fn urls_with_credentials_and_bad_apis_are_refused() {
        let text = "models:\n  providers:\n    a:\n      baseUrl: https://user:pw-SECRET@example.com\n      api: openai-completions\n    b:\n      baseUrl: ftp://x\n      api: grpc\n";
        let e = parse(text, &env).unwrap_err();
        let all: Vec<String> = e.iter().map(|p| p.to_string()).collect();
        assert_eq!(e.len(), 3, "{all:?}");
        assert!(!all.concat().contains("SECRET"));
        let anth = "models:\n  providers:\n    anthropic: { baseUrl: 'http://h:1', api: anthropic-messages }\n";
        let (u, _) = parse(anth, &env).unwrap();
        assert_eq!(
            u.get("anthropic").unwrap().endpoint(),
            "http://h:1/v1/messages"
        );
        assert_eq!(
            u.get("anthropic").unwrap().endpoint_uri().to_string(),
            "http://h:1/v1/messages"
        );
    }

    // The endpoint is parsed when the config is read, so a URL that does
    // not parse is a config problem, not a failure of every request.
    #[test]
    fn an_unparsable_base_url_is_a_config_problem() {
        let text = "models:
  providers:
    a: { baseUrl: 'http://exa mple.com:99999/v1', api: openai-completions }
";
        let e = parse(text, &env).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].path, "models.providers.a.baseUrl");
        assert!(
            e[0].message.starts_with("not a valid URL"),
            "{}",
            e[0].message
        );
    }

    // Issue 44 item 7: `serve.requestTimeoutMs` as written; unwritten, 10
    // minutes or the longest `totalMs`, whichever is longer.
    #[test]
    fn i44_7_request_timeout_defaults_to_the_longest_attempt() {
        let p = |extra: &str| {
            let text = format!("models:\n  providers:\n    a:\n      baseUrl: http://h:1/v1\n      api: openai-completions\n      timeouts: {{ totalMs: 1800000 }}\n    b: {{ baseUrl: 'http://h:1/v1', api: openai-completions }}\n{extra}");
            parse(&text, &|_: &str| None).unwrap().1.request_timeout
        };
        assert_eq!(p(""), Duration::from_secs(1800));
        assert_eq!(
            p("serve:\n  requestTimeoutMs: 5000\n"),
            Duration::from_secs(5)
        );
        let text =
            "models:\n  providers:\n    b: { baseUrl: 'http://h:1/v1', api: openai-completions }\n";
        assert_eq!(
            parse(text, &|_: &str| None).unwrap().1.request_timeout,
            Duration::from_secs(600)
        );
    }

    // Issue 32 item 3: every deadline is read; an unknown key is named.
    #[test]
    fn timeouts_are_read_each_with_its_default() {
        let text = "models:\n  providers:\n    a:\n      baseUrl: http://h:1/v1\n      api: openai-completions\n      timeouts: { connectMs: 1, firstByteMs: 2, firstTokenMs: 3, idleMs: 4, totalMs: 5 }\n    b: { baseUrl: 'http://h:1/v1', api: openai-completions }\n";
        let (u, _) = parse(text, &env).unwrap();
        let t = u.get("a").unwrap().timeouts;
        let ms = Duration::from_millis;
        assert_eq!(
            (t.connect, t.first_byte, t.first_token, t.idle, t.total),
            (ms(1), ms(2), ms(3), ms(4), ms(5))
        );
        assert_eq!(u.get("b").unwrap().timeouts, Timeouts::DEFAULT);
        assert_eq!(u.get("b").unwrap().retries.max, 0, "no retry unless asked");
        let r = "models:\n  providers:\n    a:\n      baseUrl: http://h:1/v1\n      api: openai-completions\n      retries: { max: 2, baseDelayMs: 100, maxDelayMs: 400 }\n";
        let (u, _) = parse(r, &env).unwrap();
        let b = u.get("a").unwrap().retries;
        assert_eq!((b.max, b.base_delay_ms, b.max_delay_ms), (2, 100, 400));
        let e = parse(&r.replace("max: 2", "max: 99"), &env).unwrap_err();
        assert_eq!(e[0].path, "models.providers.a.retries.max");
        assert_eq!(Timeouts::DEFAULT.first_byte, Duration::from_secs(120));
        let e = parse(&text.replace("idleMs", "stallMs"), &env).unwrap_err();
        assert_eq!(e[0].path, "models.providers.a.timeouts.stallMs");
        assert!(e[0].message.contains("`firstTokenMs`, `idleMs`"));
    }

    // Issue 32: models may declare a context window and a continuation
    // mode; the modes default per `api`; bad values are named.
    #[test]
    fn models_declare_windows_and_continuation() {
        let text = "models:\n  providers:\n    a:\n      baseUrl: http://h:1/v1\n      api: openai-completions\n      models: [plain, { id: big, contextWindow: 200000, continuation: prefill }]\n    b:\n      baseUrl: http://h:1\n      api: anthropic-messages\n      models: [{ id: c, continuation: none }, d]\n";
        let (u, _) = parse(text, &env).unwrap();
        let a = u.get("a").unwrap();
        assert_eq!(a.models, ["plain", "big"]);
        assert_eq!(a.continuation("plain"), Continuation::Restart);
        assert_eq!(a.continuation("big"), Continuation::Prefill);
        assert_eq!(a.context_window("big"), Some(200_000));
        assert_eq!(a.context_window("plain"), None);
        let b = u.get("b").unwrap();
        assert_eq!(b.continuation("c"), Continuation::None);
        assert_eq!(b.continuation("d"), Continuation::Prefill);
        assert_eq!(b.continuation("unlisted"), Continuation::Prefill);
        let bad = text
            .replace("contextWindow: 200000", "contextWindow: -1")
            .replace("continuation: none", "continuation: splice");
        let e = parse(&bad, &env).unwrap_err();
        let paths: Vec<&str> = e.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "models.providers.a.models[1].contextWindow",
                "models.providers.b.models[0].continuation"
            ]
        );
    }

    // Issue 33: Bedrock's credentials and region come from the AWS
    // environment, read at start (never the config); the endpoint is the
    // region's when no `baseUrl` is given; a Bedrock API key wins.
    #[test]
    fn bedrock_reads_the_aws_environment() {
        let aws_env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIAIOSFODNN7EXAMPLE".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+SECRET".to_string()),
            "AWS_REGION" => Some("eu-west-1".to_string()),
            _ => None,
        };
        let text = "models:\n  providers:\n    bedrock:\n      api: bedrock-converse-stream\n      models: ['us.anthropic.claude-sonnet-4-5-20250929-v1:0']\n";
        let (u, _) = parse(text, &aws_env).unwrap();
        let b = u.get("bedrock").unwrap();
        assert_eq!(b.region.as_deref(), Some("eu-west-1"));
        assert_eq!(
            b.base_url,
            "https://bedrock-runtime.eu-west-1.amazonaws.com"
        );
        assert!(b.base_from_region);
        let creds = b.env_aws.as_ref().unwrap();
        assert_eq!(creds.access_key_id, "AKIAIOSFODNN7EXAMPLE");
        assert!(!format!("{b:?}").contains("SECRET"));
        assert_eq!(
            b.uri_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0", true)
                .unwrap()
                .to_string(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        // The profile's region moves a region-built endpoint.
        assert_eq!(b.signing_region(Some("us-west-2")), Some("us-west-2"));
        assert_eq!(
            b.uri_in("m", false, Some("us-west-2")).unwrap().to_string(),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/m/converse"
        );
        // Issue 44 item 12: a profile's region that is not a region name
        // never becomes a host (it would send the signed request there).
        for bad in [
            "x@127.0.0.1:9/#",
            "us-east-1.evil.example",
            "US-EAST-1",
            "",
            "a/b",
        ] {
            let e = b.uri_in("m", true, Some(bad)).unwrap_err();
            assert!(e.contains("not a region name"), "{bad}: {e}");
            assert!(bad.is_empty() || !e.contains(bad), "{e}");
        }
        // A region on the provider, or in its host, wins over the
        // environment; an explicit host keeps its region.
        let explicit = text.replace(
            "      api:",
            "      baseUrl: https://bedrock-runtime.ap-south-1.amazonaws.com\n      api:",
        );
        let (u, _) = parse(&explicit, &aws_env).unwrap();
        let b = u.get("bedrock").unwrap();
        assert_eq!(b.region.as_deref(), Some("ap-south-1"));
        assert_eq!(b.signing_region(Some("us-west-2")), Some("ap-south-1"));
        let (u, _) = parse(
            &text.replace("      api:", "      region: us-east-2\n      api:"),
            &aws_env,
        )
        .unwrap();
        assert_eq!(
            u.get("bedrock").unwrap().region.as_deref(),
            Some("us-east-2")
        );
        // A Bedrock API key: Bearer, no access key read.
        let with_token = |name: &str| match name {
            "AWS_BEARER_TOKEN_BEDROCK" => Some("bedrock-api-key-0123".to_string()),
            other => aws_env(other),
        };
        let (u, _) = parse(text, &with_token).unwrap();
        let b = u.get("bedrock").unwrap();
        assert!(b.env_aws.is_none());
        assert_eq!(b.env_key.as_ref().unwrap().expose(), "bedrock-api-key-0123");
        // No region anywhere, no baseUrl: named.
        let e = parse(text, &|_: &str| None).unwrap_err();
        assert_eq!(e[0].path, "models.providers.bedrock.baseUrl");
        assert!(parse(
            &text.replace("      api:", "      region: 'us east'\n      api:"),
            &aws_env
        )
        .is_err());
    }

    #[test]
    fn serve_settings() {
        let (_, s) = parse(
            "serve: { maxBodyBytes: 1000, maxConcurrentRequests: 3, shutdownGraceMs: 50 }",
            &env,
        )
        .unwrap();
        assert_eq!(s.max_body_bytes, 1000);
        assert_eq!(s.max_concurrent, 3);
        assert_eq!(s.shutdown_grace, Duration::from_millis(50));
        assert!(parse("serve: { maxBody: 1 }", &env).is_err());
    }
}
