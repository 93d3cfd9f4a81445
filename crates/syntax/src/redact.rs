//! The one redaction of secrets in everything failover prints (SPEC
//! R16.11), for text that did not come through a `Secret`
//! (`crate::store::Secret`): config keys and source lines, rules source
//! lines, profile ids and model names in `status` and `chain`, provider
//! errors that echo a key.
//!
//! Four tools, from coarse to fine:
//!
//! - [`may_hold_secret`]: a source line that sets a secret-named key
//!   (`apiKey: …`) or holds a credential-shaped value is not quoted at
//!   all (config and rules diagnostics say "line not shown", and scrub
//!   their messages of the credential's words, [`masked_words`]);
//! - [`redact`]: every credential-shaped token in a text (a known prefix
//!   such as `sk-`, `Bearer …`, a `user:password@` URL, a long random
//!   token) is masked as a stored secret is (`sk-…wxyz`), the rest kept;
//!   so is the value of an AWS secret's name in any form AWS tools write
//!   it ([`aws_secret_values`]: `aws_secret_access_key=…`,
//!   `"secretAccessKey": "…"`, `X-Amz-Security-Token: …`, a SigV4
//!   `Authorization`'s `Signature=…`);
//! - [`scrub_quoted`] and [`scrub_serde_error`]: a YAML or JSON parser's
//!   message about a file, without the value it quotes (`invalid value:
//!   string "…"`), for config and state files;
//! - [`Redactor`]: the secrets actually stored are removed from a
//!   provider's error text, in any letter case and in part (any run of
//!   [`MIN_SECRET_PIECE`] characters of one), since providers echo keys
//!   upper-cased or cut, and in every encoding a reader could decode
//!   (escapes, percent-encoding, HTML references, base64).
//!
//! Example: `redact("profile sk-proj-abcdefghijklmnopqrstuvwxyz123456 failed")`
//! is `profile sk-…3456 failed`; `Redactor::new(["sk-proj-abcdefghijklmnopqrstuvwxyz123456"])
//! .scrub("KEY SK-PROJ-ABCDEFGHIJKL…")` is `KEY <redacted>…`.

use std::borrow::Cow;

/// Below this length a masked secret shows nothing: seven shown characters
/// of a twelve-character secret would give most of it away.
const MIN_LEN_TO_SHOW_ENDS: usize = 16;

/// How a secret is shown: `sk-…abcd` for a long one (its first three and
/// last four characters), `…` for a short one. The ends shown are the
/// secret's, with control characters as `?`: a pasted key that ends in a
/// newline or a terminal escape must not move the cursor of whoever reads
/// `status`. `crate::store::Secret::masked` is this.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < MIN_LEN_TO_SHOW_ENDS {
        return "…".into();
    }
    let shown = |cs: &[char]| -> String {
        cs.iter()
            .map(|&c| if c.is_control() { '?' } else { c })
            .collect()
    };
    let (head, tail) = (shown(&chars[..3]), shown(&chars[chars.len() - 4..]));
    format!("{head}…{tail}")
}

/// Whether a source line may hold a secret, so it must not be quoted back
/// in a message (SPEC R16.11): it sets a key whose name says it holds one
/// (`apiKey: …`, `"accessToken": …`, `client-secret: …`), or it holds a
/// value shaped like a credential whatever its key (`note: sk-…`, a value
/// on its own line, a one-line JSON object). A false positive only hides
/// a source line; the path, line and column are still given.
pub fn may_hold_secret(line: &str) -> bool {
    // A key with a `:` in it is a profile id (`openai:api-key-backup`),
    // whose value is a profile, not a secret; field names have none.
    line_keys(line)
        .filter(|k| !k.contains(':'))
        .any(secret_key_name)
        || looks_like_secret(line)
}

/// The mapping keys a source line sets: the text before each `:` that ends
/// a key (a quoted key, as in JSON, or a plain one followed by a space or
/// the line end), back to where the key starts. `ollama/monkey:7b` sets
/// none; `openai:default:` sets `openai:default`.
pub(crate) fn line_keys(line: &str) -> impl Iterator<Item = &str> {
    line.match_indices(':').filter_map(move |(i, _)| {
        let before = line[..i].trim_end_matches([' ', '\t']);
        if let Some(q) = before.chars().last().filter(|c| matches!(c, '"' | '\'')) {
            let inner = &before[..before.len() - 1];
            let start = inner.rfind(q).map_or(0, |s| s + 1);
            return Some(&inner[start..]);
        }
        let after = &line[i + 1..];
        if !(after.is_empty() || after.starts_with([' ', '\t', '\r'])) {
            return None;
        }
        let start = before
            .rfind([' ', '\t', '{', '[', ','])
            .map_or(0, |s| s + 1);
        Some(&before[start..]).filter(|k| !k.is_empty())
    })
}

/// Whether a key's name says its value is a secret, in any spelling:
/// `apiKey`, `api_key`, `API-KEY`, `apikey`, `accessToken`,
/// `client_secret`, `privateKey`, `Authorization`, `x-auth-header`,
/// `bearer`. The name is split into lower-cased words (at camelCase
/// humps and at `_`, `-`, `.`, spaces); it is a secret when a word is one
/// of [`SECRET_KEY_WORDS`], or when the words run together contain one of
/// [`SECRET_KEY_PARTS`]. The keys this file reads (`auth`, `order`,
/// `profiles`, `primary`, `fallbacks`, `authPermanentBackoffMinutes`, …)
/// match neither.
pub fn secret_key_name(key: &str) -> bool {
    let words = key_words(key);
    let joined = words.concat();
    SECRET_KEY_PARTS.iter().any(|p| joined.contains(p))
        || words.iter().any(|w| SECRET_KEY_WORDS.contains(&w.as_str()))
}

/// Parts of a key name that mark a secret wherever they occur: `key`
/// catches `apiKey`, `privateKey`, `x-api-key`, `keyfile` (and `monkey`,
/// a false positive that only hides a line).
pub const SECRET_KEY_PARTS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "bearer",
    "authorization",
    "authheader",
    "credential",
    "private",
    "cookie",
];

/// Words that mark a secret only as a whole word (`refresh`, `access`:
/// OAuth token fields; as parts they would catch harmless names). `auth`
/// is not one: it is a section this file reads.
pub const SECRET_KEY_WORDS: &[&str] = &["access", "refresh", "pass", "pwd", "pat", "jwt"];

/// A key name as lower-cased words: `accessToken` → `access`, `token`;
/// `APIKey` → `api`, `key`; `client-secret` → `client`, `secret`.
pub(crate) fn key_words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let hump = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            });
        if hump && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Well-known prefixes of issued credentials, with the shortest token
/// that counts (so a plain word that happens to start the same way does
/// not): OpenAI/Anthropic/Stripe keys, GitHub, GitLab, Slack, Hugging
/// Face, npm and PyPI tokens, AWS access key ids, Google API keys, JWTs.
pub const SECRET_PREFIXES: &[(&str, usize)] = &[
    ("sk-", 8),
    ("sk_", 8),
    ("rk_", 12),
    ("ghp_", 12),
    ("gho_", 12),
    ("ghu_", 12),
    ("ghs_", 12),
    ("ghr_", 12),
    ("github_pat_", 16),
    ("glpat-", 12),
    ("xoxa-", 10),
    ("xoxb-", 10),
    ("xoxe", 10),
    ("xoxp-", 10),
    ("xoxs-", 10),
    ("hf_", 20),
    ("npm_", 20),
    ("pypi-", 20),
    ("AKIA", 16),
    ("ASIA", 16),
    ("AIza", 20),
    ("eyJ", 20),
];

/// Whether text holds a value shaped like a credential: a token with a
/// well-known prefix ([`SECRET_PREFIXES`]), an HTTP auth scheme with its
/// credential (`Bearer …`, `Basic …`), a URL with a password
/// (`https://user:pw@host`), or a long token that looks random
/// ([`random_token`]). Tokens are the runs of `[A-Za-z0-9_.-]`.
pub fn looks_like_secret(text: &str) -> bool {
    if !aws_secret_values(text).is_empty() {
        return true;
    }
    let is_token = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut rest = text;
    while let Some(start) = rest.find(is_token) {
        let tail = &rest[start..];
        let len = tail.find(|c| !is_token(c)).unwrap_or(tail.len());
        let (token, after) = tail.split_at(len);
        let prefixed = SECRET_PREFIXES.iter().any(|&(p, min)| {
            token.len() >= min
                && token.get(..p.len()).is_some_and(|t| {
                    t == p || (p == p.to_ascii_lowercase() && t.eq_ignore_ascii_case(p))
                })
        });
        // `Bearer <anything>`, `Basic <base64>`: the scheme word, a space,
        // then the credential.
        let credential = after.trim_start_matches([' ', '\t']);
        let spaced = credential.len() < after.len();
        let scheme = spaced
            && if token.eq_ignore_ascii_case("bearer") {
                credential.starts_with(|c: char| !c.is_whitespace() && c != '#')
            } else if token.eq_ignore_ascii_case("basic") {
                credential
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')))
                    .unwrap_or(credential.len())
                    >= 8
            } else {
                false
            };
        if prefixed || scheme || random_token(token) {
            return true;
        }
        rest = after;
    }
    // `scheme://user:password@host`
    text.match_indices("://").any(|(i, _)| {
        let authority = &text[i + 3..];
        let authority = &authority[..authority
            .find(|c: char| c == '/' || c.is_whitespace() || matches!(c, '"' | '\''))
            .unwrap_or(authority.len())];
        authority
            .rfind('@')
            .is_some_and(|at| authority[..at].contains(':'))
    })
}

