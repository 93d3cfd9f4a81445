//! The walk itself: [`Runner::run`]. The module essay in `mod.rs` explains
//! the steps; comments here say why a step is the way it is.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use crate::auth::{
    apply_pin_change, choose_session_profile, disabled_probe_allowed, order_profiles,
    probe_uses_transient_slot, probe_window_open, record_failure, record_success, Block, Failure,
    FailureEffect, PinChange, ProfileOrder, PROBE_THROTTLE_MS,
};
use crate::compile::reasons::{ReasonId, RotationBudget, UNCLASSIFIED};
use crate::compile::ReasonBehaviour;
use crate::policy::{build_chain, ChainRequest, ModelRef, OverrideKind};
use crate::policy::{CandidateChain, SelectionSource, SessionOverride};
use crate::redact::Redactor;
use crate::store::{
    edit_profile, edit_session, AsyncStore, AuthProfiles, AuthState, Credential, OverrideFields,
    OverrideSource, SessionEntry, StoreError,
};

use super::types::*;
use super::{clear_model_override, clear_notice, notice_reason, RunRequest, Runner};
use super::{DETAIL_CHARS, REPROBE_INTERVAL_MS};

/// What one run works with once its chain is built (steps 1–2).
struct Turn<'r> {
    request: &'r RunRequest,
    key: &'r str,
    store: &'r dyn AsyncStore,
    profiles: AuthProfiles,
    /// Every stored secret, scrubbed from what the run records (R16.11).
    secrets: Arc<Redactor>,
    entry: SessionEntry,
    chain: CandidateChain,
    /// The selection the run falls back from (the fallback's origin).
    selected: ModelRef,
    /// The chain is the user's choice: no fallback override is written.
    user_owned: bool,
}

/// The candidate the walk is at.
struct Candidate {
    index: usize,
    model: ModelRef,
    /// The next candidate, as the decisions name it.
    next: Option<String>,
    is_primary: bool,
    is_last: bool,
}

impl Candidate {
    fn at(chain: &CandidateChain, i: usize) -> Self {
        let n = chain.candidates.len();
        Candidate {
            index: i,
            model: chain.candidates[i].model.clone(),
            next: chain.candidates.get(i + 1).map(|c| c.model.to_string()),
            is_primary: i == 0,
            is_last: i + 1 == n,
        }
    }

    fn provider(&self) -> &str {
        self.model.provider()
    }

    fn model_name(&self) -> &str {
        self.model.model()
    }

    /// The step's outcome when the walk leaves this candidate.
    fn moving_on(&self) -> StepOutcome {
        if self.next.is_some() {
            StepOutcome::NextFallback
        } else {
            StepOutcome::ChainExhausted
        }
    }
}

/// What to do with one candidate before any attempt.
enum Plan {
    Skip { why: String, reason: Option<String> },
    Try(Tries),
}

/// The profiles a candidate is tried with, in order.
struct Tries {
    profiles: Vec<Option<String>>,
    probe: bool,
    /// The probe used the provider's transient slot (R10.5).
    slot: bool,
    strict: bool,
    pin: PinChange,
}

/// One attempt of a [`Tries`], as its error is judged.
struct ThisTry<'a> {
    profile_id: &'a Option<String>,
    tries: &'a Tries,
    /// Another profile of the candidate is left to rotate to.
    more_profiles: bool,
    /// Rotations spent so far on the candidate, by budget (R8.5).
    used: &'a HashMap<RotationBudget, u32>,
}

/// A classified provider error: the reason by id (its name and behaviour
/// borrowed from the engine) and the error's text, scrubbed.
struct Verdict<'e> {
    reason: ReasonId,
    name: &'e str,
    behaviour: &'e ReasonBehaviour,
    text: String,
    /// Which step of the precedence gave the reason.
    decided_by: &'static str,
    /// The model's probability, when it decided.
    probability: Option<f32>,
    /// What happened on the wire, by name.
    cause: Option<&'static str>,
}

/// Where the walk goes after an attempt's error.
enum AfterError {
    /// The candidate's next profile, spending this budget (R8.5).
    Rotate(Option<RotationBudget>),
    /// The next candidate.
    Leave,
    /// Straight to the candidate at this index (R11.6).
    Jump(usize),
}

/// How the attempts on one candidate ended. (Returned once per candidate;
/// boxing the answer would cost every run an allocation.)
#[allow(clippy::large_enum_variant)]
enum Reached<T> {
    Answer(RunOutput<T>),
    Next,
    Jump(usize),
}

/// Rolls back the override fields a fallback attempt wrote (R11.4) when
/// dropped armed: on failure, and when the run's future is dropped in the
/// middle of the attempt (cancel safety).
struct OverrideGuard<'a> {
    store: &'a dyn AsyncStore,
    session: &'a str,
    written: OverrideFields,
    before: OverrideFields,
    armed: bool,
}

impl OverrideGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }

    /// Rolls back now (the attempt failed or was skipped), awaiting the
    /// store; a store error is ignored as the `Drop` path ignores it.
    async fn release(mut self) {
        self.armed = false;
        let (written, before) = (self.written.clone(), self.before.clone());
        let _ = self
            .store
            .update_session(self.session, &mut |e| rollback_entry(&written, &before, e))
            .await;
    }
}

impl Drop for OverrideGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The run's future was dropped mid-attempt: nothing can be awaited
        // here, so the store applies the roll-back at once.
        let (written, before) = (self.written.clone(), self.before.clone());
        let _ = self.store.update_session_now(
            self.session,
            Box::new(move |e| rollback_entry(&written, &before, e)),
        );
    }
}

/// R11.4: the narrow roll-back of the override fields a fallback wrote.
fn rollback_entry(written: &OverrideFields, before: &OverrideFields, e: &mut SessionEntry) {
    // The model fields and the profile fields are each one choice:
    // when another writer changed any field of a group (a user's
    // `/model` sets provider and model together), the whole group
    // is theirs now, even the fields that happen to equal ours.
    let mut before = before.clone();
    let model_ours = e.provider_override == written.provider_override
        && e.model_override == written.model_override
        && e.model_override_source == written.model_override_source;
    if !model_ours {
        before.provider_override = e.provider_override.clone();
        before.model_override = e.model_override.clone();
        before.model_override_source = e.model_override_source.clone();
        before.model_override_fallback_origin_provider =
            e.model_override_fallback_origin_provider.clone();
        before.model_override_fallback_origin_model =
            e.model_override_fallback_origin_model.clone();
    }
    let auth_ours = e.auth_profile_override == written.auth_profile_override
        && e.auth_profile_override_source == written.auth_profile_override_source;
    if !auth_ours {
        before.auth_profile_override = e.auth_profile_override.clone();
        before.auth_profile_override_source = e.auth_profile_override_source.clone();
        before.auth_profile_override_compaction_count = e.auth_profile_override_compaction_count;
    }
    written.rollback(&before, e);
}

/// The state of one walk down the chain.
#[derive(Default)]
struct Walk {
    /// `fallbackStepType` of the run's decisions.
    step: &'static str,
    /// The client key's name ([`RunRequest::client`]).
    client: Option<String>,
    attempts: Vec<AttemptRecord>,
    decisions: Vec<Decision>,
    /// Providers a `skip provider` reason ruled out, with the reason.
    skip_providers: HashMap<String, ReasonId>,
    /// Providers whose one transient cooldown probe was used (R10.5).
    probe_slots: HashSet<String>,
    /// The last real provider error, for R16.8 and single-attempt runs.
    last: Option<Box<SurfacedError>>,
}

impl Walk {
    fn decide(&mut self, d: Decision) {
        emit(&d, self.step, self.client.as_deref());
        self.decisions.push(d);
    }

