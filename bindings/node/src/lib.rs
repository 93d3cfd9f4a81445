//! The Node addon: the original classifier's two functions,
//! `classifyFailoverReason(message, {provider})` and
//! `resolveFailoverReasonFromError({status, message, provider, code})`,
//! with its argument and return shapes (a reason string, `null` where it
//! has none), plus `classify` and `explain` with the whole verdict, and an
//! `Engine` class for operator rules.
//!
//! Every function catches a panic (`catch_unwind`) and throws it as an
//! error: nothing here aborts the Node process.
//!
//! Thin on purpose: every verdict is the library's
//! ([`failover::Engine::classify`]); this crate converts JavaScript values
//! into a [`ProviderError`] and verdicts back. The one mapping is the one
//! the original's test vectors already state (`tests/vectors/openclaw.yaml`:
//! "null -> unclassified"): the engine's `unclassified` is the original's
//! `null`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use failover::{Body, Classification, ProviderError, Rules};
use napi::bindgen_prelude::{Object, Unknown};
use napi::{Error, JsValue, Result, Status, ValueType};
use napi_derive::napi;

/// The engine's verdict when nothing decided; the original returns `null`.
const UNCLASSIFIED: &str = "unclassified";

/// The embedded rules and model, built on first use.
fn default_engine() -> &'static failover::Engine {
    static ENGINE: OnceLock<failover::Engine> = OnceLock::new();
    ENGINE.get_or_init(failover::Engine::builtin)
}

/// The verdict on one error: the fields of a `failover classify` line.
#[napi(object, use_nullable = true)]
pub struct Verdict {
    /// `rate_limit`, `billing`, …; `unclassified` when nothing decided.
    pub reason: String,
    /// The deciding rule's id; null when no rule decided.
    pub rule: Option<String>,
    /// `rule`, `weak rule`, `model`, `status rule` or `none`.
    #[napi(js_name = "decided_by")]
    pub decided_by: String,
    /// Whether the reason continues the fallback.
    pub failover: bool,
    /// The model's probability, when the model decided (three decimals).
    pub probability: Option<f64>,
    /// The status used (given, from the body, or from the message text).
    pub status: Option<u32>,
    /// The message was judged on its first 1 MiB only.
    pub truncated: bool,
}

impl Verdict {
    fn of(c: &Classification<'_>) -> Self {
        Verdict {
            reason: c.reason.to_string(),
            rule: c.rule.map(str::to_string),
            decided_by: c.decided_by.as_str().to_string(),
            failover: c.failover,
            // As the output line prints it: the shortest decimal of the f32.
            probability: failover::stream::line_probability(c)
                .map(|p| p.to_string().parse().unwrap_or(f64::from(p))),
            status: c.status.map(u32::from),
            truncated: c.truncated,
        }
    }
}

/// How a verdict was reached (`failover classify --explain`).
#[napi(object, use_nullable = true)]
pub struct Explanation {
    /// The verdict.
    pub verdict: Verdict,
    /// The atoms (literal strings) found in the message, in order.
    pub atoms: Vec<String>,
    /// The readable account `failover classify --explain` prints.
    pub text: String,
}

/// One error's fields, read from JavaScript.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    code: Option<String>,
    error_type: Option<String>,
    body: Option<String>,
    status: Option<u16>,
}

impl Fields {
    fn error(&self) -> ProviderError<'_> {
        ProviderError {
            message: self.message.as_deref(),
            provider: self.provider.as_deref(),
            model: self.model.as_deref(),
            code: self.code.as_deref(),
            error_type: self.error_type.as_deref(),
            status: self.status,
            body: self.body.as_deref().map(Body::Text),
        }
    }

    /// `{message, status, provider, model, code, type, body}`: the
    /// `failover classify` input line's fields.
    fn read(obj: &Object<'_>) -> Result<Fields> {
        Ok(Fields {
            message: text(obj, "message")?,
            provider: text(obj, "provider")?,
            model: text(obj, "model")?,
            code: text(obj, "code")?,
            error_type: text(obj, "type")?,
            body: text(obj, "body")?,
            status: status(obj, "status")?,
        })
    }
}

fn invalid(message: String) -> Error {
    Error::new(Status::InvalidArg, message)
}

/// A string value; null and undefined are absent.
fn string_of(v: Unknown<'_>, name: &str) -> Result<Option<String>> {
    match v.get_type()? {
        ValueType::Null | ValueType::Undefined => Ok(None),
        ValueType::String => Ok(Some(v.coerce_to_string()?.into_utf8()?.into_owned()?)),
        t => Err(invalid(format!("`{name}` must be a string, not {t}"))),
    }
}

/// A property that is a string, or absent.
fn text(obj: &Object<'_>, name: &str) -> Result<Option<String>> {
    match obj.get::<Unknown>(name)? {
        None => Ok(None),
        Some(v) => string_of(v, name),
    }
}

