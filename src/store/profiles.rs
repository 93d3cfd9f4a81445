//! `auth-profiles.json`: the secrets file (SPEC R2.2, R2.3, R5.1, R5.4).
//!
//! The file is `{"version": 1, "profiles": {"<id>": {…}}}` where each profile
//! is one credential, told apart by `type`:
//!
//! | `type`    | fields                                                        |
//! |-----------|---------------------------------------------------------------|
//! | `api_key` | `provider`, `key` or `keyRef`                                 |
//! | `oauth`   | `provider`, `access`, `refresh`, `expires`, `email`?, …       |
//! | `token`   | `provider`, `token` or `tokenRef`, `expires`?                 |
//! | `aws`     | `provider`, `accessKeyId` or `accessKeyIdRef`, `secretAccessKey` or `secretAccessKeyRef`, `sessionToken`? or `sessionTokenRef`?, `region`? |
//!
//! An `aws` profile is one AWS account's access key for Bedrock (issue
//! 33): several of them rotate like API keys (SPEC R6.2 ranks them with
//! the keys). Unlike the other kinds, an `aws` entry without its key id or
//! its secret (neither the value nor a reference) is a problem of the
//! file, reported with the field's name; one whose key is there but blank
//! is kept and left out of rotation, as a blank API key is.
//!
//! Parsing is per profile and never fails the file: a profile with an
//! unknown `type`, no provider, or a field of the wrong type is reported as a
//! [`Problem`](super::Problem), kept verbatim (so a later write does not
//! destroy a secret the operator can still repair), and left out of
//! rotation. Fields this build does not know (`projectId`, `accountId`, …)
//! are kept and written back. Nothing here prints a secret: credential
//! strings are [`Secret`]s and the `Debug` of unknown fields shows their
//! names only.
//!
//! Worked example: the entry
//! `"openai:me@example.com": {"type": "oauth", "provider": "openai",
//! "access": "…", "refresh": "…", "expires": 1767225600000}` parses to a
//! [`Profile`] whose `credential` is [`Credential::OAuth`]; at
//! `now = 1767225600001` its access token has expired, but because a refresh
//! token exists [`Profile::unusable`] is `None` (the runtime can refresh) and
//! [`Profile::oauth_expired`] is true, so round-robin tries live OAuth
//! logins first.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::json::{kind, opt_ms, opt_str};
use super::secret::Secret;
use super::state::AuthState;
use super::Problem;
use crate::store::clock::format_utc;

/// The kind of a credential (`type` in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialKind {
    /// An OAuth access token with its refresh token.
    OAuth,
    /// A static bearer token (possibly expiring).
    Token,
    /// An API key.
    ApiKey,
    /// An AWS access key (id, secret, optional session token) for SigV4.
    Aws,
}

impl CredentialKind {
    /// Every kind, in the order `status` lists them.
    pub const ALL: [CredentialKind; 4] = [
        CredentialKind::OAuth,
        CredentialKind::Token,
        CredentialKind::ApiKey,
        CredentialKind::Aws,
    ];

    /// The names of [`CredentialKind::ALL`] as messages list what is
    /// expected (a test keeps the two in step).
    pub const EXPECTED: &'static str = "`api_key`, `oauth`, `token` or `aws`";

    /// The kind's name in `auth-profiles.json` (`api_key`, `oauth`,
    /// `token`, `aws`).
    pub fn name(self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "api_key",
            CredentialKind::OAuth => "oauth",
            CredentialKind::Token => "token",
            CredentialKind::Aws => "aws",
        }
    }

    /// The kind of a name (`type` or `mode` in the files).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Round-robin rank (SPEC R6.2): subscriptions (OAuth, then tokens)
    /// before metered API keys; an AWS access key is a metered key too, of
    /// the same rank.
    pub fn rank(self) -> u8 {
        match self {
            CredentialKind::OAuth => 0,
            CredentialKind::Token => 1,
            CredentialKind::ApiKey | CredentialKind::Aws => 2,
        }
    }
}