    /// A candidate left out before any attempt: its record and decision.
    fn skipped(&mut self, cand: &Candidate, reason: Option<String>, why: String, now: u64) {
        self.attempts.push(AttemptRecord {
            provider: cand.provider().into(),
            model: cand.model_name().into(),
            profile_id: None,
            outcome: AttemptOutcome::Skipped,
            reason: reason.clone(),
            rule: None,
            decided_by: None,
            probability: None,
            status: None,
            code: None,
            error: Some(why.clone()),
            probe: false,
            at_ms: now,
            cause: None,
        });
        self.decide(Decision {
            decision: DecisionKind::SkipCandidate,
            from_model: cand.model.to_string(),
            to_model: cand.next.clone(),
            reason,
            detail: Some(why),
            position: cand.index + 1,
            outcome: cand.moving_on(),
            classified_by: None,
            probability: None,
            cause: None,
        });
    }
}

/// R11.6: the attempt asked to switch the live session to another model:
/// jump to it when it is a later candidate; otherwise the attempt is a
/// failure (`unclassified`, REFERENCE f), even on the last candidate, so
/// the walk cannot spin.
fn live_switch(
    turn: &Turn<'_>,
    cand: &Candidate,
    provider: &str,
    model: &str,
    mut record: AttemptRecord,
    walk: &mut Walk,
) -> AfterError {
    let i = cand.index;
    let target = ModelRef::parse(&format!("{provider}/{model}")).ok();
    let later = target.as_ref().and_then(|t| {
        turn.chain.candidates[i + 1..]
            .iter()
            .position(|c| c.model == *t)
            .map(|d| i + 1 + d)
    });
    let text = format!(
        "live session model switch to {}",
        target
            .as_ref()
            .map_or(format!("{provider}/{model}"), |t| t.to_string())
    );
    if let Some(j) = later {
        record.outcome = AttemptOutcome::Switched;
        record.error = Some(text.clone());
        walk.attempts.push(record);
        walk.decide(Decision {
            decision: DecisionKind::LiveSwitch,
            from_model: cand.model.to_string(),
            to_model: Some(turn.chain.candidates[j].model.to_string()),
            reason: None,
            detail: Some(text),
            position: i + 1,
            outcome: StepOutcome::NextFallback,
            classified_by: None,
            probability: None,
            cause: None,
        });
        return AfterError::Jump(j);
    }
    record.outcome = AttemptOutcome::Failed;
    record.reason = Some(UNCLASSIFIED.into());
    record.error = Some(text.clone());
    walk.attempts.push(record);
    walk.last = None;
    walk.decide(Decision {
        decision: DecisionKind::CandidateFailed,
        from_model: cand.model.to_string(),
        to_model: cand.next.clone(),
        reason: Some(UNCLASSIFIED.into()),
        detail: Some(text),
        position: i + 1,
        outcome: cand.moving_on(),
        classified_by: None,
        probability: None,
        cause: None,
    });
    AfterError::Leave
}

/// The `model_fallback_decision` event with the flat step fields (R14.2).
fn emit(d: &Decision, step: &str, client: Option<&str>) {
    macro_rules! event {
        ($lvl:ident) => {
            tracing::$lvl!(
                target: "failover::run",
                decision = d.decision.name(),
                fallbackStepType = if step.is_empty() { "fallback_step" } else { step },
                fallbackStepFromModel = %d.from_model,
                fallbackStepToModel = d.to_model.as_deref().unwrap_or(""),
                fallbackStepFromFailureReason = d.reason.as_deref().unwrap_or(""),
                fallbackStepFromFailureCause = d.cause.unwrap_or(""),
                fallbackStepFromFailureDetail = d.detail.as_deref().unwrap_or(""),
                fallbackStepChainPosition = d.position,
                fallbackStepFinalOutcome = d.outcome.name(),
                fallbackStepClassifiedBy = d.classified_by.unwrap_or(""),
                fallbackStepModelProbability = d.probability.map_or(String::new(), |p| format!("{p:.3}")),
                client,
                "model_fallback_decision"
            )
        };
    }
    if d.outcome == StepOutcome::ChainExhausted {
        event!(warn)
    } else {
        event!(info)
    }
}

