//! Designer rewards (spec, "One training step", item 7): hint-based regret and the difficulty
//! plateau, blended.

/// Regret is normalised by this and clipped to [0, 1] (spec 7: `clip(regret / 0.15, 0, 1)`).
pub const REGRET_SCALE: f64 = 0.15;
/// Weight of normalised regret in the blend (spec 7: `0.4 * regret_norm + 0.6 * plateau`).
pub const REGRET_WEIGHT: f64 = 0.4;
/// Weight of the plateau term in the blend (spec 7).
pub const PLATEAU_WEIGHT: f64 = 0.6;
/// The plateau is 1 on [0.4, 0.6] (spec 7).
pub const PLATEAU_LOW: f64 = 0.4;
pub const PLATEAU_HIGH: f64 = 0.6;
/// ... and falls linearly to 0 over this width on each side (spec 7: ramp 0.25).
pub const PLATEAU_RAMP: f64 = 0.25;

/// `mean(hint returns) - mean(no-hint returns)`; `None` when either arm has no plays.
pub fn regret(hint_returns: &[f64], no_hint_returns: &[f64]) -> Option<f64> {
    Some(mean(hint_returns)? - mean(no_hint_returns)?)
}

/// `clip(regret / 0.15, 0, 1)`.
pub fn regret_norm(regret: f64) -> f64 {
    (regret / REGRET_SCALE).clamp(0.0, 1.0)
}

/// 1 for a no-hint win rate in [0.4, 0.6], falling linearly to 0 at 0.15 and 0.85.
pub fn plateau(win_rate: f64) -> f64 {
    let distance = if win_rate < PLATEAU_LOW {
        PLATEAU_LOW - win_rate
    } else if win_rate > PLATEAU_HIGH {
        win_rate - PLATEAU_HIGH
    } else {
        0.0
    };
    (1.0 - distance / PLATEAU_RAMP).clamp(0.0, 1.0)
}

/// `0.4 * regret_norm + 0.6 * plateau(w)`.
pub fn designer_reward(regret: f64, no_hint_win_rate: f64) -> f64 {
    REGRET_WEIGHT * regret_norm(regret) + PLATEAU_WEIGHT * plateau(no_hint_win_rate)
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn regret_matches_the_worked_examples_of_the_spec() {
        for (hint, no_hint, want_regret, want_norm) in [
            (1.00, 0.00, 1.00, 1.0),
            (0.65, 0.30, 0.35, 1.0),
            (0.40, 0.34, 0.06, 0.4),
        ] {
            let r = regret(&[hint], &[no_hint]).expect("both arms played");
            assert!(close(r, want_regret), "regret {r} != {want_regret}");
            assert!(close(regret_norm(r), want_norm), "norm of {r}");
        }
        assert_eq!(regret(&[], &[0.0]), None);
        assert_eq!(regret_norm(-0.3), 0.0);
    }

    #[test]
    fn plateau_matches_the_worked_examples_of_the_spec() {
        for (w, want) in [
            (0.5, 1.0),
            (0.275, 0.5),
            (0.1, 0.0),
            (0.725, 0.5),
            (0.15, 0.0),
            (0.85, 0.0),
            (0.4, 1.0),
            (0.6, 1.0),
        ] {
            assert!(
                close(plateau(w), want),
                "plateau({w}) = {} != {want}",
                plateau(w)
            );
        }
        assert!(close(designer_reward(0.35, 0.5), 1.0));
        assert!(close(designer_reward(0.0, 0.1), 0.0));
    }
}