/// One credential (SPEC R2.3).
#[derive(Clone, Debug, PartialEq)]
pub enum Credential {
    /// An API key (`type: api_key`).
    ApiKey {
        /// The key; `None` when the file has none (the profile is unusable).
        key: Option<Secret>,
        /// A reference to a key held elsewhere (an environment variable, a
        /// secret manager); kept as written.
        key_ref: Option<SecretRef>,
    },
    /// OAuth tokens (`type: oauth`).
    OAuth {
        /// The access token.
        access: Option<Secret>,
        /// The refresh token.
        refresh: Option<Secret>,
        /// When `access` expires, epoch ms.
        expires: Option<u64>,
    },
    /// A bearer token (`type: token`).
    Token {
        /// The token itself, when stored inline.
        token: Option<Secret>,
        /// A reference to a token held elsewhere, kept as written.
        token_ref: Option<SecretRef>,
        /// When the token expires (epoch ms).
        expires: Option<u64>,
    },
    /// An AWS access key (`type: aws`), for SigV4-signed upstreams
    /// (Bedrock). Each part is held inline or by a reference (kept as
    /// written, like `keyRef`).
    Aws {
        /// `accessKeyId` (`AKIA…`, or `ASIA…` for temporary credentials).
        /// Not a secret by AWS's account, but it names an account's key,
        /// so it is held and shown as one (masked).
        access_key_id: Option<Secret>,
        /// `accessKeyIdRef`.
        access_key_id_ref: Option<SecretRef>,
        /// `secretAccessKey`.
        secret_access_key: Option<Secret>,
        /// `secretAccessKeyRef`.
        secret_access_key_ref: Option<SecretRef>,
        /// `sessionToken`, of temporary (STS, SSO, role) credentials.
        session_token: Option<Secret>,
        /// `sessionTokenRef`.
        session_token_ref: Option<SecretRef>,
        /// `region` (`us-west-2`): where this account's requests go, when
        /// the provider's config does not say. Not a secret.
        region: Option<String>,
    },
}

/// A `keyRef` / `tokenRef` value, kept as written. `Debug` hides it: an
/// operator may have pasted the secret itself there.
#[derive(Clone, PartialEq)]
pub struct SecretRef(pub Value);

impl fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretRef(<redacted>)")
    }
}

impl Credential {
    /// The credential's kind.
    pub fn kind(&self) -> CredentialKind {
        match self {
            Credential::ApiKey { .. } => CredentialKind::ApiKey,
            Credential::OAuth { .. } => CredentialKind::OAuth,
            Credential::Token { .. } => CredentialKind::Token,
            Credential::Aws { .. } => CredentialKind::Aws,
        }
    }

    /// The main secret, for display as a mask. For an AWS key that is the
    /// access key id (`AKI…MPLE` tells two accounts' keys apart; seven
    /// characters of the secret key would tell an attacker more).
    pub fn primary_secret(&self) -> Option<&Secret> {
        match self {
            Credential::ApiKey { key, .. } => key.as_ref(),
            Credential::OAuth {
                access, refresh, ..
            } => access.as_ref().or(refresh.as_ref()),
            Credential::Token { token, .. } => token.as_ref(),
            Credential::Aws {
                access_key_id,
                secret_access_key,
                ..
            } => access_key_id.as_ref().or(secret_access_key.as_ref()),
        }
    }
}

/// Why a stored profile cannot be used right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unusable {
    NoKey,
    NoToken,
    TokenExpired {
        at: u64,
    },
    NoOAuthTokens,
    OAuthExpiredWithoutRefresh {
        at: u64,
    },
    /// An AWS profile whose access key id or secret access key is blank
    /// (and has no reference); the field's name.
    AwsKeyBlank {
        field: &'static str,
    },
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::NoKey => f.write_str("api key is empty and there is no `keyRef`"),
            Unusable::NoToken => f.write_str("token is empty and there is no `tokenRef`"),
            Unusable::TokenExpired { at } => write!(f, "token expired at {}", format_utc(*at)),
            Unusable::NoOAuthTokens => {
                f.write_str("oauth login has neither an access nor a refresh token")
            }
            Unusable::OAuthExpiredWithoutRefresh { at } => write!(
                f,
                "oauth access token expired at {} and there is no refresh token; log in again",
                format_utc(*at)
            ),
            Unusable::AwsKeyBlank { field } => {
                write!(f, "aws `{field}` is empty and there is no `{field}Ref`")
            }
        }
    }
}

/// Fields of a stored profile this build does not interpret. `Debug` shows
/// their names only: an unknown field may hold a secret (`idToken`, …).
#[derive(Clone, Default, PartialEq)]
pub struct Extra(pub Map<String, Value>);

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// One parsed profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The provider id the profile authenticates to.
    pub provider: String,
    /// The account's e-mail, when known (shown by `status`, never a secret).
    pub email: Option<String>,
    /// The credential (its secrets hide from `Debug`).
    pub credential: Credential,
    /// Every field another subsystem owns, kept as it was.
    pub extra: Extra,
}

impl Profile {
    /// An API-key profile.
    pub fn api_key(provider: &str, key: &str) -> Self {
        Profile {
            provider: provider.into(),
            email: None,
            credential: Credential::ApiKey {
                key: Some(Secret::new(key)),
                key_ref: None,
            },
            extra: Extra::default(),
        }
    }

    /// An OAuth profile; `expires` is epoch ms.
    pub fn oauth(provider: &str, access: &str, refresh: &str, expires: u64) -> Self {
        Profile {
            provider: provider.into(),
            email: None,
            credential: Credential::OAuth {
                access: Some(Secret::new(access)),
                refresh: Some(Secret::new(refresh)),
                expires: Some(expires),
            },
            extra: Extra::default(),
        }
    }

