//! Secrets that cannot leak by accident (SPEC R16.11).
//!
//! An API key, an OAuth access or refresh token, a bearer token: each is held
//! in a [`Secret`], which has no `Display`, prints `Secret(<redacted>)` under
//! `{:?}`, and gives its text only through [`Secret::expose`], a word that is
//! easy to grep for in review. Operators still need to tell two keys apart,
//! so [`Secret::masked`] shows the first three and last four characters of a
//! long secret and nothing of a short one:
//!
//! ```
//! use failover::state::Secret;
//! let key = Secret::new("sk-test-0123456789abcd");
//! assert_eq!(key.masked(), "sk-…abcd");
//! assert_eq!(format!("{key:?}"), "Secret(<redacted>)");
//! assert_eq!(Secret::new("short").masked(), "…");
//! ```

use std::fmt;

/// A credential string. See the module documentation.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential string.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The secret text, for the one place that sends it to a provider.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty or only spaces (an unusable credential).
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }

    /// `sk-…abcd` for a long secret, `…` for a short one. The ends shown
    /// are the secret's, with control characters as `?`: a pasted key that
    /// ends in a newline or a terminal escape must not move the cursor of
    /// whoever reads `status`.
    pub fn masked(&self) -> String {
        crate::redact::mask(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // R16.11: neither Debug nor the mask contains the secret.
    #[test]
    fn r16_11_debug_and_mask_hide_the_secret() {
        let s = Secret::new("sk-live-SECRETSECRETSECRET-wxyz");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        let dbg = format!("{s:?} {:#?}", Some(&s));
        assert!(!dbg.contains("SECRET"));
        assert_eq!(s.masked(), "sk-…wxyz");
        assert!(!s.masked().contains("SECRET"));
    }

    #[test]
    fn control_characters_are_not_shown() {
        let s = Secret::new("sk-live-SECRETSECRETSECRET\u{1b}[2J\n");
        assert_eq!(s.masked(), "sk-…[2J?");
        let s = Secret::new("\t\u{7}xSECRETSECRETSECRET-wxyz");
        assert_eq!(s.masked(), "??x…wxyz");
    }

    #[test]
    fn masks_by_characters_not_bytes() {
        let s = Secret::new("ключ-ключ-ключ-ключ");
        assert_eq!(s.masked(), "клю…ключ");
    }
}