/// An HTTP status: a number 100–599, or a string of those digits (as the
/// original and the JSONL contract take it); null and undefined are absent.
fn status(obj: &Object<'_>, name: &str) -> Result<Option<u16>> {
    let Some(v) = obj.get::<Unknown>(name)? else {
        return Ok(None);
    };
    let n = match v.get_type()? {
        ValueType::Null | ValueType::Undefined => return Ok(None),
        ValueType::Number => Some(v.coerce_to_number()?.get_double()?),
        ValueType::String => v
            .coerce_to_string()?
            .into_utf8()?
            .as_str()?
            .trim()
            .parse::<f64>()
            .ok(),
        t => {
            return Err(invalid(format!(
                "`{name}` must be a number or a string of digits, not {t}"
            )))
        }
    };
    match n {
        Some(s) if s.fract() == 0.0 && (100.0..=599.0).contains(&s) => Ok(Some(s as u16)),
        _ => Err(Error::new(
            Status::InvalidArg,
            format!("`{name}` must be an HTTP status code (an integer 100–599)"),
        )),
    }
}

/// The original's return value: the reason, `null` for `unclassified`.
fn original_reason(c: &Classification<'_>) -> Option<String> {
    (c.reason != UNCLASSIFIED).then(|| c.reason.to_string())
}

fn classify_failover_reason_with(
    engine: &failover::Engine,
    message: Unknown<'_>,
    options: Option<Object<'_>>,
) -> Result<Option<String>> {
    let fields = Fields {
        message: string_of(message, "message")?,
        provider: match &options {
            Some(o) => text(o, "provider")?,
            None => None,
        },
        ..Fields::default()
    };
    Ok(original_reason(&engine.classify(&fields.error())))
}

fn resolve_with(
    engine: &failover::Engine,
    err: Unknown<'_>,
    provider_hint: Option<String>,
) -> Result<Option<String>> {
    let fields = match err.get_type()? {
        ValueType::Null | ValueType::Undefined => return Ok(None),
        ValueType::String => Fields {
            message: string_of(err, "err")?,
            provider: provider_hint,
            ..Fields::default()
        },
        ValueType::Object => {
            let obj = err.coerce_to_object()?;
            let mut status = status(&obj, "status")?;
            if status.is_none() {
                status = self::status(&obj, "statusCode")?;
            }
            Fields {
                message: text(&obj, "message")?,
                provider: text(&obj, "provider")?.or(provider_hint),
                code: text(&obj, "code")?,
                error_type: text(&obj, "errorType")?,
                status,
                ..Fields::default()
            }
        }
        t => {
            return Err(invalid(format!(
                "`err` must be an error object or a string, not {t}"
            )))
        }
    };
    Ok(original_reason(&engine.classify(&fields.error())))
}

/// The original's `classifyFailoverReason(message, {provider})`: the
/// reason for an error message, or `null` when nothing in it decides.
#[napi(js_name = "classifyFailoverReason", catch_unwind)]
pub fn classify_failover_reason(
    message: Unknown<'_>,
    options: Option<Object<'_>>,
) -> Result<Option<String>> {
    classify_failover_reason_with(default_engine(), message, options)
}

/// The original's `resolveFailoverReasonFromError(err, providerHint?)`:
/// the reason for an error object (`status` or `statusCode`, `message`,
/// `provider`, `code`, `errorType`), or `null`.
#[napi(js_name = "resolveFailoverReasonFromError", catch_unwind)]
pub fn resolve_failover_reason_from_error(
    err: Unknown<'_>,
    provider_hint: Option<String>,
) -> Result<Option<String>> {
    resolve_with(default_engine(), err, provider_hint)
}

/// The whole verdict on one error, with the embedded rules and model.
#[napi(catch_unwind)]
pub fn classify(error: Object<'_>) -> Result<Verdict> {
    let fields = Fields::read(&error)?;
    Ok(Verdict::of(&default_engine().classify(&fields.error())))
}

/// How the embedded rules and model decide one error.
#[napi(catch_unwind)]
pub fn explain(error: Object<'_>) -> Result<Explanation> {
    explain_with(default_engine(), &error)
}

fn explain_with(engine: &failover::Engine, error: &Object<'_>) -> Result<Explanation> {
    let fields = Fields::read(error)?;
    let (c, ex) = engine.explain(&fields.error());
    Ok(Explanation {
        verdict: Verdict::of(&c),
        atoms: ex.atoms_hit.clone(),
        text: failover::rules::render_explanation(engine, &c, &ex),
    })
}

/// A ruleset of its own: operator rules directories over the embedded
/// defaults, and a model of choice.
#[napi]
pub struct Engine {
    inner: failover::Engine,
}