    /// An AWS access-key profile (`type: aws`); `session_token` for
    /// temporary credentials, `region` when the account has one.
    pub fn aws(
        provider: &str,
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
        region: Option<&str>,
    ) -> Self {
        Profile {
            provider: provider.into(),
            email: None,
            credential: Credential::Aws {
                access_key_id: Some(Secret::new(access_key_id)),
                access_key_id_ref: None,
                secret_access_key: Some(Secret::new(secret_access_key)),
                secret_access_key_ref: None,
                session_token: session_token.map(Secret::new),
                session_token_ref: None,
                region: region.map(str::to_string),
            },
            extra: Extra::default(),
        }
    }

    /// The credential's kind.
    pub fn kind(&self) -> CredentialKind {
        self.credential.kind()
    }

    /// `None` when the credential can be used at `now_ms`; else why not.
    pub fn unusable(&self, now_ms: u64) -> Option<Unusable> {
        let present = |s: &Option<Secret>| s.as_ref().is_some_and(|s| !s.is_empty());
        match &self.credential {
            Credential::ApiKey { key, key_ref } => {
                (!present(key) && key_ref.is_none()).then_some(Unusable::NoKey)
            }
            Credential::Token {
                token,
                token_ref,
                expires,
            } => {
                if !present(token) && token_ref.is_none() {
                    Some(Unusable::NoToken)
                } else {
                    match expires {
                        Some(at) if *at > 0 && *at <= now_ms => {
                            Some(Unusable::TokenExpired { at: *at })
                        }
                        _ => None,
                    }
                }
            }
            Credential::OAuth {
                access,
                refresh,
                expires,
            } => match (present(access), present(refresh), expires) {
                (false, false, _) => Some(Unusable::NoOAuthTokens),
                (_, false, Some(at)) if *at > 0 && *at <= now_ms => {
                    Some(Unusable::OAuthExpiredWithoutRefresh { at: *at })
                }
                _ => None,
            },
            Credential::Aws {
                access_key_id,
                access_key_id_ref,
                secret_access_key,
                secret_access_key_ref,
                ..
            } => {
                if !present(access_key_id) && access_key_id_ref.is_none() {
                    Some(Unusable::AwsKeyBlank {
                        field: "accessKeyId",
                    })
                } else if !present(secret_access_key) && secret_access_key_ref.is_none() {
                    Some(Unusable::AwsKeyBlank {
                        field: "secretAccessKey",
                    })
                } else {
                    None
                }
            }
        }
    }

