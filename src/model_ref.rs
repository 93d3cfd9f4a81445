//! Model references (SPEC R2.1): `provider/model`.
//!
//! The provider is everything before the first `/`; the model is the rest
//! and may itself contain `/` and `:` (`openrouter/meta-llama/llama-3-70b`,
//! `ollama/qwen3.5:27b`). Provider ids are compared case-insensitively, so
//! they are lower-cased once here; model ids keep their case because some
//! providers' model ids are case-sensitive.

use std::fmt;
use std::str::FromStr;

/// A reference longer than this is cut in error messages, so one huge
/// string in a config cannot flood the terminal.
const SHOWN_INPUT_CHARS: usize = 80;

/// A `provider/model` reference, validated and with the provider id
/// lower-cased.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRef {
    text: String,
    slash: usize,
}

/// Why a string is not a model reference. The `Display` text is written
/// for operators (lowercase, input in backticks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelRefError {
    /// Nothing was given.
    Empty,
    /// No `/`: the provider is missing.
    NoProvider(String),
    /// Nothing before the `/`.
    EmptyProvider(String),
    /// Nothing after the `/`.
    EmptyModel(String),
    /// The provider is not a valid provider id.
    BadProvider(String),
    /// The reference holds whitespace.
    Whitespace(String),
}

impl ModelRef {
    /// Parses `provider/model`; surrounding whitespace is ignored.
    pub fn parse(input: &str) -> Result<ModelRef, ModelRefError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ModelRefError::Empty);
        }
        let Some(slash) = s.find('/') else {
            return Err(ModelRefError::NoProvider(s.to_string()));
        };
        let (provider, model) = (&s[..slash], &s[slash + 1..]);
        if provider.is_empty() {
            return Err(ModelRefError::EmptyProvider(s.to_string()));
        }
        if model.is_empty() {
            return Err(ModelRefError::EmptyModel(s.to_string()));
        }
        if !provider
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(ModelRefError::BadProvider(s.to_string()));
        }
        if model.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ModelRefError::Whitespace(s.to_string()));
        }
        let mut text = provider.to_ascii_lowercase();
        text.push('/');
        text.push_str(model);
        Ok(ModelRef { text, slash })
    }

    /// The provider id, lower-cased (`openrouter`).
    pub fn provider(&self) -> &str {
        &self.text[..self.slash]
    }

    /// The model id as the provider knows it (`meta-llama/llama-3-70b`).
    pub fn model(&self) -> &str {
        &self.text[self.slash + 1..]
    }

    /// `provider/model`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModelRef({})", self.text)
    }
}

impl FromStr for ModelRef {
    type Err = ModelRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelRef::parse(s)
    }
}

impl serde::Serialize for ModelRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// `input` for an error message: cut to a readable length.
pub(crate) fn shown(input: &str) -> String {
    if input.chars().count() <= SHOWN_INPUT_CHARS {
        input.to_string()
    } else {
        let cut: String = input.chars().take(SHOWN_INPUT_CHARS).collect();
        format!("{cut}…")
    }
}

impl fmt::Display for ModelRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRefError::Empty => f.write_str("empty model reference: expected `provider/model`"),
            ModelRefError::NoProvider(s) => write!(
                f,
                "`{}` has no provider: write it as `provider/model`",
                shown(s)
            ),
            ModelRefError::EmptyProvider(s) => write!(
                f,
                "`{}` has an empty provider: write it as `provider/model`",
                shown(s)
            ),
            ModelRefError::EmptyModel(s) => {
                write!(f, "`{}` has no model after the provider", shown(s))
            }
            ModelRefError::BadProvider(s) => write!(
                f,
                "`{}` has an invalid provider: provider ids are letters, digits, `-`, `_` and `.`",
                shown(s)
            ),
            ModelRefError::Whitespace(s) => {
                write!(f, "`{}` contains whitespace in the model id", shown(s))
            }
        }
    }
}

impl std::error::Error for ModelRefError {}

#[cfg(test)]
mod tests {
    use super::*;

    // SPEC R2.1: the model part may contain `/` and `:`.
    #[test]
    fn r2_1_model_refs_split_at_the_first_slash() {
        let table = [
            ("anthropic/claude-opus-4-6", "anthropic", "claude-opus-4-6"),
            (
                "openrouter/meta-llama/llama-3-70b",
                "openrouter",
                "meta-llama/llama-3-70b",
            ),
            ("ollama/qwen3.5:27b", "ollama", "qwen3.5:27b"),
            ("  OpenAI/GPT-4o ", "openai", "GPT-4o"),
            ("z.ai/glm-4.6", "z.ai", "glm-4.6"),
        ];
        for (input, provider, model) in table {
            let r = ModelRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!((r.provider(), r.model()), (provider, model), "{input}");
            assert_eq!(r.to_string(), format!("{provider}/{model}"));
        }
    }

    #[test]
    fn r2_1_malformed_refs_are_refused_with_operator_words() {
        let table = [
            ("", "empty model reference: expected `provider/model`"),
            (
                "gpt-4o",
                "`gpt-4o` has no provider: write it as `provider/model`",
            ),
            (
                "/gpt-4o",
                "`/gpt-4o` has an empty provider: write it as `provider/model`",
            ),
            ("openai/", "`openai/` has no model after the provider"),
            (
                "open ai/gpt",
                "`open ai/gpt` has an invalid provider: provider ids are letters, digits, `-`, `_` and `.`",
            ),
            (
                "openai/gpt 4o",
                "`openai/gpt 4o` contains whitespace in the model id",
            ),
        ];
        for (input, message) in table {
            let e = ModelRef::parse(input).expect_err(input);
            assert_eq!(e.to_string(), message, "{input:?}");
        }
    }

    #[test]
    fn long_inputs_are_cut_in_messages() {
        let long = "x".repeat(500);
        let msg = ModelRef::parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains('…'));
    }
}
