//! The typed, spanned syntax tree of a rules file.
//!
//! This is what the parser hands to the compiler: strings are decoded, lists
//! are flattened, operators are named; every node keeps its [`Span`]. Pest
//! types never leave the `syntax` module.

use crate::source::{FileId, Span};

/// A value with the place it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    /// The value.
    pub node: T,
    /// Where it was written.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// `node`, written at `span`.
    pub fn new(node: T, span: Span) -> Self {
        Spanned { node, span }
    }
}

/// One parsed rules file.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleFile {
    /// The file it was parsed from.
    pub file: FileId,
    /// Its declarations, in file order.
    pub decls: Vec<Decl>,
}

/// One top-level declaration.
#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    /// `reason NAME { … }`
    Reason(ReasonDecl),
    /// `rule ID when … => REASON`
    Rule(RuleDecl),
    /// `provider NAMES { rules }`
    Provider(ProviderBlock),
    /// `selection SOURCE => TARGET`
    Selection(SelectionDecl),
}

/// `reason NAME { clause; … }`
#[derive(Clone, Debug, PartialEq)]
pub struct ReasonDecl {
    /// The reason's name.
    pub name: Spanned<String>,
    /// Its clauses, in order.
    pub behaviours: Vec<Behaviour>,
    /// The whole declaration.
    pub span: Span,
}

/// One clause of a reason declaration: `disable billing`.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    /// The clause's word (`disable`).
    pub word: Spanned<String>,
    /// Its argument (`billing`), when it takes one.
    pub arg: Option<Spanned<String>>,
    /// The whole clause.
    pub span: Span,
}

/// `[weak] rule ID when CONDITION => REASON`
#[derive(Clone, Debug, PartialEq)]
pub struct RuleDecl {
    /// The rule's id, as written (inside a provider block, without the
    /// block's prefix).
    pub id: Spanned<String>,
    /// Written `weak rule …`: a default the evidence model may overrule.
    pub weak: bool,
    /// What must hold.
    pub condition: Condition,
    /// The reason it gives.
    pub reason: Spanned<String>,
    /// The whole rule.
    pub span: Span,
}

/// `provider NAMES { rules }`
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderBlock {
    /// The providers the block's rules are scoped to.
    pub providers: Vec<Spanned<String>>,
    /// Its rules, in order.
    pub rules: Vec<RuleDecl>,
    /// The whole block.
    pub span: Span,
}

/// `selection SOURCE => TARGET [else TARGET]`
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionDecl {
    /// The selection source (`agent_primary`).
    pub source: Spanned<String>,
    /// What it may walk.
    pub target: Spanned<SelectionTarget>,
    /// `else TARGET`: when the target's list is absent.
    pub otherwise: Option<Spanned<SelectionTarget>>,
    /// The whole declaration.
    pub span: Span,
}

/// What a selection may walk.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectionTarget {
    /// `strict`: the selected model only.
    Strict,
    /// `fallbacks LIST`, with the list's name as written.
    Fallbacks(Spanned<String>),
}

/// A rule's condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// Its shape.
    pub kind: CondKind,
    /// Where it was written.
    pub span: Span,
}

/// The shape of a condition.
#[derive(Clone, Debug, PartialEq)]
pub enum CondKind {
    /// `a or b or …`
    Or(Vec<Condition>),
    /// `a and b and …`
    And(Vec<Condition>),
    /// `not a`
    Not(Box<Condition>),
    /// One test of one field.
    Predicate(Predicate),
}

/// `FIELD OPERATOR [OPERAND]`
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    /// What is tested.
    pub field: Spanned<Field>,
    /// How.
    pub op: Spanned<Op>,
    /// Against what (`is empty` takes none).
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
    /// The provider id.
    Provider,
    /// The model id.
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

/// A predicate's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `in [list]`
    In,
    /// `has "text"`
    Has,
    /// `has any [list]`
    HasAny,
    /// `has all [list]`
    HasAll,
    /// `starts with "text"`
    StartsWith,
    /// `ends with "text"`
    EndsWith,
    /// `matches /regex/flags`
    Matches,
    /// `is empty`
    IsEmpty,
}

impl Op {
    /// The operator as an operator writes it.
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

/// A predicate's operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A string, decoded.
    Str(String),
    /// A number as written; values beyond `u64` saturate (and are then
    /// reported as out of range by the compiler).
    Int(u64),
    /// `500..504`, both ends included.
    Range(u64, u64),
    /// `[a, b, …]`
    List(Vec<Spanned<ListItem>>),
    /// `/pattern/flags`
    Regex {
        /// The pattern as written between the slashes.
        pattern: String,
        /// The flags after the closing slash.
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

/// An item of a list operand.
#[derive(Clone, Debug, PartialEq)]
pub enum ListItem {
    /// A string, decoded.
    Str(String),
    /// A number.
    Int(u64),
    /// `500..504`, both ends included.
    Range(u64, u64),
}
