//! The AWS pieces of the `bedrock-converse-stream` upstream (issue 33):
//! credentials from the standard environment, AWS Signature Version 4 on
//! each request, and the `application/vnd.amazon.eventstream` decoder of
//! `ConverseStream` answers ([`eventstream`]).
//!
//! Signing goes through AWS's own `aws-sigv4` crate, not code of ours: a
//! mistake there is a 403 on every request, or worse, a signature that
//! verifies for a request other than the one sent. The test kit's
//! independent verifier (`failover_testkit::aws::verify_sigv4`) checks what
//! it produces, and the tests below check it against AWS's published test
//! vectors.
//!
//! Secrets stay out of every `Debug` and `Display` here: [`AwsCredentials`]
//! shows the access key id masked and never the secret or the session
//! token; [`SignError`] names what is wrong, never a value.
//!
//! For the upstream that uses this (a checklist, not yet code):
//!
//! - read [`AwsCredentials::from_env`] and [`region_from_env`] once at
//!   start, like the `${VAR}` keys, and add the secret access key and the
//!   session token to the gateway's redactor (`failover::Redactor::new`),
//!   as the stored profiles' are (`failover`'s `secrets_of` does that for
//!   `aws` profiles);
//! - an `aws` profile (`failover::state::Credential::Aws`) gives the same
//!   three parts and maybe a region; issue 33 names three places for the
//!   region (the profile, the environment, `models.providers.<id>.region`)
//!   and leaves their order to the upstream;
//! - set every header to be signed (`content-type: application/json`,
//!   `accept`) first, then [`sign`] with service `bedrock` just before each
//!   attempt is sent (the clock must be within 5 minutes of AWS's), and
//!   add nothing after; the model id in the path is percent-encoded as a
//!   label (`:` as `%3A`, `/` as `%2F`);
//! - feed the `ConverseStream` body's chunks to an [`EventStreamDecoder`],
//!   call `finish` at the end; an `exception` message's `event_type`
//!   (`throttlingException`) is Bedrock's exception name with its first
//!   letter lower-cased, its payload `{"message": "…"}`.

pub(crate) mod eventstream;

pub(crate) use eventstream::{EventStreamDecoder, EventStreamMessage};

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, HOST};
use http::{HeaderMap, Method, Uri};

/// One set of AWS credentials: an access key id, its secret, and the
/// session token of temporary (STS, SSO, role) credentials.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AwsCredentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &MaskedId(&self.access_key_id))
            .field("secret_access_key", &Redacted)
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| Redacted),
            )
            .finish()
    }
}

/// `<redacted>` in a `Debug`.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// An access key id as `AKIA…MPLE` (not a secret, AWS says, but it names
/// an account's key: the ends are enough to tell keys apart).
struct MaskedId<'a>(&'a str);

impl fmt::Debug for MaskedId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.0;
        let shown = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '?' })
                .collect()
        };
        match (
            id.get(..4),
            id.len().checked_sub(4).and_then(|i| id.get(i..)),
        ) {
            (Some(head), Some(tail)) if id.len() >= 16 => {
                write!(f, "\"{}…{}\"", shown(head), shown(tail))
            }
            _ => f.write_str("\"…\""),
        }
    }
}

impl AwsCredentials {
    /// The standard environment's credentials: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and, when set, `AWS_SESSION_TOKEN`. `None`
    /// unless the first two are set and not blank. `get` reads one
    /// variable (`|k| std::env::var(k).ok()` in the gateway, a map in
    /// tests). Values are trimmed: a pasted key often ends in a newline.
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let read = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Some(AwsCredentials {
            access_key_id: read("AWS_ACCESS_KEY_ID")?,
            secret_access_key: read("AWS_SECRET_ACCESS_KEY")?,
            session_token: read("AWS_SESSION_TOKEN"),
        })
    }
}

/// The region of the standard environment: `AWS_REGION`, else
/// `AWS_DEFAULT_REGION` (blank counts as unset).
pub(crate) fn region_from_env(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .into_iter()
        .find_map(|k| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        })
}

