//! The data the command line embeds beside the engine's default rules:
//! the default rules' golden cases and the field corpus, read by `failover
//! test` and the language server. (The library embeds only the rules.)

/// The golden cases of the default ruleset, (path, text).
pub(crate) const DEFAULT_CASES: &[(&str, &str)] = &[
    (
        "rules/10-overrides.cases.yaml",
        include_str!("../../../rules/10-overrides.cases.yaml"),
    ),
    (
        "rules/20-providers/providers.cases.yaml",
        include_str!("../../../rules/20-providers/providers.cases.yaml"),
    ),
    (
        "rules/30-billing.cases.yaml",
        include_str!("../../../rules/30-billing.cases.yaml"),
    ),
    (
        "rules/40-models.cases.yaml",
        include_str!("../../../rules/40-models.cases.yaml"),
    ),
    (
        "rules/45-access.cases.yaml",
        include_str!("../../../rules/45-access.cases.yaml"),
    ),
    (
        "rules/50-codes.cases.yaml",
        include_str!("../../../rules/50-codes.cases.yaml"),
    ),
    (
        "rules/60-messages.cases.yaml",
        include_str!("../../../rules/60-messages.cases.yaml"),
    ),
    (
        "rules/65-languages.cases.yaml",
        include_str!("../../../rules/65-languages.cases.yaml"),
    ),
    (
        "rules/70-generic-codes.cases.yaml",
        include_str!("../../../rules/70-generic-codes.cases.yaml"),
    ),
    (
        "rules/80-status.cases.yaml",
        include_str!("../../../rules/80-status.cases.yaml"),
    ),
    (
        "rules/90-fallbacks.cases.yaml",
        include_str!("../../../rules/90-fallbacks.cases.yaml"),
    ),
    (
        "rules/95-original-vectors.cases.yaml",
        include_str!("../../../rules/95-original-vectors.cases.yaml"),
    ),
];

/// The field corpus the default ruleset is measured on (`tests/field/`,
/// see `failover::field`), (path, text).
pub(crate) const DEFAULT_FIELD: &[(&str, &str)] = &[
    (
        "tests/field/accounts-plans-regions.yaml",
        include_str!("../../../tests/field/accounts-plans-regions.yaml"),
    ),
    (
        "tests/field/anthropic-bedrock-google.yaml",
        include_str!("../../../tests/field/anthropic-bedrock-google.yaml"),
    ),
    (
        "tests/field/china.yaml",
        include_str!("../../../tests/field/china.yaml"),
    ),
    (
        "tests/field/hosted.yaml",
        include_str!("../../../tests/field/hosted.yaml"),
    ),
    (
        "tests/field/languages.yaml",
        include_str!("../../../tests/field/languages.yaml"),
    ),
    (
        "tests/field/local-transport-gateways.yaml",
        include_str!("../../../tests/field/local-transport-gateways.yaml"),
    ),
    (
        "tests/field/openai-azure-openrouter.yaml",
        include_str!("../../../tests/field/openai-azure-openrouter.yaml"),
    ),
    (
        "tests/field/transport-streams.yaml",
        include_str!("../../../tests/field/transport-streams.yaml"),
    ),
    (
        "tests/field/wrappers-relays.yaml",
        include_str!("../../../tests/field/wrappers-relays.yaml"),
    ),
];

/// The held-out set (`tests/holdout`): errors collected after the rules
/// and never trained on; `failover test` measures the rules and the model
/// on it.
pub(crate) const DEFAULT_HOLDOUT: &[(&str, &str)] = &[(
    "tests/holdout/holdout-2026-12-01.yaml",
    include_str!("../../../tests/holdout/holdout-2026-12-01.yaml"),
)];