/// Whether a token looks random rather than like a name: 24 characters or
/// more, with letters and digits (or with upper and lower case letters
/// each a quarter of it), and either a piece between `-`, `_`, `.` of 16
/// characters or more that mixes kinds (lower case, upper case, digits),
/// or 8 switches of kind or more inside pieces. Model ids are short
/// pieces of one kind (`claude-3-5-sonnet-20241022`,
/// `Llama-3.2-11B-Vision-Instruct-Turbo`), and camelCase key names have no
/// digits and few capitals; a random 32-character key passes nearly
/// always (see the tests).
pub fn random_token(token: &str) -> bool {
    if token.len() < 24 {
        return false;
    }
    let count = |f: fn(&u8) -> bool| token.bytes().filter(f).count();
    let (lower, upper, digits) = (
        count(u8::is_ascii_lowercase),
        count(u8::is_ascii_uppercase),
        count(u8::is_ascii_digit),
    );
    let mixed_case = lower * 4 >= token.len() && upper * 4 >= token.len();
    if lower + upper == 0 || (digits == 0 && !mixed_case) {
        return false;
    }
    let kind = |b: u8| match b {
        b'a'..=b'z' => 0,
        b'A'..=b'Z' => 1,
        _ => 2,
    };
    let mut switches = 0;
    for piece in token.split(['-', '_', '.']) {
        let b = piece.as_bytes();
        let piece_switches = b.windows(2).filter(|w| kind(w[0]) != kind(w[1])).count();
        if b.len() >= 16 && piece_switches > 0 {
            return true;
        }
        switches += piece_switches;
    }
    switches >= 8
}

/// `text` with every credential-shaped part masked: tokens with a known
/// prefix or that look random become their mask (`sk-…wxyz`, `…` when
/// short), the credential after `Bearer` / `Basic` becomes `…`, and the
/// password of a `user:password@host` URL becomes `…`. Text with nothing
/// of the kind is returned as it is; a masked text is left as it is.
pub fn redact(text: &str) -> Cow<'_, str> {
    // The values of AWS secrets' names first (an AWS secret access key is
    // 40 characters of base64 with `/` and `+`, which split it into
    // tokens too short to look random); then the rest, as for any text.
    let named = aws_secret_values(text);
    if !named.is_empty() {
        let mut masked = String::with_capacity(text.len());
        let mut last = 0;
        for r in named {
            masked.push_str(&text[last..r.start]);
            masked.push('…');
            last = r.end;
        }
        masked.push_str(&text[last..]);
        // No value is left after a name: this recursion is one level deep.
        return Cow::Owned(redact(&masked).into_owned());
    }
    if !looks_like_secret(text) {
        return Cow::Borrowed(text);
    }
    let is_token = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(is_token) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let len = tail.find(|c| !is_token(c)).unwrap_or(tail.len());
        let (token, mut after) = tail.split_at(len);
        if looks_like_secret(token) {
            out.push_str(&mask(token));
        } else {
            out.push_str(token);
        }
        // `Bearer <credential>`: the whole word after the scheme goes.
        let spaced = after.trim_start_matches([' ', '\t']);
        if (token.eq_ignore_ascii_case("bearer") || token.eq_ignore_ascii_case("basic"))
            && spaced.len() < after.len()
            && !spaced.is_empty()
            && !spaced.starts_with(char::is_whitespace)
        {
            let word = spaced.find(char::is_whitespace).unwrap_or(spaced.len());
            out.push_str(&after[..after.len() - spaced.len()]);
            out.push('…');
            after = &spaced[word..];
        }
        rest = after;
    }
    out.push_str(rest);
    // `scheme://user:password@host`: the password goes.
    let mut done = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.find("://") {
        let (head, authority) = rest.split_at(i + 3);
        done.push_str(head);
        let end = authority
            .find(|c: char| c == '/' || c.is_whitespace() || matches!(c, '"' | '\''))
            .unwrap_or(authority.len());
        let (auth, after) = authority.split_at(end);
        match auth
            .rfind('@')
            .and_then(|at| auth[..at].find(':').map(|c| (c, at)))
        {
            Some((colon, at)) => {
                done.push_str(&auth[..=colon]);
                done.push('…');
                done.push_str(&auth[at..]);
            }
            None => done.push_str(auth),
        }
        rest = after;
    }
    done.push_str(rest);
    Cow::Owned(done)
}

/// Words shorter than this are not taken for a credential by
/// [`masked_words`]: `redact` masks the whole word after `Bearer`, which
/// may carry a short neighbour (`abc.def==(type`) along with it.
pub const MIN_MASKED_WORD: usize = 8;

/// The words of `text` (runs of `[A-Za-z0-9_.-]`, [`MIN_MASKED_WORD`]
/// characters or more) that [`redact`] masks. A message about a line that
/// holds a credential may quote one of them alone, without the context
/// that made it one: a parser's `found `dXNlcjpwYXNz`` about `Basic
/// dXNlcjpwYXNz==` is no longer credential-shaped, so the message is
/// scrubbed of these words too (`crate::diag`).
pub fn masked_words(text: &str) -> Vec<&str> {
    let masked = redact(text);
    if matches!(masked, Cow::Borrowed(_)) {
        return Vec::new();
    }
    // What is left of each word after masking, counted: a word masked in
    // one place and kept in another is a credential's once.
    let mut kept = std::collections::HashMap::<&str, usize>::new();
    for w in long_words(&masked) {
        *kept.entry(w).or_default() += 1;
    }
    long_words(text)
        .filter(|w| match kept.get_mut(w) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}

/// The runs of `[A-Za-z0-9_.-]` of [`MIN_MASKED_WORD`] characters or more.
fn long_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .filter(|w| w.len() >= MIN_MASKED_WORD)
}

/// Names whose value is an AWS secret, by how their words (split as
/// [`secret_key_name`] splits them) run together end:
/// `aws_secret_access_key`, `AWS_SECRET_ACCESS_KEY`, `secretAccessKey`,
/// `SecretAccessKey` (credentials files, the environment,
/// `auth-profiles.json`, SDK dumps), `aws_session_token`, `sessionToken`,
/// `X-Amz-Security-Token` (temporary credentials: the header and a
/// presigned URL's parameter), `X-Amz-Signature` (a presigned URL's
/// signature).
pub const AWS_SECRET_NAMES: &[&str] = &[
    "secretaccesskey",
    "secretkey",
    "sessiontoken",
    "securitytoken",
    "amzsignature",
];

/// The byte ranges of the values of AWS secrets in `text`: what follows a
/// name of [`AWS_SECRET_NAMES`] (or `Signature` in a text holding an
/// `AWS4-HMAC-SHA256` authorization) and `=` or `:`, with any quotes,
/// backslashes (escaped JSON) and spaces around the separator, up to the
/// first character outside base64, hex and percent-encoding
/// (`[A-Za-z0-9+/=%._~-]`). A name with no value after it (`sessionToken`
/// alone, or followed by `…`) has none.
///
/// `aws_secret_access_key = wJalr…KEY`, `"sessionToken": "IQoJ…"`,
/// `X-Amz-Security-Token: IQoJ…`, `?X-Amz-Signature=abcd…&` and
/// `AWS4-HMAC-SHA256 Credential=AKIA…/20250101/us-east-1/bedrock/aws4_request,
/// SignedHeaders=host;x-amz-date, Signature=abcd…` each give the one range
/// of the secret (the access key id of `Credential=` is not a secret; its
/// `AKIA` prefix has [`redact`] mask it all the same).
pub fn aws_secret_values(text: &str) -> Vec<std::ops::Range<usize>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    if !b.iter().any(|c| matches!(c, b'=' | b':')) {
        return out;
    }
    let sigv4 = b
        .windows(16)
        .any(|w| w.eq_ignore_ascii_case(b"aws4-hmac-sha256"));
    let is_name = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.');
    let is_value = |c: u8| {
        c.is_ascii_alphanumeric()
            || matches!(c, b'+' | b'/' | b'=' | b'%' | b'_' | b'-' | b'.' | b'~')
    };
    let is_around = |c: u8| matches!(c, b'"' | b'\'' | b'\\' | b' ' | b'\t');
    let mut i = 0;
    while i < b.len() {
        if !is_name(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_name(b[i]) {
            i += 1;
        }
        let joined = key_words(&text[start..i]).concat();
        let secret_name = AWS_SECRET_NAMES.iter().any(|n| joined.ends_with(n))
            || (sigv4 && joined == "signature");
        if !secret_name {
            continue;
        }
        let mut j = i;
        while j < b.len() && is_around(b[j]) {
            j += 1;
        }
        if j >= b.len() || !matches!(b[j], b'=' | b':') {
            continue;
        }
        j += 1;
        while j < b.len() && is_around(b[j]) {
            j += 1;
        }
        let from = j;
        while j < b.len() && is_value(b[j]) {
            j += 1;
        }
        if j > from {
            out.push(from..j);
            i = j;
        }
    }
    out
}

