//! Game families for the tiny model's warm start (`model.warm_start = "families"`, issue 15).
//!
//! Trained on one seed file, the tiny designer reproduces that file and nothing else: the CPU
//! demo then shows one game four times, an agent that never wins and flat curves. A family is
//! one program whose parameters are drawn per variant; the warm start teaches the designer many
//! variants of it for every skill, so sampling the designer yields programs that differ in their
//! parameters (distinct code, and a real diff against a memory parent), and the parameters set
//! how hard the game is without the hint.
//!
//! The one family, the vault: dials `2..=HIGH`, one of them (`KEY`) opens it, one answer. The
//! first observation names the range but never the key; the hint the warm start teaches is the
//! `KEY = ...` line copied from the code. So a player without the hint wins about
//! 1/(HIGH - 1) of its plays (HIGH from 3 to 6: on the plateau down to hard), with the hint
//! always: hint-based regret and a learnable share, the two signals the SPADE designer reward
//! reads, with games a 4-layer model can write, hint and play.
//!
//! A 4-layer model takes every shortcut its pairs allow. Measured: when each (skill, theme,
//! range) came with one key, the hint writer and the agent memorised key by theme instead of
//! reading it (hints named the program's key for 7 of 34 programs, hint plays won no more than
//! plays without). So the hint writer and the agent also learn from play-only variants that
//! repeat one (skill, theme, range) with every key ([`PLAY_BASES`]): only the `KEY` line and
//! the hint tell them apart, and their agent pairs all carry the hint. The designer's own
//! variants are balanced over themes, ranges and keys, because it samples at 0.6, which
//! sharpens any imbalance into a mode.

use super::SeedEnv;
use crate::seeds;
use spade_sandbox::EnvKind;
use std::path::PathBuf;

/// The families `model.warm_start = "families"` trains on (one so far).
pub const FAMILIES: [&str; 1] = ["vault"];

/// Epochs of a family warm start before its criterion is first checked. A family yields dozens
/// of designer pairs per epoch (every variant is one), against the four copies of one file of
/// the seed warm start, so far fewer passes teach the program; 7 epochs left the designer
/// writing broken code (0/12 accepted, measured), 12 did on one kernel set and did not on
/// another (issue 35), so training goes on until the criterion is met, up to [`MAX_EPOCHS`].
pub const EPOCHS: usize = 12;

/// The bound of a family warm start (see `warmstart`'s module doc).
pub const MAX_EPOCHS: usize = 24;

/// Variants per game skill the designer learns to write (and the hint writer and agent too).
pub const PER_SKILL: usize = 8;

/// (theme, range) draws per game skill that the hint writer and the agent learn with every key
/// (with the demo's `hint.code_chars = 120` their pairs are a sixth of a designer pair's
/// length).
pub const PLAY_BASES: usize = 3;

/// Themes the vault is named after (the part of the code that varies most).
const HALLS: [&str; 8] = [
    "amber", "cedar", "cobalt", "ivory", "jade", "onyx", "scarlet", "violet",
];

/// One vault: the parameters a variant draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vault {
    pub hall: &'static str,
    /// Dials are numbered 2..=high (1 is a probe action of the validator, so it never opens).
    pub high: u32,
    pub key: u32,
}

impl Vault {
    /// The `v`-th of a balanced set for skill number `s`: every 8 consecutive `v` take each
    /// theme once and each range twice, and the keys cycle through each range.
    pub fn balanced(s: usize, v: usize) -> Self {
        let high = 3 + (v % 4) as u32;
        let key = 2 + ((v / 4 + s) % (high as usize - 1)) as u32;
        Self {
            hall: HALLS[(v + 3 * s) % HALLS.len()],
            high,
            key,
        }
    }

    /// Draws a vault from `seed`: `high` in 3..=6, `key` in 2..=high.
    pub fn draw(seed: u64) -> Self {
        let hall = HALLS[(seeds::derive(seed, &[1]) % HALLS.len() as u64) as usize];
        let high = 3 + (seeds::derive(seed, &[2]) % 4) as u32;
        let key = 2 + (seeds::derive(seed, &[3]) % u64::from(high - 1)) as u32;
        Self { hall, high, key }
    }

    /// The program. Everything but the docstring's skill and the three parameter lines is the
    /// same for every variant, so the designer's choices are those lines.
    pub fn code(&self, skill: &str) -> String {
        let Vault { hall, high, key } = *self;
        format!(
            r#""""Skill: {skill}. Find the dial that opens the vault."""

HALL = "{hall}"
HIGH = {high}
KEY = {key}


class VaultEnv:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = 1

    def reset(self, seed=None):
        return "The " + HALL + " vault has dials 2 to " + str(HIGH) + ". One opens it. Which one? Answer \\boxed{{n}}.", {{}}

    def step(self, action):
        guess = action.rsplit("{{", 1)[-1].split("}}")[0].strip()
        if guess == str(KEY):
            return "The vault opens.", 1.0, True, False, {{}}
        return "It stays shut. It was dial " + str(KEY) + ".", 0.0, False, True, {{}}

    def solution(self):
        return "\\boxed{{" + str(KEY) + "}}"

    def close(self):
        pass
"#
        )
    }

    /// The privileged hint the warm start teaches for this vault: the code's `KEY` line.
    pub fn hint(&self) -> String {
        format!("KEY = {} opens the vault.", self.key)
    }

