//! What each mistake costs, and the thresholds that follow from it.
//!
//! The model's probabilities are calibrated (temperature scaling on
//! cross-validation folds, [`super::train`]), so a probability can be
//! weighed against what a wrong verdict does to a run. A mistake costs
//! what its consequences cost; the consequences come from the reasons'
//! behaviour clauses, so an operator's own reasons are priced too
//! (`docs/model.md`, "The cost of a mistake"):
//!
//! | the verdict … when the truth … | costs |
//! |---|---|
//! | stops (`stop`) — fails over | [`UNSAFE_STOP`]: the user gets an error another candidate would have answered |
//! | disables a profile (`disable …`) — does not | [`NEEDLESS_DISABLE`]: a working key is off for hours |
//! | fails over — stops | [`NEEDLESS_FAILOVER`]: every candidate gets the same failing request |
//! | cools a profile (`cooldown`) — neither cools nor disables | [`NEEDLESS_COOLDOWN`]: a working profile rests for minutes |
//! | does not disable — disables | [`MISSED_DISABLE`]: a dead key is tried again every few minutes |
//! | neither cools nor disables — cools | [`MISSED_COOLDOWN`]: a failing profile is tried first again at once |
//! | any other reason than the truth | [`WRONG_LABEL`]: logs, metrics and notices say the wrong thing |
//!
//! The costs add up (a verdict may stop *and* be the wrong label). From
//! them, the model's top reason `r` overrules the rules' verdict `v` when
//! its probability `p` is at least
//!
//! ```text
//! t(r, v) = W / (W + M),   M = cost(truth r, verdict v)
//!                          W = max over t ≠ r of cost(t, r) − cost(t, v)
//! ```
//!
//! — the point where what the switch saves if the model is right (`p·M`)
//! outweighs what it loses if the rest of the probability sits on the
//! worst other truth (`(1 − p)·W`). Never below [`FLOOR`]: a reason the
//! model itself finds less likely than not does not decide.

use crate::compile::reasons::ReasonBehaviour;

/// A verdict that stops where the truth fails over.
pub const UNSAFE_STOP: f32 = 10.0;
/// A verdict that disables a profile where the truth does not.
pub const NEEDLESS_DISABLE: f32 = 5.0;
/// A verdict that fails over where the truth stops.
pub const NEEDLESS_FAILOVER: f32 = 2.0;
/// A verdict that cools a profile where the truth neither cools nor
/// disables it.
pub const NEEDLESS_COOLDOWN: f32 = 1.0;
/// A verdict that does not disable where the truth does.
pub const MISSED_DISABLE: f32 = 1.0;
/// A verdict that neither cools nor disables where the truth cools.
pub const MISSED_COOLDOWN: f32 = 1.0;
/// Any verdict other than the truth.
pub const WRONG_LABEL: f32 = 0.5;
/// The lowest threshold the costs may give.
pub const FLOOR: f32 = 0.5;

/// What a verdict does to a run, as far as its cost goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consequence {
    /// `stop`: the error goes to the caller.
    pub stops: bool,
    /// `disable …`: the profile is off for hours.
    pub disables: bool,
    /// `cooldown`: the profile rests for minutes.
    pub cools: bool,
    /// `advance model` or `skip provider`: the run leaves the provider.
    pub advances: bool,
}

impl From<&ReasonBehaviour> for Consequence {
    fn from(b: &ReasonBehaviour) -> Self {
        Consequence {
            stops: !b.failover,
            disables: b.disable.is_some(),
            cools: b.cooldown,
            advances: b.advance_model || b.skip_provider,
        }
    }
}

/// The cost of verdict `verdict` when the truth is `truth` (two different
/// reasons).
pub fn cost(truth: Consequence, verdict: Consequence) -> f32 {
    let mut c = WRONG_LABEL;
    if verdict.stops && !truth.stops {
        c += UNSAFE_STOP;
    }
    if !verdict.stops && truth.stops {
        c += NEEDLESS_FAILOVER;
    }
    if verdict.disables && !truth.disables {
        c += NEEDLESS_DISABLE;
    }
    if truth.disables && !verdict.disables {
        c += MISSED_DISABLE;
    }
    if verdict.cools && !truth.cools && !truth.disables {
        c += NEEDLESS_COOLDOWN;
    }
    if truth.cools && !verdict.cools && !verdict.disables {
        c += MISSED_COOLDOWN;
    }
    c
}