/// [`redact`] on every string of a JSON value, object keys included.
pub fn redact_json(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                redact_json(&mut v);
                map.insert(redact(&k).into_owned(), v);
            }
        }
        _ => {}
    }
}

/// Pieces of a stored secret this long or longer are removed wherever they
/// occur: a provider that echoes only the first 30 characters of a key, or
/// its last 12, must not get them printed. Shorter pieces would match
/// ordinary words.
pub const MIN_SECRET_PIECE: usize = 12;

/// The stored secrets, ready to be removed from anything a client, a log
/// or a metric sees (SPEC R16.11): every text a provider sends back is
/// passed through [`Redactor::scrub`] before it goes anywhere.
///
/// A secret is found whole, in any ASCII letter case, and in part (any run
/// of 12 characters of it: providers echo keys
/// upper-cased or cut), and not only as written: in every decoding a
/// reader of the text could apply — JSON and C-style escapes (`\u0073k-…`,
/// `\x73`, a `\\u0073` escaped twice), percent-encoding (`%73k-…`), HTML
/// character references (`&#115;k-…`), any mix of them (a key split
/// across escapes) — and as base64 (`Basic c2stLi4u`, at any of the three
/// alignments inside a longer base64 text). What is removed is the stretch
/// of the text *as written* that decodes to the secret, so a JSON body
/// stays JSON. Its `Debug` shows how many secrets it holds, never one.
///
/// ```
/// use failover_syntax::redact::Redactor;
///
/// let r = Redactor::new(["sk-live-0123456789abcdef"]);
/// let body = r#"{"error":{"message":"bad key \u0073k-live-0123456789abcdef"}}"#;
/// assert_eq!(r.scrub(body), r#"{"error":{"message":"bad key <redacted>"}}"#);
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    /// Every run of [`MIN_SECRET_PIECE`] bytes of every long form
    /// (lower-cased), packed in a `u128`.
    windows: rustc_hash::FxHashSet<u128>,
    /// Forms shorter than a piece: found only whole (lower-cased).
    short: Vec<Vec<u8>>,
    secrets: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets)
    }
}

/// A decoding of a text: its bytes, and per byte the stretch of the raw
/// text it came from.
type View = (Vec<u8>, Vec<(u32, u32)>);

/// How many decodings deep a text is read: a JSON string inside a JSON
/// string inside a percent-encoded URL is three.
const DECODE_DEPTH: usize = 4;

fn pack(w: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    b[..w.len()].copy_from_slice(w);
    u128::from_le_bytes(b)
}

