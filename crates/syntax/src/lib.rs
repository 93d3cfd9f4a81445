//! failover-syntax: the text of failover's `.rules` files, and the
//! diagnostics every reader of operator files shares.
//!
//! What the engine ([`failover`](https://docs.rs/failover)), the formatter
//! and the language server have in common, below all of them:
//!
//! - [`source`]: files, spans, line and column;
//! - [`diag`]: a [`Diagnostic`](diag::Diagnostic) with a stable
//!   [`Code`](diag::Code), labelled spans and help, rendered rustc-style or
//!   as JSON — every problem in every operator file (rules, golden cases,
//!   the gateway config) is one;
//! - [`rules`]: the pest grammar (`grammar/rules.pest`) lowered to a typed,
//!   spanned AST ([`rules::ast`]), and the canonical layout
//!   ([`rules::fmt`]);
//! - [`redact`]: what looks like a secret and how it is masked (SPEC
//!   R16.11): every printed text passes through it;
//! - [`fsio`]: bounded reads of the files an operator names.
//!
//! ```
//! let (_sources, file, problems) =
//!     failover_syntax::rules::parse_str("ops.rules", "rule a.b when status == 402 => billing");
//! assert!(problems.is_empty());
//! assert_eq!(file.decls.len(), 1);
//! ```

#![deny(missing_docs)]

// Leaves first, then what is built on them.
pub mod fsio;
pub mod redact;
pub mod source;
pub mod diag;
pub mod rules;