#[napi]
impl Engine {
    /// `new Engine({rules: [dir, …], sources: [[name, text], …], defaults:
    /// true, model: "embedded" | path | null, minConfidence: 0.9})`; every
    /// option is optional. Without `minConfidence`, the model decides at
    /// per-reason thresholds from the cost of each mistake (as `failover
    /// classify` does).
    #[napi(constructor, catch_unwind)]
    pub fn new(options: Option<Object<'_>>) -> Result<Self> {
        let mut builder = Rules::new();
        let mut model = Some("embedded".to_string());
        // None: the per-reason thresholds from the cost of each mistake,
        // as `failover classify` without `--min-confidence`.
        let mut min_confidence: Option<f32> = None;
        if let Some(o) = &options {
            for dir in o.get::<Vec<String>>("rules")?.unwrap_or_default() {
                builder = builder.dir(PathBuf::from(dir));
            }
            for pair in o.get::<Vec<Vec<String>>>("sources")?.unwrap_or_default() {
                let [name, text] = <[String; 2]>::try_from(pair)
                    .map_err(|_| invalid("each of `sources` must be a [name, text] pair".into()))?;
                builder = builder.source(name, text);
            }
            if o.get::<bool>("defaults")? == Some(false) {
                builder = builder.without_defaults();
            }
            if let Some(v) = o.get::<Unknown>("model")? {
                model = string_of(v, "model")?;
            }
            if let Some(p) = o.get::<f64>("minConfidence")? {
                if !(0.0..=1.0).contains(&p) {
                    return Err(invalid(format!(
                        "`minConfidence` must be a probability between 0 and 1, not {p}"
                    )));
                }
                min_confidence = Some(p as f32);
            }
        }
        let engine = builder
            .build()
            .map_err(|e| Error::new(Status::GenericFailure, rules_message(&e)))?;
        let inner = match model.as_deref() {
            None => engine,
            Some("embedded") => engine.with_model(failover::evidence::builtin(), min_confidence),
            Some(path) => {
                let m = failover::evidence::read_file(std::path::Path::new(path))
                    .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
                engine.with_model(Arc::new(m), min_confidence)
            }
        };
        Ok(Engine { inner })
    }

    /// The reasons the rules declare, in declaration order.
    #[napi(getter)]
    pub fn reasons(&self) -> Vec<String> {
        self.inner.reason_names().map(str::to_string).collect()
    }

    /// The whole verdict on one error.
    #[napi(catch_unwind)]
    pub fn classify(&self, error: Object<'_>) -> Result<Verdict> {
        let fields = Fields::read(&error)?;
        Ok(Verdict::of(&self.inner.classify(&fields.error())))
    }

    /// How this engine decides one error.
    #[napi(catch_unwind)]
    pub fn explain(&self, error: Object<'_>) -> Result<Explanation> {
        explain_with(&self.inner, &error)
    }

    /// `classifyFailoverReason` with this engine's rules.
    #[napi(js_name = "classifyFailoverReason", catch_unwind)]
    pub fn classify_failover_reason(
        &self,
        message: Unknown<'_>,
        options: Option<Object<'_>>,
    ) -> Result<Option<String>> {
        classify_failover_reason_with(&self.inner, message, options)
    }

    /// `resolveFailoverReasonFromError` with this engine's rules.
    #[napi(js_name = "resolveFailoverReasonFromError", catch_unwind)]
    pub fn resolve_failover_reason_from_error(
        &self,
        err: Unknown<'_>,
        provider_hint: Option<String>,
    ) -> Result<Option<String>> {
        resolve_with(&self.inner, err, provider_hint)
    }
}

/// The error of rules that cannot be used: the rendered diagnostics.
fn rules_message(e: &failover::errors::RulesError) -> String {
    match e {
        failover::errors::RulesError::Invalid(d) => {
            format!("the rules have errors:\n{}", d.render())
        }
        other => other.to_string(),
    }
}

/// One item of a labelled corpus file (the field corpus' format).
#[napi(object, use_nullable = true)]
pub struct CorpusItem {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub status: Option<u32>,
    pub code: Option<String>,
    #[napi(js_name = "type")]
    pub error_type: Option<String>,
    pub message: Option<String>,
    /// The body's text (a JSON body as its JSON text).
    pub body: Option<String>,
    /// The reason, or the defensible reasons, the SPEC gives the error.
    pub expected: Vec<String>,
    /// The line the item starts on.
    pub line: u32,
}

/// Reads a labelled corpus file (`tests/field/*.yaml`,
/// `tests/vectors/openclaw.yaml`) with the library's own reader.
#[napi(js_name = "readCorpus", catch_unwind)]
pub fn read_corpus(path: String) -> Result<Vec<CorpusItem>> {
    let text = std::fs::read_to_string(&path)
        .map_err(|e| invalid(format!("cannot read `{path}`: {e}")))?;
    let file = failover::field::parse(&path, &text).map_err(invalid)?;
    Ok(file
        .items
        .iter()
        .zip(&file.lines)
        .map(|(i, &line)| CorpusItem {
            provider: i.provider.clone(),
            model: i.model.clone(),
            status: i.status.map(u32::from),
            code: i.code.clone(),
            error_type: i.error_type.clone(),
            message: i.message.clone(),
            body: i
                .body
                .as_ref()
                .map(|b| b.as_str().map_or_else(|| b.to_string(), str::to_string)),
            expected: i.expected.as_slice().to_vec(),
            line: line as u32,
        })
        .collect())
}