/// The probability reason `r` needs to overrule verdict `v`, over the
/// consequences of every reason (`all[r]`, `all[v]`; see the module).
pub fn threshold(all: &[Consequence], r: usize, v: usize) -> f32 {
    if r == v {
        return FLOOR;
    }
    if all[r] == all[v] {
        // Nothing the run does would change, only the label (and the
        // reason's name may carry meaning no clause shows: R16.8 surfaces
        // an `unclassified` error as it is): not worth a guess.
        return 1.0;
    }
    let c = |truth: usize, verdict: usize| {
        if truth == verdict {
            0.0
        } else {
            cost(all[truth], all[verdict])
        }
    };
    let gain = c(r, v);
    let worst = (0..all.len())
        .filter(|&t| t != r)
        .map(|t| c(t, r) - c(t, v))
        .fold(0.0f32, f32::max);
    if worst <= 0.0 {
        FLOOR
    } else {
        (worst / (worst + gain)).max(FLOOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILS_OVER: Consequence = Consequence {
        stops: false,
        disables: false,
        cools: false,
        advances: false,
    };
    const COOLS: Consequence = Consequence {
        cools: true,
        ..FAILS_OVER
    };
    const DISABLES: Consequence = Consequence {
        disables: true,
        ..FAILS_OVER
    };
    const STOPS: Consequence = Consequence {
        stops: true,
        ..FAILS_OVER
    };

    #[test]
    fn an_unsafe_stop_costs_most_then_a_needless_disable() {
        assert_eq!(
            cost(COOLS, STOPS),
            WRONG_LABEL + UNSAFE_STOP + MISSED_COOLDOWN
        );
        assert_eq!(cost(FAILS_OVER, STOPS), WRONG_LABEL + UNSAFE_STOP);
        assert_eq!(cost(COOLS, DISABLES), WRONG_LABEL + NEEDLESS_DISABLE);
        assert_eq!(
            cost(STOPS, COOLS),
            WRONG_LABEL + NEEDLESS_FAILOVER + NEEDLESS_COOLDOWN
        );
        assert_eq!(cost(DISABLES, COOLS), WRONG_LABEL + MISSED_DISABLE);
        assert_eq!(cost(FAILS_OVER, COOLS), WRONG_LABEL + NEEDLESS_COOLDOWN);
        assert_eq!(cost(COOLS, FAILS_OVER), WRONG_LABEL + MISSED_COOLDOWN);
        assert_eq!(cost(STOPS, STOPS), WRONG_LABEL);
    }

    /// The four kinds of reason: what one must show to overrule another.
    #[test]
    fn thresholds_follow_the_costs() {
        // 0 rate_limit (cools), 1 billing (disables), 2 format (stops),
        // 3 unclassified (fails over).
        let all = [COOLS, DISABLES, STOPS, FAILS_OVER];
        // A stop overruling `unclassified` risks an unsafe stop (10.5 if
        // the truth is `unclassified` itself) to save a needless failover
        // (2.5).
        assert_eq!(threshold(&all, 2, 3), 10.5 / 13.0);
        // A failover reason overruling a stop (a 400 status rule): the
        // switch saves an unsafe stop and risks little, so the floor.
        assert_eq!(threshold(&all, 0, 2), FLOOR);
        // A disable overruling a cooldown risks a working key's hours.
        assert_eq!(threshold(&all, 1, 0), 5.5 / 7.0);
        // The same reason: the floor, never above it.
        assert_eq!(threshold(&all, 2, 2), FLOOR);
        for r in 0..all.len() {
            for v in 0..all.len() {
                let t = threshold(&all, r, v);
                assert!((FLOOR..1.0).contains(&t), "{r} over {v}: {t}");
            }
        }
        // Two reasons that do the same to a run: the model never relabels.
        assert_eq!(threshold(&[FAILS_OVER, FAILS_OVER], 0, 1), 1.0);
    }
}