/// Every secret of the stored profiles, for scrubbing (R16.11).
pub(super) fn secrets_of(profiles: &AuthProfiles) -> Vec<String> {
    let mut out = Vec::new();
    for p in profiles.profiles.values() {
        let list = match &p.credential {
            Credential::ApiKey { key, .. } => vec![key.as_ref()],
            Credential::OAuth {
                access, refresh, ..
            } => vec![access.as_ref(), refresh.as_ref()],
            Credential::Token { token, .. } => vec![token.as_ref()],
            // The access key id is not a secret (it names the key).
            Credential::Aws {
                secret_access_key,
                session_token,
                ..
            } => vec![secret_access_key.as_ref(), session_token.as_ref()],
        };
        for s in list.into_iter().flatten() {
            // Very short "secrets" would scrub ordinary words; they are not
            // credentials anyone can use anyway.
            if s.expose().trim().len() >= 6 {
                out.push(s.expose().trim().to_string());
            }
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// A provider's error text without any stored secret, in any form a
/// reader could decode (see [`Redactor`]).
fn scrub(text: &str, secrets: &Redactor) -> String {
    secrets.scrub(text).into_owned()
}

fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(n).collect();
        s.push('…');
        s
    }
}

/// The session's model override as a chain selection (SPEC R3 rows).
fn session_override(e: &SessionEntry) -> Option<SessionOverride> {
    let model = e.model_override.as_deref()?;
    let model = match e.provider_override.as_deref() {
        Some(p) => ModelRef::parse(&format!("{p}/{model}")).ok()?,
        None => ModelRef::parse(model).ok()?,
    };
    let source = match e.model_override_source() {
        Some(OverrideSource::Auto) => OverrideKind::Auto,
        _ if e.model_override_source.is_none() => OverrideKind::Legacy,
        _ => OverrideKind::User,
    };
    Some(SessionOverride { model, source })
}

fn origin(e: &SessionEntry) -> Option<ModelRef> {
    let p = e.model_override_fallback_origin_provider.as_deref()?;
    let m = e.model_override_fallback_origin_model.as_deref()?;
    ModelRef::parse(&format!("{p}/{m}")).ok()
}

/// Reasons whose failures mean the credential is bad (R12: `auth`,
/// `auth_permanent`), told by behaviour: a profile penalty that a probe
/// does not learn from, or a provider-wide skip.
fn auth_class(b: &ReasonBehaviour) -> bool {
    b.skip_provider || (b.probe_free && (b.cooldown || b.disable.is_some()))
}

impl Runner {
    /// The redactor of `secrets`: the one built for the previous run while
    /// the profiles' secrets are the same, a new one when they changed.
    fn redactor_of(&self, secrets: Vec<String>) -> Arc<Redactor> {
        let mut last = self.redactor.lock().unwrap_or_else(|e| e.into_inner());
        if last.0 != secrets {
            let r = Arc::new(Redactor::new(&secrets));
            *last = (secrets, r);
        }
        last.1.clone()
    }

    fn reason_name(&self, id: ReasonId) -> &str {
        &self.engine.ruleset().reason(id).name
    }

    fn behaviour_of(&self, reason: Option<&str>) -> ReasonBehaviour {
        let rs = self.engine.ruleset();
        reason
            .and_then(|r| rs.reason_id(r))
            .or_else(|| rs.reason_id(UNCLASSIFIED))
            .map(|id| rs.reason(id).behaviour.clone())
            .unwrap_or_default()
    }

    /// R11.5: is `primary` due for its re-probe in `session`? Records the
    /// probe when it is. A clock that cannot be written is not due (the
    /// session stays on its fallback).
    async fn take_reprobe(&self, session: &str, primary: &ModelRef, now: u64) -> bool {
        if let Some(t) = self.store.shared_tables() {
            let r = t
                .take_reprobe(session, &primary.to_string(), now, REPROBE_INTERVAL_MS)
                .await;
            return self.health.absorb("take a re-probe", r).unwrap_or(false);
        }
        let mut sh = self.shared();
        let key = (session.to_string(), primary.to_string());
        match sh.reprobe.get(&key) {
            Some(t) if now.saturating_sub(t) < REPROBE_INTERVAL_MS => false,
            _ => {
                sh.reprobe.note(key, now);
                true
            }
        }
    }

    /// Starts the session's re-probe clock for `primary` (R11.5).
    async fn start_reprobe_clock(&self, session: &str, primary: &ModelRef, now: u64) {
        if let Some(t) = self.store.shared_tables() {
            let r = t.note_reprobe(session, &primary.to_string(), now).await;
            self.health.absorb("start a re-probe clock", r);
            return;
        }
        self.shared()
            .reprobe
            .note((session.to_string(), primary.to_string()), now);
    }

    async fn skip_cached(
        &self,
        session: &str,
        p: &str,
        m: &str,
        now: u64,
    ) -> Result<Option<String>, StoreError> {
        if self.skip_ttl_ms.is_none() {
            return Ok(None);
        }
        if let Some(t) = self.store.shared_tables() {
            return t.skip_get(session, p, m, now).await;
        }
        let key = (session.to_string(), p.to_string(), m.to_string());
        Ok(self.shared().skip.get(&key, now))
    }

    async fn mark_skip(&self, session: &str, p: &str, m: &str, reason: &str, now: u64) {
        let Some(ttl) = self.skip_ttl_ms else {
            return;
        };
        if let Some(t) = self.store.shared_tables() {
            let r = t
                .skip_put(session, p, m, reason, now.saturating_add(ttl))
                .await;
            self.health.absorb("mark a skip", r);
            return;
        }
        let key = (session.to_string(), p.to_string(), m.to_string());
        self.shared()
            .skip
            .put(key, now.saturating_add(ttl), reason, now);
    }

    /// The probe throttle (R16.1), shared by the backend when it can be.
    /// A throttle that cannot be written allows no probe.
    async fn try_probe(&self, p: &str, now: u64) -> bool {
        if let Some(t) = self.store.shared_tables() {
            let r = t
                .try_probe(&crate::store::normalize_provider(p), now, PROBE_THROTTLE_MS)
                .await;
            return self.health.absorb("take a probe slot", r).unwrap_or(false);
        }
        let agent = self.store.agent_id().to_string();
        self.shared().throttle.try_acquire(&agent, p, now)
    }

    /// [`record_failure`] as one atomic update of the profile's record;
    /// `None` when it could not be written (noted in the state's health:
    /// the run goes on, degraded).
    pub(crate) async fn mark_failure(
        &self,
        profile_id: &str,
        provider: &str,
        failure: &Failure<'_>,
        now: u64,
    ) -> Option<FailureEffect> {
        let policy = &self.policy;
        let r = edit_profile(self.store.as_ref(), profile_id, provider, |s| {
            record_failure(s, profile_id, provider, failure, policy, now)
        })
        .await;
        self.health.absorb("record a failure", r)
    }

    /// R16.5: whether a failure of behaviour `b` outranks a recorded
    /// reason, so that a window kept records it instead: told by
    /// behaviour, a provider-wide skip (`auth`) outranks the rest, then a
    /// failure that is not transient; a recorded name the rules do not
    /// declare is outranked.
    pub(crate) fn outranks<'s>(&'s self, b: &ReasonBehaviour) -> impl Fn(&str) -> bool + Sync + 's {
        let rank = |b: &ReasonBehaviour| match (b.skip_provider, b.transient) {
            (true, _) => 2,
            (false, false) => 1,
            (false, true) => 0,
        };
        let mine = rank(b);
        let rs = self.engine.ruleset();
        move |recorded: &str| {
            rs.reason_id(recorded)
                .is_none_or(|id| mine > rank(&rs.reason(id).behaviour))
        }
    }

    /// R10, R16.1–R16.3: every profile of `order` is blocked for the model.
    async fn cooldown_plan(
        &self,
        order: &ProfileOrder,
        pinned: Option<&str>,
        is_primary: bool,
        only_candidate: bool,
        walk: &mut Walk,
        now: u64,
    ) -> Result<Plan, StoreError> {
        let p = order.provider.as_str();
        let blocks: Vec<&Block> = order
            .entries
            .iter()
            .filter_map(|e| e.block.as_ref())
            .collect();
        let soonest = order.soonest_expiry();
        let probe_id = pinned
            .filter(|id| order.position(id).is_some())
            .or_else(|| order.entries.first().map(|e| e.id.as_str()))
            .map(str::to_string);
        let probe = |slot: bool| {
            Plan::Try(Tries {
                profiles: vec![probe_id.clone()],
                probe: true,
                slot,
                strict: true,
                pin: PinChange::Keep,
            })
        };
        // R10.1: a `skip provider` block rules out every model of it.
        let rs = self.engine.ruleset();
        if let Some((r, id)) = blocks
            .iter()
            .filter_map(|b| b.reason())
            .filter_map(|r| Some((r, rs.reason_id(r)?)))
            .find(|&(_, id)| rs.reason(id).behaviour.skip_provider)
        {
            walk.skip_providers.insert(p.to_string(), id);
            return Ok(Plan::Skip {
                why: format!("Provider {p} has {r} issue (skipping all models)"),
                reason: Some(r.to_string()),
            });
        }
        // D4: a block with no reason recorded or counted is `unclassified`
        // in the attempt, as the original records `unknown`.
        let reason_of = |b: Option<&&Block>| {
            Some(
                b.and_then(|b| b.reason())
                    .unwrap_or(crate::compile::reasons::UNCLASSIFIED)
                    .to_string(),
            )
        };
        // R10.2, R16.2: disabled (billing) — only the primary, only alone or
        // near expiry, throttled.
        if blocks.iter().all(|b| matches!(b, Block::Disabled { .. })) {
            let r = reason_of(blocks.first());
            if is_primary
                && disabled_probe_allowed(only_candidate, soonest, now)
                && self.try_probe(p, now).await
            {
                return Ok(probe(false));
            }
            return Ok(Plan::Skip {
                why: format!(
                    "Provider {p} is disabled ({})",
                    r.as_deref().unwrap_or("unknown")
                ),
                reason: r,
            });
        }
        // The soonest block stands for the provider (blocked entries are
        // sorted soonest first).
        let r = reason_of(blocks.first());
        let cooling = format!("Provider {p} is in cooldown (all profiles unavailable)");
        if is_primary {
            // R10.3, R16.1.
            if probe_window_open(soonest, now) && self.try_probe(p, now).await {
                return Ok(probe(false));
            }
            return Ok(Plan::Skip {
                why: cooling,
                reason: r,
            });
        }
        // R10.4, R10.5: transient blocks let a sibling probe once per run.
        if self.behaviour_of(r.as_deref()).transient {
            if walk.probe_slots.insert(p.to_string()) {
                return Ok(probe(true));
            }
            return Ok(Plan::Skip {
                why: format!("Provider {p} is in cooldown (probe already attempted this run)"),
                reason: r,
            });
        }
        Ok(Plan::Skip {
            why: cooling,
            reason: r,
        })
    }

    /// R14.4: the soonest moment a candidate of `chain` is usable again.
    /// Per candidate, cooldowns scoped to other models are ignored; a block
    /// made only of cooldowns scoped to this model reports its latest
    /// expiry (every matching profile must recover before the model is
    /// usable on the one the rotation would reach), others the soonest.
    async fn soonest_for_chain(
        &self,
        chain: &CandidateChain,
        profiles: &AuthProfiles,
    ) -> Option<u64> {
        let now = self.now_ms();
        let state = self.store.load_state().await.ok()?;
        let mut best: Option<u64> = None;
        for c in &chain.candidates {
            let (p, m) = (c.model.provider(), c.model.model());
            let order = order_profiles(&self.routing, profiles, &state, p, Some(m), now);
            if order.entries.is_empty() || order.entries.iter().any(|e| e.block.is_none()) {
                continue;
            }
            let blocks: Vec<&Block> = order
                .entries
                .iter()
                .filter_map(|e| e.block.as_ref())
                .collect();
            let scoped_here = blocks
                .iter()
                .all(|b| matches!(b, Block::Cooling { model: Some(x), .. } if x == m));
            let t = if scoped_here {
                blocks.iter().map(|b| b.until()).max()
            } else {
                blocks.iter().map(|b| b.until()).min()
            };
            if let Some(t) = t {
                best = Some(best.map_or(t, |b| b.min(t)));
            }
        }
        best
    }

    /// Runs one turn of `request`, calling `attempt` for every model call.
    /// See the module documentation.
    ///
    /// The run is a `tracing` span `failover_run` and each call of
    /// `attempt` a span `failover_attempt` inside it, both under the target
    /// [`TRACING_TARGET`](crate::TRACING_TARGET); the fields are listed in
    /// `docs/tracing.md`.
    pub async fn run<T, F, Fut>(
        &self,
        request: &RunRequest,
        attempt: F,
    ) -> Result<RunOutput<T>, RunError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let span = tracing::info_span!(
            target: "failover::run",
            "failover_run",
            agent = request.agent.as_deref().unwrap_or(self.store.agent_id()),
            session = %super::session_hash(&request.session),
        );
        self.run_in_span(request, attempt).instrument(span).await
    }

    /// The walk, in the named steps of the module essay: [`Self::begin`]
    /// (steps 1–2), then per candidate [`Self::plan`] (3–4) and
    /// [`Self::try_candidate`] (5–6), and [`Self::exhausted`] (7).
    async fn run_in_span<T, F, Fut>(
        &self,
        request: &RunRequest,
        mut attempt: F,
    ) -> Result<RunOutput<T>, RunError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let (turn, mut first_state) = self.begin(request).await?;
        let mut walk = Walk {
            client: request.client.clone(),
            ..Walk::default()
        };
        let mut i = 0;
        // Issue 32: a continuation starts after the candidate that broke.
        if let Some(after) = request.resume_after.last() {
            walk.step = "continuation";
            let cands = &turn.chain.candidates;
            i = cands
                .iter()
                .position(|c| c.model == *after)
                .map_or(0, |p| p + 1);
            first_state = None;
        }
        while i < turn.chain.candidates.len() {
            let cand = Candidate::at(&turn.chain, i);
            if request.resume_after.contains(&cand.model) {
                i += 1;
                continue;
            }
            let now = self.now_ms();
            // Issue 44 item 7: past the request's deadline, nothing more
            // is started; the rest of the chain is skipped, said so.
            if let Some(d) = request.deadline_ms.filter(|d| now >= *d) {
                let late = now - d;
                walk.skipped(
                    &cand,
                    Some("timeout".into()),
                    format!("the request's deadline passed {late} ms ago"),
                    now,
                );
                i += 1;
                continue;
            }
            // The run's first read serves the first candidate.
            let state = if i == 0 { first_state.take() } else { None };
            match self.plan(&turn, &cand, state, &mut walk, now).await? {
                Plan::Skip { why, reason } => {
                    walk.skipped(&cand, reason, why, now);
                    i += 1;
                }
                Plan::Try(tries) => {
                    match self
                        .try_candidate(&turn, &cand, tries, &mut walk, &mut attempt)
                        .await?
                    {
                        Reached::Answer(out) => return Ok(out),
                        Reached::Next => i += 1,
                        Reached::Jump(j) => i = j,
                    }
                }
            }
        }
        Err(self.exhausted(&turn, walk).await)
    }

    /// Steps 1–2: the session and the routing state in one read (one round
    /// trip on a networked backend), the profiles, and the chain: the
    /// selection, with the session's override unless its origin is due for
    /// a re-probe (R11.5). Returns the routing state for the first
    /// candidate.
    async fn begin<'r>(
        &'r self,
        request: &'r RunRequest,
    ) -> Result<(Turn<'r>, Option<AuthState>), RunError> {
        let key = request.session.as_str();
        let store: &dyn AsyncStore = self.store.as_ref();
        let now = self.now_ms();
        let (entry, state) = store.load_run(key).await?;
        let profiles = store.load_profiles().await?;
        let secrets = self.redactor_of(secrets_of(&profiles));
        let selections = &self.engine.ruleset().selections;
        let mut chain_req = ChainRequest {
            kind: request.kind,
            agent: request.agent.clone(),
            one_shot: request.one_shot.clone(),
            session_override: None,
            cron: request.cron.clone(),
        };
        let base = build_chain(&self.config, selections, &chain_req)?;
        let mut selected = base.requested().clone();
        let entry = self
            .clear_stale_override(request, entry.unwrap_or_default(), &selected)
            .await;
        if let Some(o) = session_override(&entry) {
            if self
                .follow_override(key, &entry, &o, &mut selected, now)
                .await
            {
                chain_req.session_override = Some(o);
            }
        }
        let chain = if chain_req.session_override.is_some() && request.one_shot.is_none() {
            build_chain(&self.config, selections, &chain_req)?
        } else {
            base
        };
        let user_owned = chain.source == SelectionSource::UserOverride
            || chain.source == SelectionSource::LegacyOverride;
        let turn = Turn {
            request,
            key,
            store,
            profiles,
            secrets,
            entry,
            chain,
            selected,
            user_owned,
        };
        Ok((turn, Some(state)))
    }

    /// R3.2: a heartbeat without its own model clears a direct auto
    /// override whose origin is no longer the configured default.
    async fn clear_stale_override(
        &self,
        request: &RunRequest,
        entry: SessionEntry,
        selected: &ModelRef,
    ) -> SessionEntry {
        let stale = |e: &SessionEntry| {
            e.model_override_source() == Some(OverrideSource::Auto)
                && origin(e).is_some_and(|o| o != *selected)
        };
        if !request.heartbeat || !stale(&entry) {
            return entry;
        }
        let clear = |e: &mut SessionEntry| {
            if stale(e) {
                clear_model_override(e);
                clear_notice(e);
            }
        };
        let written = edit_session(self.store.as_ref(), &request.session, |e| {
            clear(e);
            e.clone()
        })
        .await;
        // Degraded (a write that failed): this run still goes by the
        // cleared selection.
        self.health
            .absorb("clear a session's override", written)
            .unwrap_or_else(|| {
                let mut e = entry.clone();
                clear(&mut e);
                e
            })
    }

    /// Whether the run follows the session's override `o`; sets `selected`
    /// to the selection the run falls back from (R3, R11.5).
    async fn follow_override(
        &self,
        key: &str,
        entry: &SessionEntry,
        o: &SessionOverride,
        selected: &mut ModelRef,
        now: u64,
    ) -> bool {
        match o.source {
            OverrideKind::Auto => match origin(entry) {
                // R11.5: due for its re-probe, the run starts on the
                // origin again (the override stays until it answers).
                Some(orig) if orig == *selected => !self.take_reprobe(key, selected, now).await,
                Some(orig) => {
                    *selected = orig;
                    true
                }
                None => true,
            },
            _ => {
                *selected = o.model.clone();
                true
            }
        }
    }

    /// Steps 3–4: what to do with `cand` before any attempt: skip it (a
    /// provider ruled out, the skip cache, no usable profile) or try it
    /// with an ordered list of profiles. `state` is the routing state when
    /// the run's first read already holds it.
    async fn plan(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        state: Option<AuthState>,
        walk: &mut Walk,
        now: u64,
    ) -> Result<Plan, RunError> {
        let (p, m) = (cand.provider(), cand.model_name());
        if let Some(&r) = walk.skip_providers.get(p) {
            let r = self.reason_name(r);
            return Ok(Plan::Skip {
                why: format!("Provider {p} has {r} issue (skipping all models)"),
                reason: Some(r.to_string()),
            });
        }
        if !cand.is_primary {
            if let Some(r) = self.skip_cached(turn.key, p, m, now).await? {
                return Ok(Plan::Skip {
                    why: format!("{} failed recently with {r} (skip cache)", cand.model),
                    reason: Some(r),
                });
            }
        }
        let state = match state {
            Some(state) => state,
            None => turn.store.load_state().await?,
        };
        let order = order_profiles(&self.routing, &turn.profiles, &state, p, Some(m), now);
        if order.is_disabled() {
            return Ok(Plan::Skip {
                why: format!("Provider {p} is switched off by an empty auth.order"),
                reason: None,
            });
        }
        if order.entries.is_empty() {
            if order.excluded.is_empty() {
                // A provider without auth profiles (a local model).
                return Ok(Plan::Try(Tries {
                    profiles: vec![None],
                    probe: false,
                    slot: false,
                    strict: true,
                    pin: PinChange::Keep,
                }));
            }
            return Ok(Plan::Skip {
                why: format!("Provider {p} has no usable auth profile"),
                reason: None,
            });
        }
        let choice = choose_session_profile(&turn.entry, &order, turn.request.new_session);
        if choice.attempts.is_empty() {
            let pinned = turn
                .entry
                .auth_profile_override
                .as_deref()
                .filter(|_| choice.strict);
            let only = turn.chain.candidates.len() == 1;
            return Ok(self
                .cooldown_plan(&order, pinned, cand.is_primary, only, walk, now)
                .await?);
        }
        Ok(Plan::Try(Tries {
            profiles: choice.attempts.into_iter().map(Some).collect(),
            probe: false,
            slot: false,
            strict: choice.strict,
            pin: choice.pin,
        }))
    }

    /// Steps 5–6: the attempts on one candidate, profile after profile
    /// while its failures rotate (R8).
    async fn try_candidate<T, F, Fut>(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        tries: Tries,
        walk: &mut Walk,
        attempt: &mut F,
    ) -> Result<Reached<T>, RunError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let p = cand.provider();
        if tries.probe {
            walk.decide(Decision {
                decision: DecisionKind::ProbeCooldownCandidate,
                from_model: cand.model.to_string(),
                to_model: None,
                reason: None,
                detail: Some(format!("Provider {p} is cooling; probing")),
                position: cand.index + 1,
                outcome: StepOutcome::Probing,
                classified_by: None,
                probability: None,
                cause: None,
            });
        }
        let mut used: HashMap<RotationBudget, u32> = HashMap::new();
        let mut budget: Option<RotationBudget> = None;
        for (k, profile_id) in tries.profiles.iter().enumerate() {
            if k > 0 {
                // R8.5: this rotation spends the last failure's budget
                // (checked when that failure decided to rotate).
                if let Some(b) = budget {
                    *used.entry(b).or_insert(0) += 1;
                    match self.policy.rotation_backoff_ms(b) {
                        0 => {}
                        ms => self.sleeper.sleep(ms).await,
                    }
                }
            }
            let now = self.now_ms();
            if let Some(id) = profile_id.as_deref().filter(|_| tries.probe) {
                let r = edit_profile(turn.store, id, p, |s| {
                    s.stats_mut(id).last_probe_at = Some(now);
                })
                .await;
                self.health.absorb("record a probe", r);
            }
            let guard = self.persist_fallback(turn, cand, profile_id, now).await;
            let mut retried = 0;
            let first_call_ms = self.now_ms();
            let result = loop {
                let number = walk.attempts.len() + 1;
                let r = self
                    .call(turn, cand, profile_id, number, tries.probe, attempt)
                    .await;
                // Issue 32: the provider's retry budget, same candidate
                // and profile, nothing marked until it is spent.
                let Err(AttemptError::Provider(f)) = &r else {
                    break r;
                };
                let Some((wait, max)) = self.retry_wait(cand, f, retried) else {
                    break r;
                };
                // Issue 44 item 7: a retry whose wait would end past the
                // candidate's time budget or the request's deadline is not
                // made; the run fails over now.
                let after_wait = self.now_ms().saturating_add(wait);
                let budget_end = self
                    .retries
                    .get(&crate::store::normalize_provider(cand.provider()))
                    .and_then(|b| b.within_ms)
                    .map(|w| first_call_ms.saturating_add(w));
                if budget_end.is_some_and(|end| after_wait >= end)
                    || turn.request.deadline_ms.is_some_and(|d| after_wait >= d)
                {
                    break r;
                }
                retried += 1;
                self.retried(
                    turn,
                    cand,
                    profile_id,
                    tries.probe,
                    f,
                    (retried, max, wait),
                    walk,
                );
                if wait > 0 {
                    self.sleeper.sleep(wait).await;
                }
            };
            let record = AttemptRecord {
                provider: p.into(),
                model: cand.model_name().into(),
                profile_id: profile_id.clone(),
                outcome: AttemptOutcome::Succeeded,
                reason: None,
                rule: None,
                decided_by: None,
                probability: None,
                status: None,
                code: None,
                error: None,
                probe: tries.probe,
                at_ms: self.now_ms(),
                cause: None,
            };
            let error = match result {
                Ok(value) => {
                    if let Some(g) = guard {
                        g.disarm();
                    }
                    walk.attempts.push(record);
                    let walk = std::mem::take(walk);
                    let out = self
                        .succeed(value, turn, cand, profile_id, &tries.pin, walk)
                        .await?;
                    return Ok(Reached::Answer(out));
                }
                Err(e) => e,
            };
            let this = ThisTry {
                profile_id,
                tries: &tries,
                more_profiles: k + 1 < tries.profiles.len(),
                used: &used,
            };
            match self
                .after_error(turn, cand, &this, error, record, guard, walk)
                .await?
            {
                AfterError::Rotate(b) => budget = b,
                AfterError::Leave => break,
                AfterError::Jump(j) => return Ok(Reached::Jump(j)),
            }
        }
        Ok(Reached::Next)
    }

    /// Issue 32: whether a failure is asked again of the same candidate,
    /// and after how many ms (see [`super::RetryBudget`]); with the
    /// budget's `max`.
    fn retry_wait(
        &self,
        cand: &Candidate,
        f: &ProviderFailure,
        retried: u32,
    ) -> Option<(u64, u32)> {
        let b = self
            .retries
            .get(&crate::store::normalize_provider(cand.provider()))?;
        if retried >= b.max || f.code.as_deref() == Some("ETIMEDOUT") {
            return None;
        }
        // 429 and every 5xx (Anthropic's 529 `overloaded_error` included).
        let server = f
            .status
            .is_some_and(|s| s == 429 || (500..600).contains(&s));
        let reset = f.status.is_none() && f.code.as_deref() == Some("ECONNRESET");
        if !server && !reset {
            return None;
        }
        let c = self
            .engine
            .classify(&f.as_provider_error(cand.provider(), cand.model_name()));
        let bh = c.behaviour;
        if !bh.failover || bh.disable.is_some() || bh.skip_provider || bh.handoff.is_some() {
            return None;
        }
        if let Some(at) = f.reset_at {
            let wait = at.saturating_sub(self.now_ms());
            return match self.retry_cap.0 {
                Some(cap) if u128::from(wait) > cap.as_millis() => None,
                _ => Some((wait, b.max)),
            };
        }
        let ceiling = b
            .base_delay_ms
            .saturating_mul(1u64 << retried.min(30))
            .min(b.max_delay_ms);
        Some((self.jitter_ms(ceiling), b.max))
    }

    /// Records a failure that is retried: an attempt and a decision, no
    /// mark on the profile.
    #[allow(clippy::too_many_arguments)]
    fn retried(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        profile_id: &Option<String>,
        probe: bool,
        f: &ProviderFailure,
        (n, max, wait): (u32, u32, u64),
        walk: &mut Walk,
    ) {
        let c = self
            .engine
            .classify(&f.as_provider_error(cand.provider(), cand.model_name()));
        let text = scrub(&f.text(), &turn.secrets);
        walk.attempts.push(AttemptRecord {
            provider: cand.provider().into(),
            model: cand.model_name().into(),
            profile_id: profile_id.clone(),
            outcome: AttemptOutcome::Retried,
            reason: Some(c.reason.to_string()),
            rule: c.rule.map(str::to_string),
            decided_by: Some(c.decided_by.as_str()),
            probability: (c.decided_by == crate::classify::Decider::Model)
                .then_some(c.probability)
                .flatten(),
            status: c.status.or(f.status),
            code: f.code.as_deref().map(|c| scrub(c, &turn.secrets)),
            error: Some(text.clone()),
            probe,
            at_ms: self.now_ms(),
            cause: f.effective_cause().map(Cause::name),
        });
        walk.decide(Decision {
            decision: DecisionKind::RetrySameCandidate,
            from_model: cand.model.to_string(),
            to_model: Some(cand.model.to_string()),
            reason: Some(c.reason.to_string()),
            detail: Some(cut(
                &format!("retry {n} of {max} in {wait} ms: {text}"),
                DETAIL_CHARS,
            )),
            position: cand.index + 1,
            outcome: StepOutcome::Retrying,
            classified_by: Some(c.decided_by.as_str()),
            probability: (c.decided_by == crate::classify::Decider::Model)
                .then_some(c.probability)
                .flatten(),
            cause: f.effective_cause().map(Cause::name),
        });
    }

    /// R11.3: persists the fallback before the attempt, so every reader of
    /// the session sees the model about to be used; the guard rolls it
    /// back unless the attempt answers.
    async fn persist_fallback<'t>(
        &self,
        turn: &Turn<'t>,
        cand: &Candidate,
        profile_id: &Option<String>,
        now: u64,
    ) -> Option<OverrideGuard<'t>> {
        let (p, m, selected) = (cand.provider(), cand.model_name(), &turn.selected);
        // Nothing to write on the way back to the configured default or to
        // the session's selection (an auto override's origin): that is a
        // return, like a re-probe, and the override stays until it answers
        // (R11.5); nor for a chain the user owns (R3).
        if cand.model == *turn.chain.requested() || cand.model == *selected || turn.user_owned {
            return None;
        }
        let mut written = OverrideFields {
            provider_override: Some(p.into()),
            model_override: Some(m.into()),
            model_override_source: Some(OverrideSource::Auto.name().into()),
            model_override_fallback_origin_provider: Some(selected.provider().into()),
            model_override_fallback_origin_model: Some(selected.model().into()),
            auth_profile_override: profile_id.clone(),
            auth_profile_override_source: profile_id
                .as_ref()
                .map(|_| OverrideSource::Auto.name().into()),
            auth_profile_override_compaction_count: None,
        };
        let before = edit_session(turn.store, turn.key, |e| {
            // A user's model choice, even one made since the run started,
            // is never overwritten (R11.3, R3).
            if e.model_override_source() == Some(OverrideSource::User) {
                return None;
            }
            // A user's profile pin is theirs (R6.5): keep it.
            if e.auth_profile_override_source() == Some(OverrideSource::User) {
                written.auth_profile_override = e.auth_profile_override.clone();
                written.auth_profile_override_source = e.auth_profile_override_source.clone();
                written.auth_profile_override_compaction_count =
                    e.auth_profile_override_compaction_count;
            }
            Some(written.write(e))
        })
        .await;
        // Degraded: the attempt runs without the override persisted, so
        // there is nothing to roll back (R11.4).
        let before = self
            .health
            .absorb("persist the fallback override", before)
            .flatten();
        // The 5-minute re-probe clock starts when the session leaves its
        // primary (R11.5), unless it ends with the run.
        if !turn.request.one_off {
            self.start_reprobe_clock(turn.key, selected, now).await;
        }
        before.map(|before| OverrideGuard {
            store: turn.store,
            session: turn.key,
            written,
            before,
            armed: true,
        })
    }

    /// One call of the caller's attempt function, in its span.
    async fn call<T, F, Fut>(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        profile_id: &Option<String>,
        number: usize,
        probe: bool,
        attempt: &mut F,
    ) -> Result<T, AttemptError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let (p, m) = (cand.provider(), cand.model_name());
        // The OpenTelemetry GenAI conventions' names beside ours (issue
        // 48): a trace backend groups them with other GenAI spans.
        let span = tracing::info_span!(
            target: "failover::run",
            "failover_attempt",
            provider = p,
            model = m,
            profile_id = profile_id.as_deref().unwrap_or(""),
            attempt = number,
            probe,
            gen_ai.system = p,
            gen_ai.operation.name = "chat",
            gen_ai.request.model = m,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        );
        let call = Attempt {
            provider: p.into(),
            model: m.into(),
            profile_id: profile_id.clone(),
            profile: profile_id
                .as_ref()
                .and_then(|id| turn.profiles.profiles.get(id).cloned()),
            number,
            probe,
        };
        let result = attempt(call).instrument(span.clone()).await;
        if let Err(AttemptError::Provider(f)) = &result {
            // What happened on the wire; the reason is the decision's.
            if let Some(c) = f.effective_cause() {
                span.record("error.type", c.name());
            }
            if let Some(st) = f.status {
                span.record("http.response.status_code", i64::from(st));
            }
        }
        result
    }

    /// What an attempt's error means for the walk. The fallback override
    /// the attempt ran under is rolled back in every case (R11.4).
    #[allow(clippy::too_many_arguments)]
    async fn after_error(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        this: &ThisTry<'_>,
        error: AttemptError,
        mut record: AttemptRecord,
        guard: Option<OverrideGuard<'_>>,
        walk: &mut Walk,
    ) -> Result<AfterError, RunError> {
        match error {
            AttemptError::Skip(why) => {
                // Nothing was sent: roll the override back and move on
                // without a mark on the profile.
                if let Some(g) = guard {
                    g.release().await;
                }
                let why = scrub(&why, &turn.secrets);
                record.outcome = AttemptOutcome::Skipped;
                record.error = Some(why.clone());
                walk.attempts.push(record);
                walk.decide(Decision {
                    decision: DecisionKind::SkipCandidate,
                    from_model: cand.model.to_string(),
                    to_model: cand.next.clone(),
                    reason: None,
                    detail: Some(cut(&why, DETAIL_CHARS)),
                    position: cand.index + 1,
                    outcome: cand.moving_on(),
                    classified_by: None,
                    probability: None,
                    cause: None,
                });
                Ok(AfterError::Leave)
            }
            AttemptError::LiveSessionModelSwitch { provider, model } => {
                if let Some(g) = guard {
                    g.release().await;
                }
                Ok(live_switch(turn, cand, &provider, &model, record, walk))
            }
            AttemptError::Provider(failure) => {
                let verdict = self
                    .judge(turn, cand, this, &failure, record, guard, walk)
                    .await;
                self.after_failure(turn, cand, this, &failure, verdict, walk)
            }
        }
    }

    /// A provider's error: classify it, record the attempt, mark the
    /// profile (R7, R8), roll the override back (R11.4), then the probe
    /// slot (R16.3) and the skip cache (R12.2).
    #[allow(clippy::too_many_arguments)]
    async fn judge<'s>(
        &'s self,
        turn: &Turn<'_>,
        cand: &Candidate,
        this: &ThisTry<'_>,
        failure: &ProviderFailure,
        mut record: AttemptRecord,
        guard: Option<OverrideGuard<'_>>,
        walk: &mut Walk,
    ) -> Verdict<'s> {
        let (p, m) = (cand.provider(), cand.model_name());
        let c = self.engine.classify(&failure.as_provider_error(p, m));
        let probability = (c.decided_by == crate::classify::Decider::Model)
            .then_some(c.probability)
            .flatten();
        let verdict = Verdict {
            reason: c.reason_id,
            name: c.reason,
            behaviour: c.behaviour,
            text: scrub(&failure.text(), &turn.secrets),
            decided_by: c.decided_by.as_str(),
            probability,
            cause: failure.effective_cause().map(Cause::name),
        };
        record.outcome = AttemptOutcome::Failed;
        record.cause = verdict.cause;
        record.reason = Some(verdict.name.to_string());
        record.rule = c.rule.map(str::to_string);
        record.decided_by = Some(verdict.decided_by);
        record.probability = probability;
        record.status = c.status.or(failure.status);
        record.code = failure.code.as_deref().map(|c| scrub(c, &turn.secrets));
        record.error = Some(verdict.text.clone());
        let now = record.at_ms;
        walk.attempts.push(record);
        if let Some(id) = this.profile_id {
            let outranks = self.outranks(verdict.behaviour);
            let f = Failure {
                reason: verdict.name,
                behaviour: verdict.behaviour,
                model: Some(m),
                reset_at: failure.reset_at,
                probe: this.tries.probe,
                outranks: Some(&outranks),
            };
            self.mark_failure(id, p, &f, now).await;
        }
        if let Some(g) = guard {
            g.release().await;
        }
        if this.tries.slot && !probe_uses_transient_slot(verdict.behaviour) {
            // R16.3: the probe learnt nothing about the cooldown.
            walk.probe_slots.remove(p);
        }
        // R12.2; a one-off run's marks could never be read (its key is its
        // own, and the chain has no duplicates), so it leaves none.
        if !cand.is_primary && auth_class(verdict.behaviour) && !turn.request.one_off {
            self.mark_skip(turn.key, p, m, verdict.name, now).await;
        }
        verdict
    }

    /// After a classified failure: rotate to the next profile (R8), leave
    /// the candidate, or stop the run with the error (R9, R16.8).
    fn after_failure(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        this: &ThisTry<'_>,
        failure: &ProviderFailure,
        verdict: Verdict<'_>,
        walk: &mut Walk,
    ) -> Result<AfterError, RunError> {
        let b = verdict.behaviour;
        let rotate = !this.tries.strict
            && !b.advance_model
            && !b.skip_provider
            && (b.cooldown || b.disable.is_some())
            && this.more_profiles
            && b.rotations
                .is_none_or(|r| this.used.get(&r).copied().unwrap_or(0) < self.policy.rotations(r));
        // R9.2, R9.3: a `stop` reason (or a handoff) ends the run with the
        // error as it is; R16.8: so does an unrecognised error on the last
        // candidate.
        let stop = !b.failover || (verdict.name == UNCLASSIFIED && cand.is_last && !rotate);
        // R9.8: a context overflow (handed off to compaction) skips forward
        // to the first later candidate whose declared window is larger.
        if stop && b.handoff.as_deref() == Some("compaction") {
            if let Some(j) = self.larger_window(turn, cand) {
                return Ok(self.skip_to_larger_window(turn, cand, j, &verdict, walk));
            }
        }
        walk.decide(Decision {
            decision: DecisionKind::CandidateFailed,
            from_model: cand.model.to_string(),
            to_model: if rotate {
                Some(cand.model.to_string())
            } else {
                cand.next.clone()
            },
            reason: Some(verdict.name.to_string()),
            detail: Some(cut(&verdict.text, DETAIL_CHARS)),
            position: cand.index + 1,
            outcome: if stop {
                StepOutcome::Stopped
            } else if rotate || cand.next.is_some() {
                StepOutcome::NextFallback
            } else {
                StepOutcome::ChainExhausted
            },
            classified_by: Some(verdict.decided_by),
            probability: verdict.probability,
            cause: verdict.cause,
        });
        let s = &turn.secrets;
        let surfaced = SurfacedError {
            provider: cand.provider().into(),
            model: cand.model_name().into(),
            failure: ProviderFailure {
                message: failure.message.as_deref().map(|t| scrub(t, s)),
                body: failure.body.as_deref().map(|t| scrub(t, s)),
                code: failure.code.as_deref().map(|t| scrub(t, s)),
                ..failure.clone()
            },
            text_scrubbed: verdict.text,
            reason: verdict.name.to_string(),
            handoff: b.handoff.clone(),
            attempts: walk.attempts.clone(),
            decisions: if stop {
                std::mem::take(&mut walk.decisions)
            } else {
                walk.decisions.clone()
            },
        };
        if stop {
            return Err(RunError::Provider {
                error: Box::new(surfaced),
            });
        }
        walk.last = Some(Box::new(surfaced));
        if b.skip_provider {
            walk.skip_providers
                .insert(cand.provider().to_string(), verdict.reason);
        }
        Ok(if rotate {
            AfterError::Rotate(b.rotations)
        } else {
            AfterError::Leave
        })
    }

    /// R9.8: the first candidate after `cand` whose declared context
    /// window is larger than `cand`'s (both declared).
    fn larger_window(&self, turn: &Turn<'_>, cand: &Candidate) -> Option<usize> {
        let failed = self.window_of(&cand.model)?;
        let cands = &turn.chain.candidates;
        (cand.index + 1..cands.len())
            .find(|&j| self.window_of(&cands[j].model).is_some_and(|w| w > failed))
    }

    /// R9.8: the overflow is a failed step to candidate `j`; the
    /// candidates between, whose windows are not larger (or unknown), are
    /// skipped with the reason.
    fn skip_to_larger_window(
        &self,
        turn: &Turn<'_>,
        cand: &Candidate,
        j: usize,
        verdict: &Verdict<'_>,
        walk: &mut Walk,
    ) -> AfterError {
        let to = turn.chain.candidates[j].model.to_string();
        let failed = self.window_of(&cand.model).unwrap_or(0);
        walk.decide(Decision {
            decision: DecisionKind::CandidateFailed,
            from_model: cand.model.to_string(),
            to_model: Some(to.clone()),
            reason: Some(verdict.name.to_string()),
            detail: Some(cut(
                &format!(
                    "{}; context window {failed} tokens: next candidate with a larger window is {to}",
                    verdict.text
                ),
                DETAIL_CHARS,
            )),
            position: cand.index + 1,
            outcome: StepOutcome::NextFallback,
            classified_by: Some(verdict.decided_by),
            probability: verdict.probability,
            cause: verdict.cause,
        });
        let now = self.now_ms();
        for k in cand.index + 1..j {
            let c = Candidate::at(&turn.chain, k);
            let why = match self.window_of(&c.model) {
                Some(w) => format!(
                    "{} has a context window of {w} tokens, not larger than the {failed} that overflowed",
                    c.model
                ),
                None => format!(
                    "{} declares no context window (after a context overflow at {failed} tokens)",
                    c.model
                ),
            };
            walk.skipped(&c, Some(verdict.name.to_string()), why, now);
        }
        AfterError::Jump(j)
    }

    /// Step 7: every candidate failed or was skipped. A run of one attempt
    /// surfaces that attempt's error as it is.
    async fn exhausted(&self, turn: &Turn<'_>, mut walk: Walk) -> RunError {
        // Retries of the same candidate do not make a run of one attempt
        // a summary.
        let tried = walk
            .attempts
            .iter()
            .filter(|a| a.outcome != AttemptOutcome::Retried)
            .count();
        if tried == 1 {
            if let Some(mut last) = walk.last.take() {
                last.attempts = walk.attempts;
                last.decisions = walk.decisions;
                return RunError::Provider { error: last };
            }
        }
        RunError::Summary(FallbackSummaryError {
            soonest_cooldown_expiry: self.soonest_for_chain(&turn.chain, &turn.profiles).await,
            attempts: walk.attempts,
            session: turn.key.to_string(),
            decisions: walk.decisions,
        })
    }

    /// The first success: record it, settle the session, say so (R13).
    async fn succeed<T>(
        &self,
        value: T,
        turn: &Turn<'_>,
        cand: &Candidate,
        profile_id: &Option<String>,
        pin: &PinChange,
        mut walk: Walk,
    ) -> Result<RunOutput<T>, RunError> {
        let (key, request, selected) = (turn.key, turn.request, &turn.selected);
        let (user_owned, position) = (turn.user_owned, cand.index);
        let cand = &cand.model;
        let now = self.now_ms();
        let store: &dyn AsyncStore = self.store.as_ref();
        let (p, m) = (cand.provider(), cand.model());
        let failed: Vec<AttemptRecord> = walk
            .attempts
            .iter()
            .filter(|a| matches!(a.outcome, AttemptOutcome::Failed | AttemptOutcome::Skipped))
            .cloned()
            .collect();
        let on_selected = cand == selected;
        let mut notice = None;
        // The pin was chosen from the entry as the run read it. A user's
        // `/model …@profile` written since is theirs (R6.5, R11.3): the
        // run's auto pin does not overwrite it.
        let (pin_read, pin_source_read) = (
            turn.entry.auth_profile_override.clone(),
            turn.entry.auth_profile_override_source(),
        );
        let settle = |e: &mut SessionEntry| {
            let user_pinned_since = e.auth_profile_override_source() == Some(OverrideSource::User)
                && (e.auth_profile_override != pin_read
                    || pin_source_read != Some(OverrideSource::User));
            if !user_pinned_since {
                apply_pin_change(e, pin);
            }
            if on_selected {
                // R11.5, R13.2: back on the selection; clear what the
                // fallback left.
                if e.model_override_source() == Some(OverrideSource::Auto) {
                    clear_model_override(e);
                }
                let previous = e.fallback_notice_active_model.clone();
                clear_notice(e);
                return previous.map(|previous| Notice::FallbackCleared {
                    selected: selected.to_string(),
                    previous,
                });
            }
            if user_owned || e.model_override_source() == Some(OverrideSource::User) {
                return None;
            }
            // R13.1, R13.3: once per state change.
            let active = cand.to_string();
            if e.fallback_notice_active_model.as_deref() == Some(active.as_str())
                && e.fallback_notice_selected_model.as_deref() == Some(selected.as_str())
            {
                return None;
            }
            let reason = if failed.is_empty() {
                // A continuation: the break is the fallback's reason.
                let resumed = request.resume_reason.as_ref().map(|r| r.replace('_', " "));
                resumed
                    .or_else(|| e.fallback_notice_reason.clone())
                    .unwrap_or_else(|| notice_reason(&failed))
            } else {
                notice_reason(&failed)
            };
            e.fallback_notice_selected_model = Some(selected.to_string());
            e.fallback_notice_active_model = Some(active.clone());
            e.fallback_notice_reason = Some(reason.clone());
            e.fallback_notice_started_at = Some(now);
            Some(Notice::FallbackStarted {
                selected: selected.to_string(),
                active,
                reason,
            })
        };
        // The record waits for the answer when it is the run's only
        // write: always when the session ends with the run; for a kept
        // session on a local backend, when its entry, read again now, has
        // nothing to settle (a row read instead of a write transaction
        // before the answer: the steady state of a session). On a
        // networked backend the atomic step below is one round trip
        // already, as the read would be.
        let nothing_to_settle = request.defer_success_record
            && !request.one_off
            && store.shared_tables().is_none()
            && {
                // Unreadable: treated as something to settle (the write
                // below then says whether the state is degraded).
                match store.load_session(key).await {
                    Ok(current) => {
                        let current = current.unwrap_or_default();
                        let mut after = current.clone();
                        settle(&mut after).is_none() && after == current
                    }
                    Err(_) => false,
                }
            };
        let defer = (request.defer_success_record && request.one_off) || nothing_to_settle;
        // Otherwise the profile's success and the session's settling: one
        // atomic step on Redis (one round trip) and SQLite (one
        // transaction), two updates on the files and in memory; each edit
        // sees its record's latest value.
        let mut record = |s: &mut crate::store::AuthState| {
            if let Some(id) = profile_id {
                record_success(s, id, p, Some(m), now);
            }
        };
        let (recorded, deferred) = match profile_id {
            Some(id) if defer => (
                None,
                Some(DeferredSuccess {
                    profile_id: id.clone(),
                    provider: p.into(),
                    model: m.into(),
                    at_ms: now,
                }),
            ),
            Some(id) => (Some((id.as_str(), p, &mut record as _)), None),
            None => (None, None),
        };
        if !nothing_to_settle {
            let r = store
                .update_success(recorded, key, &mut |e| notice = settle(e))
                .await;
            // The answer exists: it goes out whether or not this was written.
            self.health.absorb("record a success", r);
        }
        walk.decide(Decision {
            decision: DecisionKind::CandidateSucceeded,
            from_model: cand.to_string(),
            to_model: None,
            reason: failed.first().and_then(|a| a.reason.clone()),
            detail: None,
            position: position + 1,
            outcome: StepOutcome::Succeeded,
            classified_by: None,
            probability: None,
            cause: None,
        });
        Ok(RunOutput {
            value,
            provider: cand.provider().into(),
            model: cand.model().into(),
            profile_id: profile_id.clone(),
            attempts: walk.attempts,
            decisions: walk.decisions,
            notices: notice.into_iter().collect(),
            deferred,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Profile;

    // Issue 33, R16.11: an `aws` profile's secret access key and session
    // token are scrubbed from what providers send back; its access key id
    // names the key and is not a secret.
    #[test]
    fn aws_profile_secrets_are_scrubbed() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let token = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN//////////wEaCXVz";
        let mut profiles = AuthProfiles::default();
        profiles.profiles.insert(
            "amazon-bedrock:prod".into(),
            Profile::aws(
                "amazon-bedrock",
                "ASIAIOSFODNN7EXAMPLE",
                secret,
                Some(token),
                Some("us-west-2"),
            ),
        );
        let secrets = secrets_of(&profiles);
        assert_eq!(secrets.len(), 2);
        assert!(secrets.iter().any(|s| s == secret));
        assert!(secrets.iter().any(|s| s == token));
        let r = Redactor::new(secrets);
        let body = format!(
            r#"{{"message":"signature for {secret} with token {token} by ASIAIOSFODNN7EXAMPLE"}}"#
        );
        assert_eq!(
            scrub(&body, &r),
            r#"{"message":"signature for <redacted> with token <redacted> by ASIAIOSFODNN7EXAMPLE"}"#
        );
    }
}