    /// An OAuth login whose access token has expired (it can be refreshed,
    /// but a live login is a better first try).
    pub fn oauth_expired(&self, now_ms: u64) -> bool {
        matches!(&self.credential, Credential::OAuth { expires: Some(at), .. } if *at > 0 && *at <= now_ms)
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.kind().name()));
        m.insert("provider".into(), json!(self.provider));
        let mut put_secret = |name: &str, s: &Option<Secret>| {
            if let Some(s) = s {
                m.insert(name.into(), json!(s.expose()));
            }
        };
        match &self.credential {
            Credential::ApiKey { key, key_ref } => {
                put_secret("key", key);
                if let Some(r) = key_ref {
                    m.insert("keyRef".into(), r.0.clone());
                }
            }
            Credential::OAuth {
                access,
                refresh,
                expires,
            } => {
                put_secret("access", access);
                put_secret("refresh", refresh);
                if let Some(e) = expires {
                    m.insert("expires".into(), json!(e));
                }
            }
            Credential::Token {
                token,
                token_ref,
                expires,
            } => {
                put_secret("token", token);
                if let Some(r) = token_ref {
                    m.insert("tokenRef".into(), r.0.clone());
                }
                if let Some(e) = expires {
                    m.insert("expires".into(), json!(e));
                }
            }
            Credential::Aws {
                access_key_id,
                access_key_id_ref,
                secret_access_key,
                secret_access_key_ref,
                session_token,
                session_token_ref,
                region,
            } => {
                put_secret("accessKeyId", access_key_id);
                put_secret("secretAccessKey", secret_access_key);
                put_secret("sessionToken", session_token);
                for (name, r) in [
                    ("accessKeyIdRef", access_key_id_ref),
                    ("secretAccessKeyRef", secret_access_key_ref),
                    ("sessionTokenRef", session_token_ref),
                ] {
                    if let Some(r) = r {
                        m.insert(name.into(), r.0.clone());
                    }
                }
                if let Some(r) = region {
                    m.insert("region".into(), json!(r));
                }
            }
        }
        if let Some(e) = &self.email {
            m.insert("email".into(), json!(e));
        }
        for (k, v) in &self.extra.0 {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

/// The provider part of a profile id (`openai` in `openai:default`), if any.
pub fn provider_of_id(id: &str) -> Option<&str> {
    id.split_once(':')
        .map(|(p, _)| p.trim())
        .filter(|p| !p.is_empty())
}

/// Parses one profile entry. `Err` is a message naming fields, never values.
fn parse_profile(id: &str, v: &Value) -> Result<Profile, String> {
    let Value::Object(obj) = v else {
        return Err(format!("expected an object, found {}", kind(v)));
    };
    let ty = match obj.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err("field `type` must be a string".into()),
        None => {
            return Err(format!(
                "missing field `type` ({})",
                CredentialKind::EXPECTED
            ))
        }
    };
    let Some(kind) = CredentialKind::from_name(ty) else {
        // Echo the type only when it looks like a type name, not a pasted key.
        let shown = if ty.len() <= 24
            && ty
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            format!(" `{ty}`")
        } else {
            String::new()
        };
        return Err(format!(
            "unknown credential type{shown} (expected {})",
            CredentialKind::EXPECTED
        ));
    };
    let provider =
        match opt_str(obj, "provider")? {
            Some(p) if !p.trim().is_empty() => p.trim().to_string(),
            _ => match provider_of_id(id) {
                Some(p) => p.to_string(),
                None => return Err(
                    "has no provider: add a `provider` field or name the profile `provider:name`"
                        .into(),
                ),
            },
        };
    let secret = |f: &str| opt_str(obj, f).map(|s| s.map(Secret::new));
    let credential = match kind {
        CredentialKind::ApiKey => Credential::ApiKey {
            key: secret("key")?,
            key_ref: obj
                .get("keyRef")
                .filter(|v| !v.is_null())
                .cloned()
                .map(SecretRef),
        },
        CredentialKind::OAuth => Credential::OAuth {
            access: secret("access")?,
            refresh: secret("refresh")?,
            expires: opt_ms(obj, "expires")?,
        },
        CredentialKind::Token => Credential::Token {
            token: secret("token")?,
            token_ref: obj
                .get("tokenRef")
                .filter(|v| !v.is_null())
                .cloned()
                .map(SecretRef),
            expires: opt_ms(obj, "expires")?,
        },
        CredentialKind::Aws => {
            let reference = |f: &str| obj.get(f).filter(|v| !v.is_null()).cloned().map(SecretRef);
            let access_key_id = secret("accessKeyId")?;
            let access_key_id_ref = reference("accessKeyIdRef");
            let secret_access_key = secret("secretAccessKey")?;
            let secret_access_key_ref = reference("secretAccessKeyRef");
            for (field, value, r) in [
                ("accessKeyId", &access_key_id, &access_key_id_ref),
                (
                    "secretAccessKey",
                    &secret_access_key,
                    &secret_access_key_ref,
                ),
            ] {
                if value.is_none() && r.is_none() {
                    return Err(format!("aws profile has no `{field}` (nor `{field}Ref`)"));
                }
            }
            Credential::Aws {
                access_key_id,
                access_key_id_ref,
                secret_access_key,
                secret_access_key_ref,
                session_token: secret("sessionToken")?,
                session_token_ref: reference("sessionTokenRef"),
                region: opt_str(obj, "region")?,
            }
        }
    };
    let known: &[&str] = match kind {
        CredentialKind::ApiKey => &["type", "provider", "email", "key", "keyRef"],
        CredentialKind::OAuth => &["type", "provider", "email", "access", "refresh", "expires"],
        CredentialKind::Token => &["type", "provider", "email", "token", "tokenRef", "expires"],
        CredentialKind::Aws => &[
            "type",
            "provider",
            "email",
            "accessKeyId",
            "accessKeyIdRef",
            "secretAccessKey",
            "secretAccessKeyRef",
            "sessionToken",
            "sessionTokenRef",
            "region",
        ],
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(Profile {
        provider,
        email: opt_str(obj, "email")?.filter(|e| !e.trim().is_empty()),
        credential,
        extra: Extra(extra),
    })
}

/// The whole secrets file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthProfiles {
    /// The file's `version`.
    pub version: Option<u64>,
    /// Profile id (`provider:default`, `provider:<email>`) → profile.
    pub profiles: BTreeMap<String, Profile>,
    /// Entries that did not parse, kept verbatim for the next write.
    invalid: BTreeMap<String, Extra>,
    /// Top-level fields other than `version` and `profiles` (old builds kept
    /// `usageStats`, `order`, `lastGood` here).
    extra: Extra,
}

/// The file format version this build writes.
pub(crate) const PROFILES_VERSION: u64 = 1;