/// Why a request could not be signed. The text names the part that is
/// wrong (a header's name), never a credential or a header's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SignError {
    /// The URI has no host (it must be absolute: `https://host/path`).
    NoHost,
    /// The access key id or the secret access key is empty.
    MissingCredentials,
    /// A credential holds a character no HTTP header can carry.
    CredentialsNotText,
    /// A header's value is not visible ASCII, so it cannot be signed as
    /// AWS canonicalises it.
    HeaderNotText { header: String },
    /// The clock is before 1970 or past year 9999.
    Clock,
    /// `aws-sigv4`'s own error (its texts carry no secret).
    Signer(String),
}

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignError::NoHost => f.write_str("cannot sign a request whose URI has no host"),
            SignError::MissingCredentials => {
                f.write_str("cannot sign: the AWS access key id or secret access key is empty")
            }
            SignError::CredentialsNotText => f.write_str(
                "cannot sign: the AWS credentials hold a character an HTTP header cannot carry",
            ),
            SignError::HeaderNotText { header } => write!(
                f,
                "cannot sign: the value of header `{header}` is not visible ASCII"
            ),
            SignError::Clock => f.write_str("cannot sign: the clock is outside 1970–9999"),
            SignError::Signer(why) => write!(f, "cannot sign the request: {why}"),
        }
    }
}

impl std::error::Error for SignError {}

/// The headers [`sign`] writes (a request signed again loses the old ones
/// first).
const X_AMZ_DATE: &str = "x-amz-date";
const X_AMZ_SECURITY_TOKEN: &str = "x-amz-security-token";

