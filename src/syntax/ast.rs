//! The typed, spanned syntax tree of a rules file.
//!
//! This is what the parser hands to the compiler: strings are decoded, lists
//! are flattened, operators are named; every node keeps its [`Span`]. Pest
//! types never leave the `syntax` module.

use crate::source::{FileId, Span};

/// A value with the place it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub node: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(node: T, span: Span) -> Self {
        Spanned { node, span }
    }
}

/// One parsed rules file.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleFile {
    pub file: FileId,
    pub decls: Vec<Decl>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    Reason(ReasonDecl),
    Rule(RuleDecl),
    Provider(ProviderBlock),
    Selection(SelectionDecl),
}

/// `reason NAME { clause; … }`
#[derive(Clone, Debug, PartialEq)]
pub struct ReasonDecl {
    pub name: Spanned<String>,
    pub behaviours: Vec<Behaviour>,
    pub span: Span,
}

/// One clause of a reason declaration: `disable billing`.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    pub word: Spanned<String>,
    pub arg: Option<Spanned<String>>,
    pub span: Span,
}

/// `rule ID when CONDITION => REASON`
#[derive(Clone, Debug, PartialEq)]
pub struct RuleDecl {
    pub id: Spanned<String>,
    pub condition: Condition,
    pub reason: Spanned<String>,
    pub span: Span,
}

/// `provider NAMES { rules }`
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderBlock {
    pub providers: Vec<Spanned<String>>,
    pub rules: Vec<RuleDecl>,
    pub span: Span,
}

/// `selection SOURCE => TARGET [else TARGET]`
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionDecl {
    pub source: Spanned<String>,
    pub target: Spanned<SelectionTarget>,
    pub otherwise: Option<Spanned<SelectionTarget>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SelectionTarget {
    Strict,
    /// `fallbacks LIST`, with the list's name as written.
    Fallbacks(Spanned<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub kind: CondKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CondKind {
    Or(Vec<Condition>),
    And(Vec<Condition>),
    Not(Box<Condition>),
    Predicate(Predicate),
}

/// `FIELD OPERATOR [OPERAND]`
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    pub field: Spanned<Field>,
    pub op: Spanned<Op>,
    pub operand: Option<Spanned<Operand>>,
}

/// What a predicate looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The error message text (see the README: message, extracted body
    /// message, or raw body).
    Message,
    /// The HTTP status, explicit or parsed from a leading `HTTP 429:`.
    Status,
    Provider,
    Model,
    /// Error code (`RESOURCE_EXHAUSTED`, `ETIMEDOUT`, `1311`).
    Code,
    /// Error type (`overloaded_error`, `ThrottlingException`).
    Type,
    /// The raw body text (`body`) or a field of the JSON body
    /// (`body.error.code`): the path segments.
    Body(Vec<String>),
}

impl Field {
    /// The name an operator writes, for messages.
    pub fn display(&self) -> String {
        match self {
            Field::Message => "message".into(),
            Field::Status => "status".into(),
            Field::Provider => "provider".into(),
            Field::Model => "model".into(),
            Field::Code => "code".into(),
            Field::Type => "type".into(),
            Field::Body(path) if path.is_empty() => "body".into(),
            Field::Body(path) => format!("body.{}", path.join(".")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Eq,
    Ne,
    In,
    Has,
    HasAny,
    HasAll,
    StartsWith,
    EndsWith,
    Matches,
    IsEmpty,
}

impl Op {
    pub fn display(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::In => "in",
            Op::Has => "has",
            Op::HasAny => "has any",
            Op::HasAll => "has all",
            Op::StartsWith => "starts with",
            Op::EndsWith => "ends with",
            Op::Matches => "matches",
            Op::IsEmpty => "is empty",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Str(String),
    /// A number as written; values beyond `u64` saturate (and are then
    /// reported as out of range by the compiler).
    Int(u64),
    Range(u64, u64),
    List(Vec<Spanned<ListItem>>),
    Regex {
        pattern: String,
        flags: Spanned<String>,
    },
}

impl Operand {
    /// The kind of value, for type-mismatch messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Operand::Str(_) => "a string",
            Operand::Int(_) => "a number",
            Operand::Range(..) => "a range",
            Operand::List(_) => "a list",
            Operand::Regex { .. } => "a regex",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ListItem {
    Str(String),
    Int(u64),
    Range(u64, u64),
}