impl AuthProfiles {
    /// Parses the file's JSON. `Err` means the document as a whole is not a
    /// profiles file (a corrupt file); per-profile problems go to `problems`.
    pub fn from_json(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        let Value::Object(mut top) = v else {
            return Err(format!("expected an object, found {}", kind(&v)));
        };
        let version = top.remove("version").as_ref().and_then(super::json::as_ms);
        let mut out = AuthProfiles {
            version,
            ..Default::default()
        };
        match top.remove("profiles") {
            None | Some(Value::Null) => {}
            Some(Value::Object(entries)) => {
                for (id, entry) in entries {
                    match parse_profile(&id, &entry) {
                        Ok(p) => {
                            out.profiles.insert(id, p);
                        }
                        Err(detail) => {
                            problems.push(Problem::InvalidEntry {
                                path: path.to_path_buf(),
                                what: "profile",
                                key: id.clone(),
                                detail,
                            });
                            let mut keep = Map::new();
                            keep.insert(id.clone(), entry);
                            out.invalid.insert(id, Extra(keep));
                        }
                    }
                }
            }
            Some(other) => {
                return Err(format!(
                    "expected an object under `profiles`, found {}",
                    kind(&other)
                ))
            }
        }
        out.extra = Extra(top);
        Ok(out)
    }

    /// The document as written to `auth-profiles.json`.
    pub fn to_json(&self) -> Value {
        let mut profiles = Map::new();
        for (id, p) in &self.profiles {
            profiles.insert(id.clone(), p.to_json());
        }
        for (id, raw) in &self.invalid {
            if !profiles.contains_key(id) {
                if let Some(v) = raw.0.get(id) {
                    profiles.insert(id.clone(), v.clone());
                }
            }
        }
        let mut top = self.extra.0.clone();
        top.insert(
            "version".into(),
            json!(self.version.unwrap_or(PROFILES_VERSION)),
        );
        top.insert("profiles".into(), Value::Object(profiles));
        Value::Object(top)
    }

    /// Ids of entries that did not parse (kept in the file, not routed).
    pub fn invalid_ids(&self) -> impl Iterator<Item = &str> {
        self.invalid.keys().map(String::as_str)
    }

    /// Routing state kept inside this file by old builds (SPEC R5; REFERENCE
    /// c), read when `auth-state.json` does not exist yet.
    pub fn legacy_state(&self, path: &Path, problems: &mut Vec<Problem>) -> Option<AuthState> {
        let keys = ["usageStats", "order", "lastGood"];
        if !keys.iter().any(|k| self.extra.0.contains_key(*k)) {
            return None;
        }
        let mut m = Map::new();
        for k in keys {
            if let Some(v) = self.extra.0.get(k) {
                m.insert(k.into(), v.clone());
            }
        }
        AuthState::from_json(Value::Object(m), path, problems).ok()
    }

    /// Profiles of `provider` (compared after normalisation), in id order.
    pub fn for_provider<'a>(
        &'a self,
        provider: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a Profile)> + 'a {
        let want = normalize_provider(provider);
        self.profiles
            .iter()
            .filter(move |(_, p)| normalize_provider(&p.provider) == want)
            .map(|(id, p)| (id.as_str(), p))
    }

    /// Imports a legacy `credentials/oauth.json` (SPEC R5.4): an object
    /// keyed by provider, each `{access, refresh, expires, email?}`. Ids
    /// follow R2.2; existing profiles are never replaced. Returns the ids
    /// added.
    pub fn import_legacy_oauth(
        &mut self,
        legacy: &Value,
        path: &Path,
        problems: &mut Vec<Problem>,
    ) -> Vec<String> {
        let mut added = Vec::new();
        let Value::Object(providers) = legacy else {
            problems.push(Problem::Corrupt {
                path: path.to_path_buf(),
                detail: format!("expected an object, found {}", kind(legacy)),
                moved_to: None,
            });
            return added;
        };
        for (provider, entry) in providers {
            let mut entry = entry.clone();
            if let Value::Object(m) = &mut entry {
                m.entry("type").or_insert_with(|| json!("oauth"));
                m.entry("provider").or_insert_with(|| json!(provider));
            }
            let email = entry
                .get("email")
                .and_then(Value::as_str)
                .filter(|e| !e.trim().is_empty());
            let id = format!("{provider}:{}", email.unwrap_or("default"));
            match parse_profile(&id, &entry) {
                Ok(p) => {
                    if !self.profiles.contains_key(&id) {
                        self.profiles.insert(id.clone(), p);
                        added.push(id);
                    }
                }
                Err(detail) => problems.push(Problem::InvalidEntry {
                    path: path.to_path_buf(),
                    what: "legacy oauth login",
                    key: provider.clone(),
                    detail,
                }),
            }
        }
        added
    }
}