/// Signs a request with AWS SigV4, in place: adds `host` (when absent;
/// from the URI, without a default port, as hyper sends it),
/// `x-amz-date`, `x-amz-security-token` (with a session token) and
/// `authorization`. Every other header present is signed too (except
/// `user-agent`, `transfer-encoding`, `x-amzn-trace-id`, which proxies
/// rewrite), so set `content-type` before signing and add nothing after.
/// The path is signed double-encoded (what every AWS service but S3
/// expects): a Bedrock model id's `:` is `%3A` on the wire, `%253A` in the
/// canonical request. No `x-amz-content-sha256` header is added (Bedrock
/// does not want one); the body's hash is signed all the same.
///
/// `service` is the signing name (`bedrock` for Bedrock Runtime), `now`
/// the signing time (AWS refuses a signature more than 5 minutes off:
/// sign each attempt just before it is sent).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sign(
    method: &Method,
    uri: &Uri,
    headers: &mut HeaderMap,
    body: &[u8],
    creds: &AwsCredentials,
    region: &str,
    service: &str,
    now: SystemTime,
) -> Result<(), SignError> {
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or(SignError::NoHost)?;
    if creds.access_key_id.trim().is_empty() || creds.secret_access_key.trim().is_empty() {
        return Err(SignError::MissingCredentials);
    }
    // `time` (inside aws-sigv4) formats years 1970–9999 only.
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) if d < Duration::from_secs(253_402_300_799) => {}
        _ => return Err(SignError::Clock),
    }
    // Visible ASCII, or the signer would refuse it (or worse, panic).
    let text = |s: &str| s.bytes().all(|b| (0x21..0x7f).contains(&b));
    if !text(&creds.access_key_id)
        || !text(&creds.secret_access_key)
        || creds.session_token.as_deref().is_some_and(|t| !text(t))
    {
        return Err(SignError::CredentialsNotText);
    }

    // A request signed before (a retry) is signed afresh.
    for old in [AUTHORIZATION.as_str(), X_AMZ_DATE, X_AMZ_SECURITY_TOKEN] {
        headers.remove(old);
    }
    if !headers.contains_key(HOST) {
        let default_port = matches!(
            (uri.scheme_str(), uri.port_u16()),
            (_, None) | (Some("https"), Some(443)) | (Some("http"), Some(80))
        );
        let value = match uri.port_u16() {
            Some(port) if !default_port => format!("{host}:{port}"),
            _ => host.to_string(),
        };
        let value = HeaderValue::from_str(&value).map_err(|_| SignError::NoHost)?;
        headers.insert(HOST, value);
    }

    let mut pairs = Vec::with_capacity(headers.len());
    for (name, value) in headers.iter() {
        let value = value
            .to_str()
            .ok()
            .filter(|_| !value.as_bytes().iter().any(|&b| b >= 0x80))
            .ok_or_else(|| SignError::HeaderNotText {
                header: name.as_str().to_string(),
            })?;
        pairs.push((name.as_str(), value));
    }

    let identity = Credentials::new(
        creds.access_key_id.trim(),
        creds.secret_access_key.trim(),
        creds.session_token.as_deref().map(|t| t.trim().to_string()),
        None,
        "failover",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into();
    let uri_text = uri.to_string();
    let request = SignableRequest::new(
        method.as_str(),
        uri_text.as_str(),
        pairs.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| SignError::Signer(e.to_string()))?;
    let (instructions, _signature) = aws_sigv4::http_request::sign(request, &params)
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into_parts();
    let (new_headers, _query) = instructions.into_parts();
    for h in new_headers {
        let mut value =
            HeaderValue::from_str(h.value()).map_err(|_| SignError::CredentialsNotText)?;
        value.set_sensitive(h.sensitive() || h.name() == AUTHORIZATION.as_str());
        headers.insert(HeaderName::from_static(h.name()), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_testkit::aws::verify_sigv4;

    /// The credentials of AWS's SigV4 test suite
    /// (`aws-signing-test-suite/v4/*/context.json`, as shipped in the
    /// aws-sigv4 1.6.6 crate).
    fn suite_creds(token: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: token.map(str::to_string),
        }
    }

    /// 2015-08-30T12:36:00Z, the suite's signing time.
    fn suite_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn header_pairs(h: &HeaderMap) -> Vec<(String, String)> {
        h.iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    // AWS's published vectors (header-signed-request.txt of get-vanilla,
    // post-vanilla, post-header-key-sort, get-vanilla-with-session-token):
    // the production signer writes exactly the suite's Authorization.
    #[test]
    fn signs_the_published_vectors() {
        /// Method, extra headers, session token, signed headers, signature.
        type Case = (
            &'static str,
            &'static [(&'static str, &'static str)],
            Option<&'static str>,
            &'static str,
            &'static str,
        );
        let cases: &[Case] = &[
            (
                "GET",
                &[],
                None,
                "host;x-amz-date",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            ),
            (
                "POST",
                &[],
                None,
                "host;x-amz-date",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            ),
            (
                "POST",
                &[("my-header1", "value1")],
                None,
                "host;my-header1;x-amz-date",
                "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
            ),
            (
                "GET",
                &[],
                Some("6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"),
                "host;x-amz-date;x-amz-security-token",
                "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
            ),
        ];
        for (method, extra, token, signed, signature) in cases {
            let mut h = HeaderMap::new();
            for (k, v) in *extra {
                h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
            }
            let creds = suite_creds(*token);
            sign(
                &method.parse().unwrap(),
                &"https://example.amazonaws.com/".parse().unwrap(),
                &mut h,
                b"",
                &creds,
                "us-east-1",
                "service",
                suite_time(),
            )
            .unwrap();
            assert_eq!(h["host"], "example.amazonaws.com");
            assert_eq!(h["x-amz-date"], "20150830T123600Z");
            assert_eq!(
                h["authorization"],
                format!("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders={signed}, Signature={signature}")
            );
            assert!(h["authorization"].is_sensitive());
            assert_eq!(
                h.get("x-amz-security-token").map(|v| v.to_str().unwrap()),
                *token
            );
            assert!(h.get("x-amz-content-sha256").is_none());
            // And the independent verifier agrees.
            verify_sigv4(
                method,
                "/",
                &header_pairs(&h),
                b"",
                &creds.secret_access_key,
                "us-east-1",
                "service",
            )
            .unwrap();
        }
    }

    fn bedrock_request(token: Option<&str>) -> (Method, Uri, HeaderMap, Vec<u8>, AwsCredentials) {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert(
            "accept",
            HeaderValue::from_static("application/vnd.amazon.eventstream"),
        );
        h.insert("user-agent", HeaderValue::from_static("failover/0.1"));
        let body = br#"{"messages":[{"role":"user","content":[{"text":"Hi"}]}],"inferenceConfig":{"maxTokens":64}}"#.to_vec();
        let creds = AwsCredentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: token.map(str::to_string),
        };
        (
            Method::POST,
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
                .parse()
                .unwrap(),
            h,
            body,
            creds,
        )
    }

    const PATH: &str = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream";

    // A Bedrock request as the upstream will send it: signed by the crate,
    // verified by the test kit's own implementation; one byte changed in
    // the body, the secret, a signed header, the path or the region and
    // the signature no longer verifies.
    #[test]
    fn a_signed_bedrock_request_verifies_and_any_change_breaks_it() {
        for token in [
            None,
            Some("IQoJb3JpZ2luX2VjEXAMPLETOKEN//////////wEaCXVzLWVhc3QtMSJHMEUCIQD"),
        ] {
            let (method, uri, mut h, body, creds) = bedrock_request(token);
            sign(
                &method,
                &uri,
                &mut h,
                &body,
                &creds,
                "us-west-2",
                "bedrock",
                SystemTime::now(),
            )
            .unwrap();
            assert_eq!(h["host"], "bedrock-runtime.us-west-2.amazonaws.com");
            let auth = h["authorization"].to_str().unwrap();
            assert!(
                auth.contains("SignedHeaders=accept;content-type;host;x-amz-date"),
                "{auth}"
            );
            assert!(!auth.contains("user-agent"), "{auth}");
            let pairs = header_pairs(&h);
            let secret = &creds.secret_access_key;
            let verify = |path: &str,
                          pairs: &[(String, String)],
                          body: &[u8],
                          secret: &str,
                          region: &str| {
                verify_sigv4("POST", path, pairs, body, secret, region, "bedrock")
            };
            verify(PATH, &pairs, &body, secret, "us-west-2").unwrap();

            let mut b = body.clone();
            b[10] ^= 1;
            assert!(verify(PATH, &pairs, &b, secret, "us-west-2").is_err());
            let mut s = secret.clone().into_bytes();
            s[0] ^= 1;
            let s = String::from_utf8(s).unwrap();
            assert!(verify(PATH, &pairs, &body, &s, "us-west-2").is_err());
            assert!(verify(PATH, &pairs, &body, secret, "us-east-1").is_err());
            assert!(verify(
                &PATH.replace("%3A", ":"),
                &pairs,
                &body,
                secret,
                "us-west-2"
            )
            .is_err());
            for changed in ["content-type", "host", "x-amz-date", "accept"] {
                let p: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(k, v)| {
                        let mut v = v.clone();
                        if k == changed {
                            v.push('x');
                        }
                        (k.clone(), v)
                    })
                    .collect();
                assert!(
                    verify(PATH, &p, &body, secret, "us-west-2").is_err(),
                    "{changed}"
                );
            }
            if token.is_some() {
                let p: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(k, v)| {
                        let v = if k == "x-amz-security-token" {
                            v.replace('E', "F")
                        } else {
                            v.clone()
                        };
                        (k.clone(), v)
                    })
                    .collect();
                assert!(verify(PATH, &p, &body, secret, "us-west-2").is_err());
            }
            // An unsigned header may change (a proxy's user-agent).
            let p: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if k == "user-agent" {
                            "other".into()
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect();
            verify(PATH, &p, &body, secret, "us-west-2").unwrap();
        }
    }

    // The path is signed double-encoded (AWS's `double-encode-path` vector:
    // `/test/@connections/JBDvjfGEIAMCERw%3D` is signed as
    // `/test/%40connections/JBDvjfGEIAMCERw%253D`), which the verifier
    // recomputes on its own.
    #[test]
    fn paths_are_signed_double_encoded() {
        let creds = suite_creds(None);
        let mut h = HeaderMap::new();
        sign(
            &Method::POST,
            &"https://tj9n5r0m12.execute-api.us-east-1.amazonaws.com/test/@connections/JBDvjfGEIAMCERw%3D"
                .parse()
                .unwrap(),
            &mut h,
            b"",
            &creds,
            "us-east-1",
            "service",
            suite_time(),
        )
        .unwrap();
        let pairs = header_pairs(&h);
        verify_sigv4(
            "POST",
            "/test/@connections/JBDvjfGEIAMCERw%3D",
            &pairs,
            b"",
            &creds.secret_access_key,
            "us-east-1",
            "service",
        )
        .unwrap();
    }

    // Signing twice (a retry) replaces the first signature; a URI with a
    // port keeps it in `host`.
    #[test]
    fn re_signing_and_ports() {
        let (method, _, mut h, body, creds) = bedrock_request(Some("tok"));
        let uri: Uri = "http://127.0.0.1:8123/model/m/converse".parse().unwrap();
        sign(
            &method,
            &uri,
            &mut h,
            &body,
            &creds,
            "us-east-1",
            "bedrock",
            suite_time(),
        )
        .unwrap();
        assert_eq!(h["host"], "127.0.0.1:8123");
        let no_token = AwsCredentials {
            session_token: None,
            ..creds.clone()
        };
        sign(
            &method,
            &uri,
            &mut h,
            &body,
            &no_token,
            "us-east-1",
            "bedrock",
            SystemTime::now(),
        )
        .unwrap();
        assert!(h.get("x-amz-security-token").is_none());
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        verify_sigv4(
            "POST",
            "/model/m/converse",
            &header_pairs(&h),
            &body,
            &creds.secret_access_key,
            "us-east-1",
            "bedrock",
        )
        .unwrap();
        let mut h = HeaderMap::new();
        let uri: Uri = "https://bedrock-runtime.eu-west-1.amazonaws.com:443/x"
            .parse()
            .unwrap();
        sign(
            &method,
            &uri,
            &mut h,
            b"",
            &creds,
            "eu-west-1",
            "bedrock",
            suite_time(),
        )
        .unwrap();
        assert_eq!(h["host"], "bedrock-runtime.eu-west-1.amazonaws.com");
    }

    // Bad input is an error that names no secret, never a panic.
    #[test]
    fn bad_input_is_an_error_without_secrets() {
        let (method, uri, h, body, creds) = bedrock_request(Some("SESSIONTOKENSECRET"));
        let run = |uri: &Uri, h: &mut HeaderMap, creds: &AwsCredentials, now: SystemTime| {
            sign(&method, uri, h, &body, creds, "us-west-2", "bedrock", now)
        };
        let relative: Uri = "/model/x/converse".parse().unwrap();
        assert_eq!(
            run(&relative, &mut h.clone(), &creds, SystemTime::now()),
            Err(SignError::NoHost)
        );
        let empty = AwsCredentials {
            secret_access_key: " ".into(),
            ..creds.clone()
        };
        assert_eq!(
            run(&uri, &mut h.clone(), &empty, SystemTime::now()),
            Err(SignError::MissingCredentials)
        );
        let newline = AwsCredentials {
            secret_access_key: "wJalrXUtnFEMI\nK7MDENG".into(),
            ..creds.clone()
        };
        assert_eq!(
            run(&uri, &mut h.clone(), &newline, SystemTime::now()),
            Err(SignError::CredentialsNotText)
        );
        let mut bad = h.clone();
        bad.insert("x-note", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let e = run(&uri, &mut bad, &creds, SystemTime::now()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot sign: the value of header `x-note` is not visible ASCII"
        );
        assert_eq!(
            run(
                &uri,
                &mut h.clone(),
                &creds,
                UNIX_EPOCH - Duration::from_secs(1)
            ),
            Err(SignError::Clock)
        );
        assert_eq!(
            run(
                &uri,
                &mut h.clone(),
                &creds,
                UNIX_EPOCH + Duration::from_secs(300_000_000_000)
            ),
            Err(SignError::Clock)
        );
        for e in [
            SignError::NoHost,
            SignError::MissingCredentials,
            SignError::CredentialsNotText,
            SignError::Clock,
            SignError::Signer("x".into()),
        ] {
            let text = format!("{e} {e:?}");
            assert!(
                !text.contains("EXAMPLEKEY") && !text.contains("SESSIONTOKEN"),
                "{text}"
            );
        }
    }

    #[test]
    fn credentials_and_region_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = AwsCredentials::from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"),
            (
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            ),
            ("AWS_SESSION_TOKEN", ""),
        ]))
        .unwrap();
        assert_eq!(
            c.secret_access_key,
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        );
        assert_eq!(c.session_token, None);
        let c = AwsCredentials::from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "ASIAIOSFODNN7EXAMPLE"),
            (
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            ("AWS_SESSION_TOKEN", "IQoJb3JpZ2luX2VjEXAMPLE"),
        ]))
        .unwrap();
        assert_eq!(c.session_token.as_deref(), Some("IQoJb3JpZ2luX2VjEXAMPLE"));
        let dbg = format!("{c:?}");
        assert_eq!(
            dbg,
            r#"AwsCredentials { access_key_id: "ASIA…MPLE", secret_access_key: <redacted>, session_token: Some(<redacted>) }"#
        );
        assert!(
            AwsCredentials::from_env(env(&[("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")]))
                .is_none()
        );
        assert!(AwsCredentials::from_env(env(&[
            ("AWS_ACCESS_KEY_ID", " "),
            ("AWS_SECRET_ACCESS_KEY", "s")
        ]))
        .is_none());
        let short = AwsCredentials {
            access_key_id: "AK\n".into(),
            secret_access_key: "s".into(),
            session_token: None,
        };
        assert!(format!("{short:?}").contains(r#"access_key_id: "…""#));

        assert_eq!(
            region_from_env(env(&[
                ("AWS_REGION", "eu-west-1"),
                ("AWS_DEFAULT_REGION", "us-east-1")
            ])),
            Some("eu-west-1".into())
        );
        assert_eq!(
            region_from_env(env(&[
                ("AWS_REGION", " "),
                ("AWS_DEFAULT_REGION", "us-east-1")
            ])),
            Some("us-east-1".into())
        );
        assert_eq!(region_from_env(env(&[])), None);
    }
}