    /// Reads a vault's parameters back from a program (None when it is not a vault, or a line
    /// is missing or malformed): what a test or a report uses to say which variant the
    /// designer wrote.
    pub fn parse(code: &str) -> Option<(String, u32, u32)> {
        let value = |name: &str| {
            code.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(" = "))
                .map(str::trim)
        };
        let hall = value("HALL")?.trim_matches('"').to_string();
        let high = value("HIGH")?.parse().ok()?;
        let key = value("KEY")?.parse().ok()?;
        Some((hall, high, key))
    }
}

/// The variants a family warm start trains on, as seed environments (their hint is the
/// family's, not the docstring): for each game skill, `per_skill` balanced vaults the designer
/// learns to write, then `play_bases` (theme, range) draws from `seed`, each with every key,
/// for the hint writer and the agent with the hint only.
pub fn variants(
    family: &str,
    seed: u64,
    per_skill: usize,
    play_bases: usize,
) -> Result<Vec<SeedEnv>, String> {
    if !FAMILIES.contains(&family) {
        return Err(format!(
            "unknown game family {family:?} (known: {})",
            FAMILIES.join(", ")
        ));
    }
    let mut out = Vec::new();
    for (s, skill) in spade::skills::SKILLS
        .iter()
        .filter(|s| s.kind == spade::EnvKind::Game)
        .enumerate()
    {
        let mut vaults: Vec<(Vault, bool)> = (0..per_skill)
            .map(|v| (Vault::balanced(s, v), true))
            .collect();
        for b in 0..play_bases {
            let base = Vault::draw(seeds::derive(seed, &[0xFA11, s as u64, b as u64]));
            vaults.extend((2..=base.high).map(|key| (Vault { key, ..base }, false)));
        }
        for (v, (vault, designer)) in vaults.into_iter().enumerate() {
            out.push(SeedEnv {
                path: PathBuf::from(format!("families/{family}/{}-{v}.py", skill.slug)),
                skill: skill.name.to_string(),
                kind: EnvKind::Game,
                doc: format!("Skill: {}. Find the dial that opens the vault.", skill.name),
                hint: vault.hint(),
                code: vault.code(skill.name),
                designer,
                no_hint_plays: designer,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_cover_every_game_skill_and_differ_in_code() {
        let v = variants("vault", 0, PER_SKILL, PLAY_BASES).expect("known family");
        assert_eq!(v.iter().filter(|s| s.designer).count(), 6 * PER_SKILL);
        // A play-only base comes with every key of its range, and nothing else tells them
        // apart: the hint writer and the agent must read the key.
        let play: Vec<&SeedEnv> = v.iter().filter(|s| !s.designer).collect();
        assert!(play.iter().all(|s| !s.no_hint_plays));
        let mut by_base: std::collections::BTreeMap<(String, String, u32), Vec<u32>> =
            Default::default();
        for s in &play {
            let (hall, high, key) = Vault::parse(&s.code).expect("a vault");
            by_base
                .entry((s.skill.clone(), hall, high))
                .or_default()
                .push(key);
        }
        for ((_, _, high), keys) in by_base {
            assert_eq!(keys.len() as u32 % (high - 1), 0, "{high}: {keys:?}");
        }
        let distinct: std::collections::BTreeSet<&str> =
            v.iter().map(|s| s.code.as_str()).collect();
        assert!(
            distinct.len() >= v.len() * 3 / 4,
            "{} distinct",
            distinct.len()
        );
        for s in &v {
            let (hall, high, key) = Vault::parse(&s.code).expect("a vault reads back");
            assert!(HALLS.contains(&hall.as_str()));
            assert!(
                (3..=6).contains(&high) && (2..=high).contains(&key),
                "{high} {key}"
            );
            assert_eq!(s.hint, format!("KEY = {key} opens the vault."));
            assert!(s.code.starts_with(&format!("\"\"\"Skill: {}.", s.skill)));
        }
        // Every difficulty appears: the designer's choice matters.
        let highs: std::collections::BTreeSet<u32> = v
            .iter()
            .filter_map(|s| Vault::parse(&s.code))
            .map(|p| p.1)
            .collect();
        assert_eq!(highs.into_iter().collect::<Vec<_>>(), vec![3, 4, 5, 6]);
        assert!(variants("maze", 0, 1, 0).is_err_and(|e| e.contains("vault")));
    }

    #[test]
    fn the_designers_variants_are_balanced() {
        for s in 0..6 {
            let v: Vec<Vault> = (0..PER_SKILL).map(|i| Vault::balanced(s, i)).collect();
            let halls: std::collections::BTreeSet<&str> = v.iter().map(|x| x.hall).collect();
            assert_eq!(halls.len(), PER_SKILL.min(HALLS.len()));
            for high in 3..=6 {
                assert_eq!(v.iter().filter(|x| x.high == high).count(), PER_SKILL / 4);
            }
            assert!(v.iter().all(|x| (2..=x.high).contains(&x.key)));
        }
        // Over the skills, every key of every range is taught.
        let pairs: std::collections::BTreeSet<(u32, u32)> = (0..6)
            .flat_map(|s| (0..PER_SKILL).map(move |i| Vault::balanced(s, i)))
            .map(|x| (x.high, x.key))
            .collect();
        assert_eq!(pairs.len(), 2 + 3 + 4 + 5);
    }

    #[test]
    fn parse_refuses_what_is_not_a_vault() {
        assert_eq!(Vault::parse("x = 1"), None);
        assert_eq!(Vault::parse("HALL = \"a\"\nHIGH = 4\nKEY = four"), None);
    }
}