/// Provider ids are compared case-insensitively, with `z.ai`/`z-ai` as
/// `zai` (REFERENCE b).
pub fn normalize_provider(p: &str) -> String {
    let p = p.trim().to_ascii_lowercase();
    match p.as_str() {
        "z.ai" | "z-ai" => "zai".into(),
        _ => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_names_every_kind() {
        let mut listed: Vec<&str> = CredentialKind::EXPECTED
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        let mut names = CredentialKind::ALL.map(CredentialKind::name).to_vec();
        listed.sort_unstable();
        names.sort_unstable();
        assert_eq!(listed, names);
    }

    const SECRET: &str = "sk-live-TOPSECRET-0123456789";

    fn parse(v: Value) -> (AuthProfiles, Vec<Problem>) {
        let mut problems = Vec::new();
        let p = AuthProfiles::from_json(v, Path::new("auth-profiles.json"), &mut problems).unwrap();
        (p, problems)
    }

    // R2.3, R5.1: the three credential types, unknown fields kept.
    #[test]
    fn r2_3_parses_three_types_and_keeps_unknown_fields() {
        let (p, problems) = parse(json!({
            "version": 1,
            "profiles": {
                "openai:default": {"type": "api_key", "provider": "openai", "key": SECRET},
                "anthropic:me@x.io": {"type": "oauth", "provider": "anthropic", "access": "a", "refresh": "r", "expires": 1.5e12, "email": "me@x.io", "projectId": "p1"},
                "github:default": {"type": "token", "provider": "github", "token": "t"}
            }
        }));
        assert!(problems.is_empty());
        assert_eq!(p.profiles.len(), 3);
        let o = &p.profiles["anthropic:me@x.io"];
        assert_eq!(o.kind(), CredentialKind::OAuth);
        assert_eq!(o.email.as_deref(), Some("me@x.io"));
        let back = p.to_json();
        assert_eq!(
            back["profiles"]["anthropic:me@x.io"]["projectId"],
            json!("p1")
        );
        assert_eq!(back["profiles"]["openai:default"]["key"], json!(SECRET));
    }

    // Bad input: unknown type and missing provider are reported per profile,
    // kept verbatim, and the messages carry no secret.
    #[test]
    fn bad_profiles_reported_kept_and_redacted() {
        let (p, problems) = parse(json!({
            "profiles": {
                "openai:default": {"type": "password", "provider": "openai", "key": SECRET},
                "lonely": {"type": "api_key", "key": SECRET},
                "openai:pasted": {"type": SECRET, "provider": "openai"},
                "openai:num": {"type": "api_key", "key": 42},
                "google:ok": {"type": "api_key", "key": "k"}
            }
        }));
        assert_eq!(p.profiles.len(), 1);
        let msgs: Vec<String> = problems.iter().map(|x| x.to_string()).collect();
        let all = msgs.join("\n");
        assert!(!all.contains("TOPSECRET"), "{all}");
        assert!(all.contains("profile `openai:default` ignored: unknown credential type `password` (expected `api_key`, `oauth`, `token` or `aws`)"), "{all}");
        assert!(
            all.contains("profile `lonely` ignored: has no provider"),
            "{all}"
        );
        assert!(
            all.contains("profile `openai:num` ignored: field `key` must be a string"),
            "{all}"
        );
        assert!(
            all.contains("profile `openai:pasted` ignored: unknown credential type (expected"),
            "{all}"
        );
        // Kept for the next write.
        let back = p.to_json();
        assert_eq!(back["profiles"]["lonely"]["key"], json!(SECRET));
        assert_eq!(back["profiles"].as_object().unwrap().len(), 5);
        // Debug of the whole document shows no secret.
        let dbg = format!("{p:?}");
        assert!(!dbg.contains("TOPSECRET"), "{dbg}");
    }

    // R16.11: references are kept for writing but hidden from Debug.
    #[test]
    fn r16_11_key_refs_hidden_from_debug() {
        let (p, _) = parse(
            json!({"profiles": {"openai:r": {"type": "api_key", "keyRef": {"env": SECRET}}}}),
        );
        assert_eq!(p.profiles["openai:r"].unusable(0), None);
        assert!(!format!("{p:?}").contains("TOPSECRET"));
        assert_eq!(
            p.to_json()["profiles"]["openai:r"]["keyRef"]["env"],
            json!(SECRET)
        );
    }

    #[test]
    fn provider_comes_from_id_when_field_missing() {
        let (p, problems) =
            parse(json!({"profiles": {"openai:x": {"type": "api_key", "key": "k"}}}));
        assert!(problems.is_empty());
        assert_eq!(p.profiles["openai:x"].provider, "openai");
    }

    // Expired credentials: clear messages, refreshable OAuth stays usable.
    #[test]
    fn expired_credentials() {
        let now = 2_000_000_000_000;
        let mut o = Profile::oauth("anthropic", "a", "r", now - 1);
        assert_eq!(o.unusable(now), None);
        assert!(o.oauth_expired(now));
        o.credential = Credential::OAuth {
            access: Some(Secret::new("a")),
            refresh: None,
            expires: Some(now - 1),
        };
        let why = o.unusable(now).unwrap().to_string();
        assert_eq!(
            why,
            "oauth access token expired at 2033-05-18T03:33:19Z and there is no refresh token; log in again"
        );
        let t = Profile {
            credential: Credential::Token {
                token: Some(Secret::new("t")),
                token_ref: None,
                expires: Some(now),
            },
            ..Profile::api_key("github", "")
        };
        assert!(matches!(
            t.unusable(now),
            Some(Unusable::TokenExpired { .. })
        ));
        assert_eq!(
            Profile::api_key("x", " ").unusable(now),
            Some(Unusable::NoKey)
        );
    }

    // R5.4, R2.2: legacy OAuth import names ids by e-mail or `default`.
    #[test]
    fn r5_4_legacy_oauth_import() {
        let mut p = AuthProfiles::default();
        let mut problems = Vec::new();
        let legacy = json!({
            "anthropic": {"access": "a", "refresh": "r", "expires": 1, "email": "me@x.io"},
            "openai": {"access": "a", "refresh": "r", "expires": 1}
        });
        let added = p.import_legacy_oauth(&legacy, Path::new("oauth.json"), &mut problems);
        assert_eq!(added, vec!["anthropic:me@x.io", "openai:default"]);
        assert_eq!(p.profiles["openai:default"].kind(), CredentialKind::OAuth);
        assert!(problems.is_empty());
    }

    const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const AWS_TOKEN: &str =
        "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN//////////wEaCXVzLWVhc3QtMSJHMEUCIQD";

    /// Two AWS accounts for Bedrock (one with temporary credentials and a
    /// region, one by reference) beside an API key.
    fn aws_doc() -> Value {
        json!({
            "version": 1,
            "profiles": {
                "amazon-bedrock:prod": {
                    "type": "aws", "provider": "amazon-bedrock",
                    "accessKeyId": "ASIAIOSFODNN7EXAMPLE", "secretAccessKey": AWS_SECRET,
                    "sessionToken": AWS_TOKEN, "region": "us-west-2", "note": "kept"
                },
                "amazon-bedrock:backup": {
                    "type": "aws", "provider": "amazon-bedrock",
                    "accessKeyId": "AKIAI44QH8DHBEXAMPLE",
                    "secretAccessKeyRef": {"source": "env", "id": "BACKUP_AWS_SECRET"},
                    "sessionTokenRef": {"source": "env", "id": "BACKUP_AWS_TOKEN"}
                },
                "amazon-bedrock:refs": {
                    "type": "aws", "provider": "amazon-bedrock",
                    "accessKeyIdRef": {"source": "env", "id": "AWS_ACCESS_KEY_ID"},
                    "secretAccessKeyRef": {"source": "env", "id": "AWS_SECRET_ACCESS_KEY"}
                },
                "openai:default": {"type": "api_key", "provider": "openai", "key": SECRET}
            }
        })
    }

    // Issue 33: `aws` profiles parse, rank like API keys (R6.2), and are
    // written back exactly as read.
    #[test]
    fn aws_profiles_parse_rank_and_round_trip() {
        let (p, problems) = parse(aws_doc());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.profiles.len(), 4);
        let prod = &p.profiles["amazon-bedrock:prod"];
        assert_eq!(prod.kind(), CredentialKind::Aws);
        assert_eq!(prod.kind().name(), "aws");
        assert_eq!(CredentialKind::from_name("aws"), Some(CredentialKind::Aws));
        assert_eq!(CredentialKind::Aws.rank(), CredentialKind::ApiKey.rank());
        assert!(CredentialKind::ALL.contains(&CredentialKind::Aws));
        match &prod.credential {
            Credential::Aws {
                access_key_id: Some(id),
                secret_access_key: Some(secret),
                session_token: Some(token),
                region: Some(region),
                ..
            } => {
                assert_eq!(id.expose(), "ASIAIOSFODNN7EXAMPLE");
                assert_eq!(secret.expose(), AWS_SECRET);
                assert_eq!(token.expose(), AWS_TOKEN);
                assert_eq!(region, "us-west-2");
            }
            other => panic!("{other:?}"),
        }
        // The mask shown by `status` is the key id's, not the secret's.
        assert_eq!(
            prod.credential.primary_secret().unwrap().masked(),
            "ASI…MPLE"
        );
        assert_eq!(
            p.for_provider("Amazon-Bedrock").count(),
            3,
            "all three accounts rotate"
        );
        for (_, profile) in p.for_provider("amazon-bedrock") {
            assert_eq!(profile.unusable(0), None);
        }
        // Written back unchanged, references and unknown fields included.
        assert_eq!(p.to_json(), aws_doc());
        // The constructor writes what the file holds.
        let built = Profile::aws(
            "amazon-bedrock",
            "ASIAIOSFODNN7EXAMPLE",
            AWS_SECRET,
            Some(AWS_TOKEN),
            Some("us-west-2"),
        );
        let mut want = aws_doc()["profiles"]["amazon-bedrock:prod"].clone();
        want.as_object_mut().unwrap().remove("note");
        assert_eq!(built.to_json(), want);
    }

    // R16.11: no Debug of an `aws` profile shows its secret, its session
    // token or what its references hold; nor does any message about one.
    #[test]
    fn aws_secrets_never_shown() {
        let (p, _) = parse(aws_doc());
        let dbg = format!("{p:?} {:#?}", p.profiles["amazon-bedrock:prod"]);
        for secret in [
            AWS_SECRET,
            "EXAMPLEKEY",
            AWS_TOKEN,
            "SESSIONTOKEN",
            "BACKUP_AWS_SECRET",
        ] {
            assert!(!dbg.contains(secret), "{secret} in {dbg}");
        }
        let blank = Profile::aws("amazon-bedrock", "AKIAI44QH8DHBEXAMPLE", " ", None, None);
        let why = blank.unusable(0).unwrap();
        assert_eq!(
            why.to_string(),
            "aws `secretAccessKey` is empty and there is no `secretAccessKeyRef`"
        );
        let blank = Profile::aws("amazon-bedrock", "", AWS_SECRET, None, None);
        assert_eq!(
            blank.unusable(0),
            Some(Unusable::AwsKeyBlank {
                field: "accessKeyId"
            })
        );
    }

    // Issue 33: an `aws` profile without its key id or its secret, or with
    // a field of the wrong type, is a problem naming the profile and the
    // field (never a value), kept verbatim for the next write.
    #[test]
    fn aws_profiles_missing_fields_are_named() {
        let doc = json!({
            "profiles": {
                "amazon-bedrock:nosecret": {"type": "aws", "accessKeyId": "AKIAI44QH8DHBEXAMPLE"},
                "amazon-bedrock:noid": {"type": "aws", "secretAccessKey": AWS_SECRET},
                "amazon-bedrock:nulls": {"type": "aws", "accessKeyId": null, "secretAccessKey": AWS_SECRET, "accessKeyIdRef": null},
                "amazon-bedrock:token": {"type": "aws", "accessKeyId": "AKIAI44QH8DHBEXAMPLE", "secretAccessKey": AWS_SECRET, "sessionToken": 42},
                "amazon-bedrock:region": {"type": "aws", "accessKeyId": "AKIAI44QH8DHBEXAMPLE", "secretAccessKey": AWS_SECRET, "region": ["us-east-1"]},
                "amazon-bedrock:secret": {"type": "aws", "accessKeyId": "AKIAI44QH8DHBEXAMPLE", "secretAccessKey": {"value": AWS_SECRET}},
                "aws": {"type": "aws", "accessKeyId": "AKIAI44QH8DHBEXAMPLE", "secretAccessKey": AWS_SECRET}
            }
        });
        let (p, problems) = parse(doc.clone());
        assert!(p.profiles.is_empty());
        let all: Vec<String> = problems.iter().map(|x| x.to_string()).collect();
        let all = all.join("\n");
        for line in [
            "profile `amazon-bedrock:nosecret` ignored: aws profile has no `secretAccessKey` (nor `secretAccessKeyRef`)",
            "profile `amazon-bedrock:noid` ignored: aws profile has no `accessKeyId` (nor `accessKeyIdRef`)",
            "profile `amazon-bedrock:nulls` ignored: aws profile has no `accessKeyId` (nor `accessKeyIdRef`)",
            "profile `amazon-bedrock:token` ignored: field `sessionToken` must be a string",
            "profile `amazon-bedrock:region` ignored: field `region` must be a string",
            "profile `amazon-bedrock:secret` ignored: field `secretAccessKey` must be a string",
            "profile `aws` ignored: has no provider",
        ] {
            assert!(all.contains(line), "{line}\n{all}");
        }
        assert!(!all.contains("EXAMPLEKEY"), "{all}");
        assert_eq!(p.to_json()["profiles"], doc["profiles"]);
    }

    // Issue 33: `aws` profiles survive the file store: read from
    // `auth-profiles.json`, written back by an update of another profile,
    // unchanged.
    #[test]
    fn aws_profiles_round_trip_through_the_file_store() {
        use crate::store::{FileStore, Store, StoreExt};
        let root = crate::store::test_dir("profiles", "aws");
        let store = FileStore::open(&root, "main").unwrap();
        let path = root.join("agents/main/agent/auth-profiles.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec_pretty(&aws_doc()).unwrap()).unwrap();
        let loaded = store.load_profiles().unwrap();
        assert_eq!(
            loaded.profiles["amazon-bedrock:prod"].kind(),
            CredentialKind::Aws
        );
        store
            .update_profiles(|p| {
                p.profiles.insert(
                    "google:default".into(),
                    Profile::api_key("google", "AIza-key"),
                )
            })
            .unwrap();
        let back: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let mut want = aws_doc();
        want["profiles"]["google:default"] =
            json!({"type": "api_key", "provider": "google", "key": "AIza-key"});
        assert_eq!(back, want);
        assert!(store.take_problems().is_empty());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn normalizes_providers() {
        assert_eq!(normalize_provider(" Z.AI "), "zai");
        assert_eq!(normalize_provider("OpenAI"), "openai");
    }
}