impl Redactor {
    /// A redactor of `secrets` (each trimmed; empty ones are ignored).
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut r = Redactor::default();
        for s in secrets {
            let s = s.as_ref().trim();
            if s.is_empty() {
                continue;
            }
            r.secrets += 1;
            r.add(s.as_bytes());
            // Hex (issue 44 item 11; either case: the windows are
            // lower-cased).
            let hexed: String = s.bytes().map(|b| format!("{b:02x}")).collect();
            r.add(hexed.as_bytes());
            // Base64 of the padded base64 (a header encoded twice).
            let once = base64_padded(s.as_bytes());
            for align in 0..3 {
                let mut bytes = vec![0u8; align];
                bytes.extend_from_slice(once.as_bytes());
                let enc = base64(&bytes, false);
                let from = (8 * align).div_ceil(6);
                let to = (8 * bytes.len()) / 6;
                if to > from && to - from >= MIN_SECRET_PIECE {
                    r.add(&enc.as_bytes()[from..to]);
                }
            }
            // Base64 at each alignment: the characters that depend on the
            // secret's bytes alone.
            for align in 0..3 {
                for url in [false, true] {
                    let mut bytes = vec![0u8; align];
                    bytes.extend_from_slice(s.as_bytes());
                    let enc = base64(&bytes, url);
                    let from = (8 * align).div_ceil(6);
                    let to = (8 * bytes.len()) / 6;
                    if to > from && to - from >= MIN_SECRET_PIECE {
                        r.add(&enc.as_bytes()[from..to]);
                    }
                }
            }
        }
        r
    }

    fn add(&mut self, form: &[u8]) {
        let lower = form.to_ascii_lowercase();
        if lower.len() >= MIN_SECRET_PIECE {
            self.windows
                .extend(lower.windows(MIN_SECRET_PIECE).map(pack));
        } else if !self.short.contains(&lower) {
            self.short.push(lower);
        }
    }

    /// Adds every secret of `other` (a gateway's redactor is the union of
    /// its agents').
    pub fn extend(&mut self, other: Redactor) {
        self.windows.extend(other.windows);
        for s in other.short {
            if !self.short.contains(&s) {
                self.short.push(s);
            }
        }
        self.secrets += other.secrets;
    }

    /// Whether there is nothing to remove.
    pub fn is_empty(&self) -> bool {
        self.secrets == 0
    }

    /// `text` with every stretch that reads as a secret (see the type's
    /// documentation) replaced by `<redacted>`; borrowed when there is
    /// none.
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.is_empty() || text.is_empty() {
            return Cow::Borrowed(text);
        }
        let raw = text.as_bytes();
        let mut hidden = vec![false; raw.len()];
        let mut any = self.mark(raw, None, &mut hidden);
        // Each decoding of the text, as a view: its bytes and, per byte,
        // the stretch of the raw text it came from.
        let mut view: Option<View> = None;
        for _ in 0..DECODE_DEPTH {
            let next = match &view {
                None => decode_once(raw, None),
                Some((bytes, spans)) => decode_once(bytes, Some(spans)),
            };
            let Some(next) = next else { break };
            any |= self.mark(&next.0, Some(&next.1), &mut hidden);
            view = Some(next);
        }
        if !any {
            return Cow::Borrowed(text);
        }
        // Whole characters only: a stretch that cuts a multi-byte
        // character takes all of it.
        for i in 1..raw.len() {
            if hidden[i - 1] && !text.is_char_boundary(i) {
                hidden[i] = true;
            }
        }
        for i in (0..raw.len().saturating_sub(1)).rev() {
            if hidden[i + 1] && !text.is_char_boundary(i + 1) {
                hidden[i] = true;
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < raw.len() {
            if hidden[i] {
                out.push_str("<redacted>");
                while i < raw.len() && hidden[i] {
                    i += 1;
                }
            } else {
                let j = (i..raw.len()).find(|&j| hidden[j]).unwrap_or(raw.len());
                out.push_str(&text[i..j]);
                i = j;
            }
        }
        Cow::Owned(out)
    }

    /// [`Redactor::scrub`] on every string of a JSON value, object keys
    /// included.
    pub fn scrub_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if let Cow::Owned(r) = self.scrub(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    self.scrub_json(&mut v);
                    map.insert(self.scrub(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }

    /// Marks in `hidden` (over the raw text) every stretch of `view` that
    /// holds a form of a secret; `spans` maps the view's bytes to the raw
    /// text (`None`: the view is the raw text).
    fn mark(&self, view: &[u8], spans: Option<&[(u32, u32)]>, hidden: &mut [bool]) -> bool {
        let lower = view.to_ascii_lowercase();
        let mut hide = |from: usize, len: usize| {
            let (a, b) = match spans {
                None => (from, from + len),
                Some(sp) => (sp[from].0 as usize, sp[from + len - 1].1 as usize),
            };
            hidden[a..b].iter_mut().for_each(|h| *h = true);
        };
        let mut any = false;
        if !self.windows.is_empty() && lower.len() >= MIN_SECRET_PIECE {
            for (i, w) in lower.windows(MIN_SECRET_PIECE).enumerate() {
                if self.windows.contains(&pack(w)) {
                    hide(i, MIN_SECRET_PIECE);
                    any = true;
                }
            }
        }
        for s in &self.short {
            for i in memchr::memmem::find_iter(&lower, s) {
                hide(i, s.len());
                any = true;
            }
        }
        any
    }
}

/// Base64 of `bytes` (standard or URL-safe alphabet, no padding): only to
/// recognise a secret written that way, so a dozen lines here rather than
/// a dependency of the library.
fn base64(bytes: &[u8], url: bool) -> String {
    const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for k in 0..=chunk.len() {
            let c = STD[(n >> (18 - 6 * k) & 63) as usize];
            out.push(match (url, c) {
                (true, b'+') => '-',
                (true, b'/') => '_',
                _ => c as char,
            });
        }
    }
    out
}

/// Standard base64 with `=` padding, as a header or a file holds it.
fn base64_padded(bytes: &[u8]) -> String {
    let mut out = base64(bytes, false);
    let pad = (4 - out.len() % 4) % 4;
    out.extend(std::iter::repeat_n('=', pad));
    out
}

/// The character an HTML named reference stands for, of those a key's
/// characters can be written as (`&sol;` for `/`, …; `-` has none: the
/// standard's `&hyphen;` is U+2010).
fn named_reference(name: &[u8]) -> Option<char> {
    Some(match name {
        b"sol" => '/',
        b"bsol" => '\\',
        b"plus" => '+',
        b"equals" => '=',
        b"lowbar" | b"UnderBar" => '_',
        b"period" => '.',
        b"colon" => ':',
        b"semi" => ';',
        b"comma" => ',',
        b"excl" => '!',
        b"num" => '#',
        b"dollar" => '$',
        b"percnt" => '%',
        b"ast" | b"midast" => '*',
        b"quest" => '?',
        b"commat" => '@',
        b"Hat" => '^',
        b"grave" | b"DiacriticalGrave" => '`',
        b"verbar" | b"vert" | b"VerticalLine" => '|',
        b"tilde" => '~',
        b"lpar" => '(',
        b"rpar" => ')',
        b"lsqb" | b"lbrack" => '[',
        b"rsqb" | b"rbrack" => ']',
        b"lcub" | b"lbrace" => '{',
        b"rcub" | b"rbrace" => '}',
        b"amp" | b"AMP" => '&',
        b"lt" | b"LT" => '<',
        b"gt" | b"GT" => '>',
        b"quot" | b"QUOT" => '"',
        b"apos" => '\'',
        _ => return None,
    })
}

fn hex(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// One layer of decoding of `view`: JSON / C escapes (`\n`, `\u0041`,
/// `\u{41}`, `\x41`, octal `\101`), `%XX`, quoted-printable `=41` (and
/// its soft line breaks), `&#…;` and the named references a key's
/// characters have (`&sol;`). The decoded bytes, each with the raw
/// stretch it came from (through `spans` when `view` is itself decoded);
/// `None` when nothing decodes. Linear in the view.
fn decode_once(view: &[u8], spans: Option<&[(u32, u32)]>) -> Option<View> {
    if !view.iter().any(|b| matches!(b, b'\\' | b'%' | b'&' | b'=')) {
        return None;
    }
    let span = |from: usize, to: usize| match spans {
        None => (from as u32, to as u32),
        Some(sp) => (sp[from].0, sp[to - 1].1),
    };
    let mut out = Vec::with_capacity(view.len());
    let mut map = Vec::with_capacity(view.len());
    let mut changed = false;
    let mut i = 0;
    while i < view.len() {
        let rest = &view[i..];
        // A quoted-printable soft line break (`=` at a line's end) joins
        // the lines: it decodes to nothing.
        if let [b'=', b'\r', b'\n', ..] | [b'=', b'\n', ..] = rest {
            changed = true;
            i += if rest[1] == b'\r' { 3 } else { 2 };
            continue;
        }
        // (decoded char or byte, length of the escape)
        let decoded: Option<(Result<char, u8>, usize)> = match rest {
            // `\u{1F600}`: Rust, JavaScript, Swift.
            [b'\\', b'u', b'{', ..] => {
                let digits = &rest[3..];
                let n = digits
                    .iter()
                    .take(7)
                    .take_while(|b| hex(**b).is_some())
                    .count();
                match digits.get(n) {
                    Some(b'}') if (1..=6).contains(&n) => digits[..n]
                        .iter()
                        .try_fold(0u32, |acc, b| Some(acc << 4 | hex(*b)?))
                        .map(|cp| (Ok(char::from_u32(cp).unwrap_or('\u{FFFD}')), 3 + n + 1)),
                    _ => None,
                }
            }
            [b'\\', b'u', a, b, c, d, ..] => {
                match (hex(*a), hex(*b), hex(*c), hex(*d)) {
                    (Some(a), Some(b), Some(c), Some(d)) => {
                        let hi = a << 12 | b << 8 | c << 4 | d;
                        // A surrogate pair: `\ud83d\ude00`.
                        let pair = match &rest[6..] {
                            [b'\\', b'u', a, b, c, d, ..] if (0xD800..0xDC00).contains(&hi) => {
                                match (hex(*a), hex(*b), hex(*c), hex(*d)) {
                                    (Some(a), Some(b), Some(c), Some(d)) => {
                                        let lo = a << 12 | b << 8 | c << 4 | d;
                                        (0xDC00..0xE000).contains(&lo).then(|| {
                                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                                        })
                                    }
                                    _ => None,
                                }
                            }
                            _ => None,
                        };
                        match pair {
                            Some(cp) => Some((Ok(char::from_u32(cp).unwrap_or('\u{FFFD}')), 12)),
                            None => Some((Ok(char::from_u32(hi).unwrap_or('\u{FFFD}')), 6)),
                        }
                    }
                    _ => None,
                }
            }
            [b'\\', b'x', a, b, ..] => match (hex(*a), hex(*b)) {
                (Some(a), Some(b)) => Some((Err((a << 4 | b) as u8), 4)),
                _ => None,
            },
            // C and Python octal: `\163`.
            // (Read by the standard parser: three octal digits of at most
            // `\377` always fit a byte.)
            [b'\\', b'0'..=b'3', b'0'..=b'7', b'0'..=b'7', ..] => std::str::from_utf8(&rest[1..4])
                .ok()
                .and_then(|t| u8::from_str_radix(t, 8).ok())
                .map(|b| (Err(b), 4)),
            [b'\\', e, ..] => {
                let c = match e {
                    b'n' => Some('\n'),
                    b't' => Some('\t'),
                    b'r' => Some('\r'),
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'/' | b'\\' | b'"' | b'\'' => Some(*e as char),
                    _ => None,
                };
                c.map(|c| (Ok(c), 2))
            }
            [b'%', a, b, ..] => match (hex(*a), hex(*b)) {
                (Some(a), Some(b)) => Some((Err((a << 4 | b) as u8), 3)),
                _ => None,
            },
            // Quoted-printable: `=73`.
            [b'=', a, b, ..] => match (hex(*a), hex(*b)) {
                (Some(a), Some(b)) => Some((Err((a << 4 | b) as u8), 3)),
                _ => None,
            },
            [b'&', name @ ..] if name.first().is_some_and(u8::is_ascii_alphabetic) => {
                let n = name
                    .iter()
                    .take(17)
                    .take_while(|b| b.is_ascii_alphanumeric())
                    .count();
                match name.get(n) {
                    Some(b';') => named_reference(&name[..n]).map(|c| (Ok(c), n + 2)),
                    _ => None,
                }
            }
            [b'&', b'#', ..] => {
                let (digits, radix, skip) = match rest.get(2) {
                    Some(b'x' | b'X') => (&rest[3..], 16, 3),
                    _ => (&rest[2..], 10, 2),
                };
                let n = digits
                    .iter()
                    .take(8)
                    .take_while(|b| (**b as char).is_digit(radix))
                    .count();
                match digits.get(n) {
                    Some(b';') if n > 0 => std::str::from_utf8(&digits[..n])
                        .ok()
                        .and_then(|t| u32::from_str_radix(t, radix).ok())
                        .map(|cp| (Ok(char::from_u32(cp).unwrap_or('\u{FFFD}')), skip + n + 1)),
                    _ => None,
                }
            }
            _ => None,
        };
        match decoded {
            Some((c, len)) => {
                changed = true;
                let mut buf = [0u8; 4];
                let bytes = match c {
                    Ok(c) => c.encode_utf8(&mut buf).as_bytes(),
                    Err(b) => {
                        buf[0] = b;
                        &buf[..1]
                    }
                };
                for b in bytes {
                    out.push(*b);
                    map.push(span(i, i + len));
                }
                i += len;
            }
            None => {
                out.push(view[i]);
                map.push(span(i, i + 1));
                i += 1;
            }
        }
    }
    changed.then_some((out, map))
}

/// A parser message with what it quotes from the file taken out: the YAML
/// parser quotes a scalar it cannot read as its tag says (`invalid value:
/// string "…", expected an integer`), and a duplicate key by name. A
/// quoted value is always cut; a quoted key only when it looks like a
/// secret. What is left goes through [`redact`]: serde also quotes an
/// unknown key in backticks (`` unknown field `sk-…` ``), and a mistyped
/// line may hold a key (the fuzz targets found it, issue 36).
pub fn scrub_quoted(msg: &str) -> String {
    let mut out = String::new();
    let mut rest = msg;
    while let Some(open) = rest.find('"') {
        let body = &rest[open + 1..];
        let mut escaped = false;
        let close = body.char_indices().find_map(|(j, c)| {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => return Some(j),
                _ => {}
            }
            None
        });
        let Some(close) = close else { break };
        out.push_str(&rest[..open]);
        let quoted = &body[..close];
        if out.ends_with("string ") || looks_like_secret(quoted) {
            out.push_str("\"…\"");
        } else {
            out.push('"');
            out.push_str(quoted);
            out.push('"');
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    match redact(&out) {
        Cow::Borrowed(_) => out,
        Cow::Owned(o) => o,
    }
}

/// The text of a serde error without the value it quotes: serde's
/// "invalid type: string \"…\", expected …" would repeat whatever was in
/// the file.
pub fn scrub_serde_error(e: &serde_json::Error) -> String {
    let s = e.to_string();
    if let Some(rest) = s.strip_prefix("invalid type: ") {
        let kind = rest.split([' ', ',']).next().unwrap_or("value");
        let expected = rest.split(", expected ").nth(1).unwrap_or("another type");
        return format!("a {kind} where {expected} was expected");
    }
    if let Some(rest) = s.strip_prefix("invalid value: ") {
        let expected = rest.split(", expected ").nth(1).unwrap_or("another value");
        return format!("a value where {expected} was expected");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    // A key name as its words, as the config's secret check reads it
    // (moved from failover's config tests).
    #[test]
    fn key_names_split_into_words() {
        assert_eq!(key_words("APIKey"), ["api", "key"]);
        assert_eq!(
            key_words("oauth2AccessToken"),
            ["oauth2", "access", "token"]
        );
        assert_eq!(key_words("x-api_key.v2"), ["x", "api", "key", "v2"]);
    }

    // The next four tests moved here from failover's config tests.
    // R16.11: a key that names a secret hides its line in any spelling.
    #[test]
    fn r16_11_secret_keys_in_any_spelling_hide_the_line() {
        for line in [
            "      accessToken: FAKE",
            "      access_token: FAKE",
            "      refreshToken: FAKE",
            "      refresh: FAKE",
            "      access: FAKE",
            "      apiToken: FAKE",
            "      APIKey: FAKE",
            "      API-KEY: FAKE",
            "      apikey: FAKE",
            "      x-api-key: FAKE",
            "      key: FAKE",
            "      privateKey: FAKE",
            "      private_key_pem: FAKE",
            "      bearer: FAKE",
            "      bearerToken: FAKE",
            "      authorization: FAKE",
            "      Authorization : FAKE",
            "      auth_header: FAKE",
            "      authHeader: FAKE",
            "      client_secret: FAKE",
            "      clientSecret: FAKE",
            "      CLIENT-SECRET: FAKE",
            "      password: FAKE",
            "      Passwd: FAKE",
            "      pwd: FAKE",
            "      credentials: FAKE",
            "      sessionCookie: FAKE",
            r#"  "apiKey" : "x""#,
            r#"{"agents": {}, "auth": {"profiles": {"a:b": {"accessToken":"FAKE"}}}}"#,
            "    x:default: { provider: x, oauthRefreshToken: FAKE }",
            "    'refresh-token': FAKE",
            "      accessToken:",
        ] {
            assert!(may_hold_secret(line), "{line}");
        }
    }

    // R16.11: a value shaped like a credential hides its line whatever the
    // key, and is never echoed in a message.
    #[test]
    fn r16_11_secret_values_hide_the_line() {
        for line in [
            "      note: sk-live-FAKE-0001",
            "      note: sk-ant-api03-FAKE",
            "      note: sk_live_FAKE0001",
            "        sk-live-FAKE-0001",
            "    - ghp_FAKEFAKEFAKE0001",
            "      slack: xoxb-1234-FAKE",
            "      id: AKIAFAKEFAKEFAKE0001",
            "      hint: \"Bearer FAKE\"",
            "      hint: bearer abc",
            "      hint: Basic dXNlcjpwYXNzd29yZA==",
            "      url: https://user:FAKE@example.com/v1",
            "      blob: 9fA3kQ7zL2mW8vR4tY6uP1sD0",
            "      blob: 3f9a0c2e7b4d1f6a8c5e9b2d7f4a1c3e",
            "      blob: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.FAKE",
            "      primary: openai/sk-live-FAKE-0001",
        ] {
            assert!(may_hold_secret(line), "{line}");
        }
    }

    // Lines the config really holds are still quoted: keys it reads, model
    // ids, profile ids, e-mails, modes, comments.
    #[test]
    fn harmless_lines_are_still_shown() {
        for line in [
            "  primary: ollama/monkey:7b",
            "auth:",
            "    authPermanentBackoffMinutes: 10",
            "    billingBackoffHoursByProvider: { openrouter: 1 }",
            "    rateLimitedProfileRotations: 2",
            "  order:",
            "    openai: [\"openai:default\", \"openai:me@example.com\"]",
            "      mode: token",
            "      type: api_key",
            "      primary: anthropic/claude-3-5-sonnet-20241022",
            "      fallbacks: [together/Meta-Llama-3.1-70B-Instruct-Turbo, groq/deepseek-r1-distill-llama-70b]",
            "      fallbacks: [bedrock/us.anthropic.claude-3-5-sonnet-20241022-v2:0]",
            "      fallbacks: [ollama/qwen2.5-coder-32b-instruct-q4_K_M, google/gemini-2.0-flash-thinking-exp-01-21]",
            "      email: firstname.lastname99@example.com",
            "# keep tokens out of this file",
        ] {
            assert!(!may_hold_secret(line), "{line}");
        }
    }

    // Random keys of 32 characters are nearly always taken for secrets,
    // whatever their alphabet (a fixed generator keeps the test stable).
    #[test]
    fn random_tokens_are_recognised() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabets = [
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
            "0123456789abcdef",
            "abcdefghijklmnopqrstuvwxyz0123456789",
        ];
        for alphabet in alphabets {
            let chars: Vec<char> = alphabet.chars().collect();
            let found = (0..1000)
                .filter(|_| {
                    let token: String = (0..32)
                        .map(|_| chars[(next() % chars.len() as u64) as usize])
                        .collect();
                    random_token(&token)
                })
                .count();
            assert!(found >= 990, "{alphabet}: {found} of 1000");
        }
        assert!(!random_token("billingBackoffHoursByProvider"));
        assert!(!random_token("claude-3-7-sonnet-20250219"));
    }

    // R16.11: a masked secret shows its ends only from 16 characters up,
    // and never a control character.
    #[test]
    fn r16_11_mask_shows_ends_only_of_long_secrets() {
        assert_eq!(mask(""), "…");
        assert_eq!(mask("abcdefghijklmno"), "…"); // 15
        assert_eq!(mask("abcdefghijklmnop"), "abc…mnop"); // 16
        assert_eq!(mask("sk-\u{1b}defghijklm\nop\u{7}"), "sk-…?op?");
    }

    // The keys a line sets, as `may_hold_secret` reads them: a plain key
    // ends at `: ` or the line end; a quoted key is what the quotes hold;
    // a `:` inside a value or an id sets none.
    #[test]
    fn line_keys_are_the_keys_a_line_sets() {
        let keys = |line| line_keys(line).collect::<Vec<_>>();
        assert_eq!(keys("  primary: ollama/monkey:7b"), ["primary"]);
        assert_eq!(
            keys("    openai:default: { provider: x }"),
            ["openai:default", "provider"]
        );
        assert_eq!(keys(r#"  "apiKey" : "x""#), ["apiKey"]);
        assert_eq!(keys("{a: 1, 'b': 2, c:d}"), ["a", "b"]);
        assert_eq!(keys("[x: 1]"), ["x"]);
        assert_eq!(keys("list,item:\tv"), ["item"]);
        assert_eq!(keys("\tkey\t:\r"), ["key"]);
        assert_eq!(keys("key:"), ["key"]);
        assert!(keys(": x").is_empty());
        assert!(keys("a:b").is_empty());
        assert!(keys("no colon").is_empty());
        // A profile id holds a `:`: its value is a profile, not a secret,
        // whatever words the id has.
        assert!(!may_hold_secret(
            "    openai:api-key-backup: { provider: openai }"
        ));
        assert!(may_hold_secret("    api-key-backup: x"));
    }

    // Prefixes written in lower case are matched in any case (providers
    // echo keys upper-cased); those with capitals (`AKIA`, `AIza`, `eyJ`)
    // only as written, so ordinary words that start the same way pass.
    #[test]
    fn r16_11_prefixes_match_in_their_case() {
        assert!(looks_like_secret("SK-LIVE-FAKEFAKE"));
        assert!(looks_like_secret("GHP_FAKEFAKEFAKE"));
        assert!(!looks_like_secret("eyjafjallajokull_eruption"));
        assert!(!looks_like_secret("akiakchak_national_preserve"));
        // The shortest token that counts.
        assert!(looks_like_secret("sk-abcde"));
        assert!(!looks_like_secret("sk-abcd"));
    }

    // A URL's password, not an `@` later in its path, makes a secret; a
    // `:` in a path or after the host is not one.
    #[test]
    fn r16_11_only_a_url_password_is_a_secret() {
        for plain in [
            "see https://example.com/users/me:x@y",
            "see https://example.com:8443/v1",
            "mail https://example.com user:x@y",
            "quoted \"https://example.com\"a:b@c",
        ] {
            assert!(!looks_like_secret(plain), "{plain}");
            assert_eq!(redact(plain), plain);
        }
        assert_eq!(
            redact("see http://u:pw@h/x and https://v:pw2@k"),
            "see http://u:…@h/x and https://v:…@k"
        );
        assert_eq!(
            redact("'ftp://a:b:c@d' \"s3://e:f@g\"\thttps://x:y@z"),
            "'ftp://a:…@d' \"s3://e:…@g\"\thttps://x:…@z"
        );
    }

    // After `Bearer` / `Basic` the next word goes, keeping the spaces;
    // the scheme word with nothing after it, or glued to punctuation,
    // masks nothing.
    #[test]
    fn r16_11_masked_words_are_the_credentials_words() {
        assert_eq!(
            masked_words("and Basic dXNlcjpodW50ZXIyMg==(type in [x])"),
            ["dXNlcjpodW50ZXIyMg"]
        );
        assert_eq!(
            masked_words("auth: bearer lowEr.CaSeToKeN42.x then"),
            ["lowEr.CaSeToKeN42.x"]
        );
        assert_eq!(
            masked_words("key sk-proj-abcdefghijklmnopqrstuvwxyz123456 failed"),
            ["sk-proj-abcdefghijklmnopqrstuvwxyz123456"]
        );
        assert_eq!(
            masked_words("https://bob:Hunter2Secret9@example.com/v1"),
            ["Hunter2Secret9"]
        );
        // Nothing to mask, nothing masked; short words are never taken.
        assert!(masked_words("rule x when message has validationexception").is_empty());
        assert!(masked_words("Bearer abc.def now").is_empty());
        // A word masked in one place and shown in another is a credential
        // once.
        assert_eq!(
            masked_words("tokenvalue1 Bearer tokenvalue1 Bearer tokenvalue1"),
            ["tokenvalue1", "tokenvalue1"]
        );
    }

    #[test]
    fn r16_11_scheme_masks_the_next_word_only() {
        let key = "sk-proj-abcdefghijklmnop";
        assert_eq!(
            redact(&format!("{key} (Bearer), ok")),
            "sk-…mnop (Bearer), ok"
        );
        assert_eq!(redact(&format!("{key} Bearer ")), "sk-…mnop Bearer ");
        assert_eq!(
            redact(&format!("{key} Bearer \n x")),
            "sk-…mnop Bearer \n x"
        );
        assert_eq!(redact("Bearer  \tabc.def next"), "Bearer  \t… next");
        assert_eq!(redact("basic  dXNlcjpodW50ZXIy!"), "basic  …");
        assert!(!looks_like_secret("Bearer"));
        assert!(!looks_like_secret("auth (Bearer), none"));
        assert!(!looks_like_secret("Bearer #1 of 2"));
        assert!(looks_like_secret("bearer\tx"));
        assert!(!looks_like_secret("Basic dXNlcjp"));
        assert!(looks_like_secret("Basic dXNlcjpw"));
    }

    // Where `random_token` draws its lines (its documentation): length,
    // the mix of kinds, a long mixed piece or enough switches of kind.
    #[test]
    fn random_token_boundaries() {
        // 24 characters or more.
        assert!(random_token("a1b2c3d4e5f6g7h8i9j0k1l2"));
        assert!(!random_token("a1b2c3d4e5f6g7h8i9j0k1l"));
        // Digits alone are not; letters need digits or a quarter of each
        // case.
        assert!(!random_token("123456789012345678901234"));
        assert!(random_token("aaaBaaaBaaaBaaaBaaaBaaaB")); // 6 upper of 24
        assert!(!random_token("aaaBaaaBaaaBaaaBaaaBaaaa")); // 5 upper
        assert!(random_token("AAAbAAAbAAAbAAAbAAAbAAAb")); // 6 lower of 24
        assert!(!random_token("AAAbAAAbAAAbAAAbAAAbAAAA")); // 5 lower
                                                            // Upper case against digits is a switch of kind (AWS-style ids).
        assert!(random_token("ABCD1234EFGH5678IJKL9012"));
        // A piece of 16 or more counts only when it mixes kinds.
        assert!(!random_token("abcdefghijklmnop-1234567"));
        assert!(random_token("abcdefghijklmnopqrstuvw1"));
        // Short pieces count by their switches, from 8 on.
        assert!(!random_token("abcdefghijklmnop-a1b2c3d"));
        assert!(random_token("aa1-bb2-cc3-dd4-ee5-ff6-gg7-hh8"));
        assert!(!random_token("aa1-bb2-cc3-dd4-ee5-ff6-gg7-hhh"));
    }

    const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

    // Issue 33: AWS secrets in every form AWS tools write them are masked
    // by `redact`, seen by `looks_like_secret`, and the lines that hold
    // them are not quoted.
    #[test]
    fn aws_secrets_are_masked_in_every_form() {
        let cases = [
            (
                "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "aws_secret_access_key=…",
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "aws_secret_access_key = …",
            ),
            (
                "export AWS_SECRET_ACCESS_KEY='wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY'",
                "export AWS_SECRET_ACCESS_KEY='…'",
            ),
            (
                r#"{"type": "aws", "secretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "region": "us-west-2"}"#,
                r#"{"type": "aws", "secretAccessKey": "…", "region": "us-west-2"}"#,
            ),
            (
                r#"{\"SecretAccessKey\":\"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\"}"#,
                r#"{\"SecretAccessKey\":\"…\"}"#,
            ),
            (
                "aws_session_token=IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD",
                "aws_session_token=…",
            ),
            (
                r#""sessionToken":"IQoJb3JpZ2luX2Vj+/EJr==""#,
                r#""sessionToken":"…""#,
            ),
            (
                "X-Amz-Security-Token: IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD",
                "X-Amz-Security-Token: …",
            ),
            (
                "x-amz-security-token:FwoGZXIvYXdzEBYaD",
                "x-amz-security-token:…",
            ),
            (
                "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20150830/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
                "Authorization: AWS4-HMAC-SHA256 Credential=AKI…MPLE/20150830/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=…",
            ),
            (
                "GET /x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130721%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=IQoJb3JpZ2luX2Vj%2F%2BEJr&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404 HTTP/1.1",
                "GET /x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKI…MPLE%2F20130721%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=…&X-Amz-Signature=… HTTP/1.1",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redact(text), want, "{text}");
            assert!(looks_like_secret(text), "{text}");
            assert!(may_hold_secret(text), "{text}");
            // Masked text stays as it is.
            assert_eq!(redact(want), want, "{want}");
            assert!(!redact(text).contains("EXAMPLEKEY"));
        }
        // Names without a value, and ordinary words, are left alone.
        for text in [
            "the session token expired",
            "set sessionToken in auth-profiles.json",
            "secretAccessKey: …",
            "region: us-west-2",
            "Signature=abc without a SigV4 header",
            // Bedrock's own message for a bad signature keeps every word.
            "InvalidSignatureException: The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
            "UnrecognizedClientException: The security token included in the request is invalid.",
        ] {
            assert_eq!(redact(text), text);
            assert!(aws_secret_values(text).is_empty(), "{text}");
        }
        assert_eq!(aws_secret_values("a=1 secret_key: abc"), vec![16..19]);
    }

    // A stored AWS secret (with its `/` and `+`) is scrubbed by the
    // redactor in the forms a provider or a proxy echoes it.
    #[test]
    fn stored_aws_secrets_are_scrubbed_when_encoded() {
        let r = Redactor::new([AWS_SECRET]);
        for text in [
            "key wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY rejected",
            r#"{"secret":"wJalrXUtnFEMI\/K7MDENG+bPxRfiCYEXAMPLEKEY"}"#,
            "secret=wJalrXUtnFEMI%2FK7MDENG%2BbPxRfiCYEXAMPLEKEY",
            "SECRET WJALRXUTNFEMI/K7MDENG+BPXRFICYEXAMPLEKEY",
        ] {
            let out = r.scrub(text);
            assert!(out.contains("<redacted>"), "{text} → {out}");
            assert!(!out.to_lowercase().contains("examplekey"), "{text} → {out}");
        }
    }

    #[test]
    fn redact_masks_only_credential_shaped_parts() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz123456";
        assert_eq!(
            redact(&format!("profile {key} failed")),
            "profile sk-…3456 failed"
        );
        assert_eq!(redact(&format!("openai:{key}")), "openai:sk-…3456");
        assert_eq!(
            redact("Authorization: Bearer abc.def"),
            "Authorization: Bearer …"
        );
        assert_eq!(
            redact("https://bob:hunter22@example.com/x"),
            "https://bob:…@example.com/x"
        );
        for plain in [
            "openai/gpt-5.2",
            "anthropic:default",
            "rate_limit.402_usage_window",
            "sk-…3456",
        ] {
            assert_eq!(redact(plain), plain);
        }
        // Idempotent.
        let once = redact(&format!("{key} and Bearer {key} x")).into_owned();
        assert_eq!(once, "sk-…3456 and Bearer … x");
        assert_eq!(redact(&once), once);
        assert!(!once.contains("abcdefghij"), "{once}");
    }

    // R16.11: a parser message that quotes a secret in backticks (serde's
    // `unknown field`) does not repeat it.
    #[test]
    fn r16_11_scrub_quoted_masks_backticked_secrets() {
        let m = scrub_quoted(
            "unknown field `sk-FAKE-0123456789abcdefghij status`, expected one of `status`",
        );
        assert_eq!(
            m,
            "unknown field `sk-…ghij status`, expected one of `status`"
        );
        // The word after a scheme goes whole, up to the next space.
        let m = scrub_quoted("unknown field `Bearer abc.def.ghi`, expected `x`");
        assert_eq!(m, "unknown field `Bearer … expected `x`");
    }

    // R16.11: the credential after an auth scheme is masked whatever the
    // scheme word's case (HTTP auth schemes are case-insensitive, RFC 9110
    // §11.1), and the line is recognised as holding a secret.
    #[test]
    fn r16_11_scheme_credentials_are_masked_in_any_case() {
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let line = format!("authorization: {scheme} abc.def-ghi");
            assert_eq!(redact(&line), format!("authorization: {scheme} …"));
            assert!(looks_like_secret(&line), "{line}");
        }
        for scheme in ["Basic", "basic", "BASIC"] {
            let line = format!("Authorization: {scheme} dXNlcjpodW50ZXIy");
            assert_eq!(redact(&line), format!("Authorization: {scheme} …"));
            assert!(looks_like_secret(&line), "{line}");
        }
        // `Basic` needs a base64 credential of 8 characters or more.
        assert!(!looks_like_secret("basic auth"));
    }

    /// Issue 16 item 7: an echoed key, upper-cased or cut to its first 30
    /// characters (or its last 12), is removed.
    #[test]
    fn scrub_known_removes_case_changed_and_partial_echoes() {
        let scrub_known =
            |text: &str, secrets: &[String]| Redactor::new(secrets).scrub(text).into_owned();
        let key = "sk-live-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789".to_string();
        let secrets = [key.clone()];
        for echo in [
            key.clone(),
            key.to_ascii_uppercase(),
            key[..30].to_string(),
            key[key.len() - 12..].to_string(),
            key[5..25].to_ascii_lowercase(),
        ] {
            let out = scrub_known(&format!("invalid key «{echo}» given"), &secrets);
            assert_eq!(out, "invalid key «<redacted>» given", "{echo}");
        }
        // Short runs of it are ordinary text.
        assert_eq!(
            scrub_known("sk-live-Ab is fine", &secrets),
            "sk-live-Ab is fine"
        );
        // A short secret goes only whole, in any case.
        assert_eq!(
            scrub_known("pw HUNTER2 pw", &["hunter2".into()]),
            "pw <redacted> pw"
        );
    }

    #[test]
    fn scrubbed_errors_do_not_quote_values() {
        let e = serde_json::from_value::<u64>(serde_json::json!("sk-secret")).unwrap_err();
        let s = scrub_serde_error(&e);
        assert!(!s.contains("sk-secret"), "{s}");
        assert!(s.contains("u64"), "{s}");
    }

    /// Issue 30: a key written with escapes, percent-encoded, as HTML
    /// references, in base64, or split across escapes is found in the text
    /// as written, and only that stretch is removed.
    #[test]
    fn a_secret_is_found_in_every_encoding_a_reader_could_decode() {
        let key = "sk-proj-AbCdEf0123456789XyZ";
        let r = Redactor::new([key]);
        let json_escaped: String = key
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let split = format!("{}\\u{:04x}{}", &key[..10], key.as_bytes()[10], &key[11..]);
        let percent: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
        let html: String = key.chars().map(|c| format!("&#{};", c as u32)).collect();
        let twice = json_escaped.replace('\\', "\\\\");
        let b64 = base64(format!("user:{key}").as_bytes(), false);
        let b64_url = base64(format!("xy{key}").as_bytes(), true);
        for form in [
            key.to_string(),
            json_escaped,
            split,
            percent,
            html,
            twice,
            b64,
            b64_url,
            key.to_ascii_uppercase(),
        ] {
            let text = format!(r#"{{"error":{{"message":"bad key «{form}» given"}}}}"#);
            let out = r.scrub(&text);
            assert!(out.contains("<redacted>"), "{form}: {out}");
            // No decoding of the output shows the key or a piece of it.
            assert!(!r.scrub(&out).contains(key), "{form}");
            let decoded = decode_once(out.as_bytes(), None).map_or(out.to_string(), |(b, _)| {
                String::from_utf8_lossy(&b).into_owned()
            });
            assert!(
                !decoded.contains(&key[..MIN_SECRET_PIECE]),
                "{form}: {decoded}"
            );
            // The JSON around it is intact.
            let v: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
            assert!(v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("bad key «"));
        }
        // Nothing to find: the text is borrowed as it is.
        assert!(matches!(
            r.scrub("plain %41 \\u0041 text"),
            Cow::Borrowed(_)
        ));
        assert_eq!(format!("{r:?}"), "Redactor(1 secrets)");
    }

    // Issue 44 item 11: hex (either case), C octal, `\u{…}`,
    // quoted-printable (with soft line breaks), named HTML references and
    // base64 of base64 are read too.
    #[test]
    fn i44_11_more_encodings_are_read() {
        let key = "sk-proj-AbCdEf0123456789XyZ";
        let slashy = "a1/b2/c3/d4/e5/f6/g7";
        let r = Redactor::new([key, slashy]);
        let hex_lower: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        let octal: String = key.bytes().map(|b| format!("\\{b:03o}")).collect();
        let braces: String = key
            .chars()
            .map(|c| format!("\\u{{{:x}}}", c as u32))
            .collect();
        let qp: String = key.bytes().map(|b| format!("={b:02X}")).collect();
        // Soft line breaks every 8 characters: no 12 of the key in a row.
        let qp_soft = key
            .as_bytes()
            .chunks(8)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("=\r\n");
        let qp_soft_lf = qp_soft.replace("=\r\n", "=\n");
        let twice = base64(base64_padded(key.as_bytes()).as_bytes(), false);
        let named = slashy.replace('/', "&sol;");
        for (secret, form) in [
            (key, hex_lower.clone()),
            (key, hex_lower.to_ascii_uppercase()),
            (key, octal),
            (key, braces),
            (key, qp),
            (key, qp_soft),
            (key, qp_soft_lf),
            (key, twice),
            (slashy, named),
        ] {
            assert!(!form.contains(secret) || form == secret);
            let text = format!("bad key «{form}» given");
            let out = r.scrub(&text);
            assert!(out.contains("<redacted>"), "{form}: {out}");
            assert!(
                out.starts_with("bad key «") && out.ends_with("» given"),
                "{out}"
            );
            let mut view = out.as_bytes().to_vec();
            for _ in 0..DECODE_DEPTH {
                match decode_once(&view, None) {
                    Some((b, _)) => view = b,
                    None => break,
                }
            }
            let decoded = String::from_utf8_lossy(&view);
            assert!(!decoded.contains(&secret[..10]), "{form}: {decoded}");
        }
        // `\u{}` needs one to six digits; anything else is left as it is.
        for text in [&br"x\u{}y"[..], br"x\u{1234567}y", br"x\u{12"] {
            assert!(decode_once(text, None).is_none(), "{text:?}");
        }
        assert_eq!(
            decode_once(br"\u{10FFFF}", None).unwrap().0,
            "\u{10FFFF}".as_bytes()
        );
        // Octal: three digits, at most `\377`.
        assert_eq!(decode_once(br"\101\377", None).unwrap().0, b"A\xff");
        assert!(decode_once(br"x\400 \18", None).is_none());
        // Padding as RFC 4648 writes it.
        assert_eq!(base64_padded(b"a"), "YQ==");
        assert_eq!(base64_padded(b"ab"), "YWI=");
        assert_eq!(base64_padded(b"abc"), "YWJj");
        // Every named reference, as the HTML standard defines it.
        for (name, c) in [
            ("sol", '/'),
            ("bsol", '\\'),
            ("plus", '+'),
            ("equals", '='),
            ("lowbar", '_'),
            ("UnderBar", '_'),
            ("period", '.'),
            ("colon", ':'),
            ("semi", ';'),
            ("comma", ','),
            ("excl", '!'),
            ("num", '#'),
            ("dollar", '$'),
            ("percnt", '%'),
            ("ast", '*'),
            ("midast", '*'),
            ("quest", '?'),
            ("commat", '@'),
            ("Hat", '^'),
            ("grave", '`'),
            ("DiacriticalGrave", '`'),
            ("verbar", '|'),
            ("vert", '|'),
            ("VerticalLine", '|'),
            ("tilde", '~'),
            ("lpar", '('),
            ("rpar", ')'),
            ("lsqb", '['),
            ("lbrack", '['),
            ("rsqb", ']'),
            ("rbrack", ']'),
            ("lcub", '{'),
            ("lbrace", '{'),
            ("rcub", '}'),
            ("rbrace", '}'),
            ("amp", '&'),
            ("AMP", '&'),
            ("lt", '<'),
            ("LT", '<'),
            ("gt", '>'),
            ("GT", '>'),
            ("quot", '"'),
            ("QUOT", '"'),
            ("apos", '\''),
        ] {
            assert_eq!(named_reference(name.as_bytes()), Some(c), "{name}");
            let text = format!("x&{name};y");
            let (b, _) = decode_once(text.as_bytes(), None).unwrap();
            assert_eq!(String::from_utf8(b).unwrap(), format!("x{c}y"), "{name}");
        }
        assert_eq!(named_reference(b"nosuch"), None);
        // Ordinary text with `=` and `&` stays as it is.
        let plain = "a=1&b=2 x=FF &amp; y";
        assert_eq!(r.scrub(plain), plain);
    }

    // R16.11: a name of an AWS secret with no value after it, at the end
    // of a text or before a word, gives no range (and reads nothing past
    // the end).
    #[test]
    fn aws_names_without_a_value_give_nothing() {
        // (A `=` or `:` elsewhere, so the names are looked at.)
        for text in [
            "a=1 sessionToken",
            "a=1 sessionToken  ",
            "sessionToken:",
            "sessionToken = ",
            "a: the sessionToken xabc",
            "a=1 aws_secret_access_key\t\"",
        ] {
            assert!(aws_secret_values(text).is_empty(), "{text:?}");
            assert_eq!(redact(text), text);
        }
        assert_eq!(aws_secret_values("sessionToken:x"), vec![13..14]);
    }

    // R16.11: every string of a JSON value is redacted or scrubbed,
    // object keys and nested arrays included; numbers stay.
    #[test]
    fn r16_11_json_values_are_redacted_everywhere() {
        let key = "sk-proj-abcdefghijklmnopqrstuv";
        let doc = || {
            serde_json::json!({
                "error": {"message": format!("bad key {key}"), "n": 3},
                key: [format!("Bearer {key}"), [format!("x {key}")], null],
                "plain": "openai/gpt-5.2",
            })
        };
        let mut v = doc();
        redact_json(&mut v);
        let shown = v.to_string();
        assert!(!shown.contains("abcdefghij"), "{shown}");
        assert_eq!(v["error"]["message"], "bad key sk-…stuv");
        assert_eq!(v["error"]["n"], 3);
        assert_eq!(v["plain"], "openai/gpt-5.2");
        assert_eq!(v["sk-…stuv"][1][0], "x sk-…stuv");

        let mut v = doc();
        Redactor::new([key]).scrub_json(&mut v);
        let shown = v.to_string();
        assert!(!shown.contains("abcdefghij"), "{shown}");
        assert_eq!(v["error"]["message"], "bad key <redacted>");
        assert_eq!(v["<redacted>"][0], "Bearer <redacted>");
        assert_eq!(v["<redacted>"][1][0], "x <redacted>");
        assert_eq!(v["plain"], "openai/gpt-5.2");
        // An empty redactor leaves the value as it is.
        let mut v = doc();
        Redactor::default().scrub_json(&mut v);
        assert_eq!(v, doc());
    }

    // A gateway's redactor is the union of its agents': every secret of
    // each, long or short, is removed, and the count is the sum.
    #[test]
    fn r16_11_extended_redactors_remove_every_secret() {
        assert!(Redactor::default().is_empty());
        assert!(Redactor::new(["", "  "]).is_empty());
        let mut r = Redactor::new(["sk-live-0123456789abcdef"]);
        assert!(!r.is_empty());
        r.extend(Redactor::new(["hunter2", "sk-other-fedcba9876543210"]));
        r.extend(Redactor::new(["hunter2"]));
        assert_eq!(format!("{r:?}"), "Redactor(4 secrets)");
        assert_eq!(
            r.scrub("a sk-live-0123456789abcdef b HUNTER2 c SK-OTHER-FEDCBA9876543210"),
            "a <redacted> b <redacted> c <redacted>"
        );
    }

    // R16.11: a stretch that cuts a multi-byte character takes all of it,
    // before and after, so the output is whole characters (and the text
    // around is kept).
    #[test]
    fn r16_11_scrubbing_keeps_whole_characters() {
        // `é` is C3 A9, `©` is C2 A9: a window starting at A9 matches.
        let r = Redactor::new(["ésk-proj-abcdefghijkl"]);
        assert_eq!(r.scrub("x ©sk-proj-abcdefghijkl y"), "x <redacted> y");
        // `ê` is C3 AA: a window ending at C3 matches.
        let r = Redactor::new(["sk-proj-abcdefghijklé"]);
        assert_eq!(r.scrub("x sk-proj-abcdefghijklê y"), "x <redacted> y");
    }

    // R16.11: escapes beyond ASCII are decoded: `\u20ac`, a surrogate
    // pair as Python's `json.dumps` writes it, C-style `\x..`, hex HTML
    // references, and the JSON escapes of control characters (a PEM key in
    // a service-account file has `\n` in it every 64 characters).
    #[test]
    fn r16_11_secrets_are_found_through_every_escape() {
        // Mostly characters beyond ASCII, so every 12-byte window holds
        // one whole (🚩 is U+1F6A9, `\ud83d\udea9`).
        let key = "€🚩€🚩€🚩€";
        let r = Redactor::new([key]);
        let escaped: String = key.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
        assert!(escaped.contains("\\u20ac") && escaped.contains("\\ud83d\\udea9"));
        for form in [
            escaped,
            key.replace('€', "\\u20AC").replace('🚩', "\\uD83D\\uDEA9"),
        ] {
            let out = r.scrub(&form);
            assert_eq!(out, "<redacted>", "{form}");
        }
        let key = "sk-proj-AbCdEf0123456789";
        let r = Redactor::new([key]);
        let c_style: String = key.bytes().map(|b| format!("\\x{b:02x}")).collect();
        let html_hex: String = key.bytes().map(|b| format!("&#x{b:X};")).collect();
        for form in [c_style, html_hex] {
            assert_eq!(r.scrub(&format!("k={form}.")), "k=<redacted>.", "{form}");
        }
        // A lone low surrogate after an ordinary escape decodes to U+FFFD.
        assert_eq!(
            r.scrub("\\u0073\\udc00 sk-proj-AbCdEf0123456789"),
            "\\u0073\\udc00 <redacted>"
        );
        // Control characters, each between pieces too short to match raw.
        let pem = "line1\nline2\tline3\rline4\u{8}line5\u{c}line6";
        let r = Redactor::new([pem]);
        let json = serde_json::to_string(pem).unwrap();
        assert!(json.contains("\\b") && json.contains("\\f"), "{json}");
        assert_eq!(r.scrub(&json), "\"<redacted>\"");
    }

    // A parser message keeps what it quotes unless it is a value
    // (`string "…"`) or looks like a secret, escaped quotes included.
    #[test]
    fn r16_11_scrub_quoted_cuts_values_and_secrets_only() {
        for kept in [
            r#"duplicate entry with key "order""#,
            r#"keys "a" and "b", then "c"#,
            r#"unclosed "quote"#,
        ] {
            assert_eq!(scrub_quoted(kept), kept);
        }
        assert_eq!(
            scrub_quoted(r#"invalid value: string "abc", expected x"#),
            r#"invalid value: string "…", expected x"#
        );
        assert_eq!(
            scrub_quoted(r#"invalid value: string "a \"b\" \\", expected x"#),
            r#"invalid value: string "…", expected x"#
        );
        assert_eq!(
            scrub_quoted(r#"key "order" then key "sk-live-FAKE-01" at 3"#),
            r#"key "order" then key "…" at 3"#
        );
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b"", false), "");
        assert_eq!(base64(b"f", false), "Zg");
        assert_eq!(base64(b"fo", false), "Zm8");
        assert_eq!(base64(b"foo", false), "Zm9v");
        assert_eq!(base64(b"foobar", false), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff], true), "-_8");
    }
}
