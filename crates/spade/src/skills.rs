//! The twelve skills of the spec (six game skills, six tool-use skills), their descriptions for
//! the designer prompt, and which of them are active at each regeneration.
//!
//! Why a rotation: the designer writes 8 environments for each of 3 active game skills per
//! regeneration (spec, "One training step", step 1), so the six game skills alternate in halves;
//! all six tool-use skills are active every time. The two-skill curriculum ablation keeps the
//! same two game skills throughout, Mathematical Reasoning and Pattern Recognition, which share
//! the regeneration's environments (24 = 2 x 12), as the reference's ablation does
//! (`cmd/ablations/train_two_skill_30b.sh`).

use crate::EnvKind;

/// One skill the designer writes environments for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skill {
    /// Display name, as in the spec and in reports (`EnvironmentRecord::skill`).
    pub name: &'static str,
    /// snake_case identifier (the seed library's directory names).
    pub slug: &'static str,
    pub kind: EnvKind,
    /// One paragraph for the designer prompt: what an environment of this skill exercises.
    pub description: &'static str,
}

/// All skills, games first, in the spec's order.
pub const SKILLS: [Skill; 12] = [
    Skill {
        name: "Mathematical Reasoning",
        slug: "mathematical_reasoning",
        kind: EnvKind::Game,
        description: "Problems whose answer follows from calculation and proof-like reasoning: \
            arithmetic with constraints, number theory, combinatorics, algebra, probability or \
            geometry. The player must derive an exact value or object, and the environment \
            verifies it exactly (or up to a stated tolerance), so guessing does not pay.",
    },
    Skill {
        name: "Logical Deduction",
        slug: "logical_deduction",
        kind: EnvKind::Game,
        description: "Puzzles solved by chaining inferences from stated facts and rules: \
            knights and knaves, seating or ordering constraints, grid logic, syllogisms, \
            elimination. Every clue matters, the solution is unique, and the environment can \
            check a proposed assignment against all constraints.",
    },
    Skill {
        name: "Spatial Reasoning",
        slug: "spatial_reasoning",
        kind: EnvKind::Game,
        description: "Tasks about positions, directions, shapes and movement in a grid or \
            space: mazes, robot paths, rotations and reflections, visibility, packing. The \
            player has to track a state that changes with each move, and the environment \
            describes it in text precisely enough to reason about.",
    },
    Skill {
        name: "Pattern Recognition",
        slug: "pattern_recognition",
        kind: EnvKind::Game,
        description: "Inferring a hidden rule from examples and applying it: sequences, \
            string transformations, cellular rules, codes and ciphers, analogies. The rule is \
            never stated; the examples determine it, and the environment asks for a new \
            instance that only the right rule produces.",
    },
    Skill {
        name: "Optimization",
        slug: "optimization",
        kind: EnvKind::Game,
        description: "Choosing the best among many feasible options under constraints: \
            knapsack and scheduling, shortest or cheapest routes, coin change, assignment, \
            resource allocation. The environment knows the optimum and accepts only an \
            optimal answer, so a merely feasible one does not win.",
    },
    Skill {
        name: "Causal Inference",
        slug: "causal_inference",
        kind: EnvKind::Game,
        description: "Working out what causes what from observations and interventions: \
            hidden switches and lamps, faulty components, mechanisms with confounders, \
            counterfactual questions. Multi-turn games may let the player probe the system \
            before answering; correlation alone must not be enough.",
    },
    Skill {
        name: "API Orchestration",
        slug: "api_orchestration",
        kind: EnvKind::ToolUse,
        description: "Combining several tools in the right order, passing the output of one \
            call as the input of the next (identifiers, tokens, computed values), to reach a \
            goal no single call achieves.",
    },
    Skill {
        name: "Data Retrieval",
        slug: "data_retrieval",
        kind: EnvKind::ToolUse,
        description: "Finding specific records in a larger state through search, filter and \
            lookup tools, then acting on exactly the right ones; near-misses (similar names, \
            stale entries) must be told apart.",
    },
    Skill {
        name: "State Modification",
        slug: "state_modification",
        kind: EnvKind::ToolUse,
        description: "Changing the state precisely as instructed: creating, updating, moving \
            and deleting entities while keeping invariants (balances, capacities, references) \
            intact and leaving everything else untouched.",
    },
    Skill {
        name: "Error Recovery",
        slug: "error_recovery",
        kind: EnvKind::ToolUse,
        description: "Tasks in which some calls fail in informative ways (missing \
            permissions, invalid arguments, unavailable resources); the player must read the \
            error, fix the cause and retry instead of repeating or giving up.",
    },
    Skill {
        name: "Tool Selection",
        slug: "tool_selection",
        kind: EnvKind::ToolUse,
        description: "Many tools with overlapping purposes, only some of them right for each \
            instruction; the player must pick the tool whose effect matches the goal and \
            avoid ones with side effects that break a success criterion.",
    },
    Skill {
        name: "Multi-Step Workflows",
        slug: "multi_step_workflows",
        kind: EnvKind::ToolUse,
        description: "Longer procedures revealed one instruction at a time, each building on \
            the state the previous ones left, so early mistakes surface later and the whole \
            workflow must be complete for the reward.",
    },
];

/// Skills of one kind, in the spec's order.
pub fn skills_of(kind: EnvKind) -> impl Iterator<Item = &'static Skill> {
    SKILLS.iter().filter(move |s| s.kind == kind)
}

/// A skill by display name or slug (case-insensitive).
pub fn find(name: &str) -> Option<&'static Skill> {
    SKILLS
        .iter()
        .find(|s| s.name.eq_ignore_ascii_case(name) || s.slug.eq_ignore_ascii_case(name))
}

/// The game skills of the two-skill curriculum ablation (reference:
/// `cmd/ablations/train_two_skill_30b.sh`, `SPADE_SKILLS="Mathematical_Reasoning
/// Pattern_Recognition"`).
pub const TWO_SKILL_CURRICULUM: [&str; 2] = ["mathematical_reasoning", "pattern_recognition"];

/// The skills active at regeneration number `regeneration` (0, 1, 2, ...): `active` of the
/// kind's skills, rotating by `active` each time, wrapping around. With 3 of 6 game skills
/// this alternates the first and the second half. `two_skill` (games only) pins the two
/// skills of [`TWO_SKILL_CURRICULUM`].
pub fn active_skills(
    kind: EnvKind,
    regeneration: u64,
    active: usize,
    two_skill: bool,
) -> Vec<&'static Skill> {
    if two_skill && kind == EnvKind::Game {
        return TWO_SKILL_CURRICULUM
            .iter()
            .filter_map(|s| find(s))
            .collect();
    }
    let all: Vec<&Skill> = skills_of(kind).collect();
    let n = all.len();
    let active = active.clamp(1, n);
    let start = ((regeneration % n as u64) as usize * active) % n;
    (0..active).map(|i| all[(start + i) % n]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_six_skills_of_each_kind_with_unique_names() {
        assert_eq!(skills_of(EnvKind::Game).count(), 6);
        assert_eq!(skills_of(EnvKind::ToolUse).count(), 6);
        for (i, a) in SKILLS.iter().enumerate() {
            assert!(a.description.len() > 100, "{} needs a paragraph", a.name);
            for b in &SKILLS[i + 1..] {
                assert_ne!(a.slug, b.slug);
            }
        }
        assert_eq!(
            find("logical deduction").map(|s| s.slug),
            Some("logical_deduction")
        );
        assert_eq!(
            find("Error_Recovery").map(|s| s.kind),
            Some(EnvKind::ToolUse)
        );
        assert!(find("juggling").is_none());
    }

    #[test]
    fn three_of_six_game_skills_rotate_and_every_skill_comes_up() {
        let names = |r| -> Vec<&str> {
            active_skills(EnvKind::Game, r, 3, false)
                .iter()
                .map(|s| s.slug)
                .collect()
        };
        assert_eq!(
            names(0),
            [
                "mathematical_reasoning",
                "logical_deduction",
                "spatial_reasoning"
            ]
        );
        assert_eq!(
            names(1),
            ["pattern_recognition", "optimization", "causal_inference"]
        );
        assert_eq!(names(2), names(0));
        // 4 of 6 wraps around and still visits every skill within three regenerations.
        let mut seen: Vec<&str> = (0..3)
            .flat_map(|r| active_skills(EnvKind::Game, r, 4, false))
            .map(|s| s.slug)
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 6);
        assert_eq!(active_skills(EnvKind::ToolUse, 5, 6, true).len(), 6);
    }

    #[test]
    fn the_two_skill_curriculum_pins_two_game_skills() {
        for r in 0..4 {
            let s = active_skills(EnvKind::Game, r, 3, true);
            assert_eq!(s.len(), 2);
            assert_eq!(s[0].slug, "mathematical_reasoning");
            assert_eq!(s[1].slug, "pattern_recognition");
        }
    }
}
