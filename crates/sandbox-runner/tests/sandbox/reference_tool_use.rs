//! Tool use in the reference implementation's interface (`ToolUseBaseEnv`,
//! envs/python/spade_tooluse_base.py): what its designer prompt asks for loads as tool use, is
//! validated (its `solution()` text played call by call), and steps as the reference's base
//! class does, with every call of a reply run in order.

use super::{pool, quick};
use spade_sandbox::validate::Reason;
use spade_sandbox::{EnvKind, SandboxError, validate};

const MULTI: &str = include_str!("../fixtures/reference_tool_use/good_multi_turn.py");
const SINGLE: &str = include_str!("../fixtures/reference_tool_use/good_single_task.py");
const PRE_SATISFIED: &str =
    include_str!("../fixtures/reference_tool_use/criteria_pre_satisfied.py");
const UNSOLVABLE: &str = include_str!("../fixtures/reference_tool_use/unsolvable.py");

#[test]
fn reference_style_environments_are_accepted_and_their_solution_text_is_played_call_by_call() {
    let pool = pool();
    for (src, class, turns) in [
        // list_stock, order, report, answer.
        (MULTI, "WarehouseRestockEnv", 4),
        // list_suppliers, five quotes, answer.
        (SINGLE, "CheapestSupplierEnv", 7),
    ] {
        let r = validate(&pool, src, &quick());
        assert!(r.accepted, "{class}: {:#?}", r.rejection);
        assert_eq!(r.class_name.as_deref(), Some(class));
        assert_eq!(r.kind, Some(EnvKind::ToolUse));
        assert_eq!(r.max_turns, Some(10), "the reference's default turn limit");
        assert!(
            r.solution_turns.iter().all(|t| *t == turns),
            "{class}: {:?}",
            r.solution_turns
        );
    }
}

#[test]
fn the_references_broken_games_are_rejected_for_their_reason() {
    let pool = pool();
    for (src, want) in [
        (PRE_SATISFIED, Reason::CriteriaPreSatisfied),
        (UNSOLVABLE, Reason::Unsolvable),
    ] {
        let r = validate(&pool, src, &quick());
        let got = r.rejection.as_ref().map(|x| x.reason);
        assert!(!r.accepted && got == Some(want), "want {want:?}: {r:#?}");
    }
}

#[test]
fn a_reply_runs_every_call_in_order_and_instructions_are_revealed_as_they_are_met()
-> Result<(), SandboxError> {
    let pool = pool();
    let mut env = pool.load(MULTI, None, None)?;
    assert_eq!(env.kind, EnvKind::ToolUse);
    let first = env.reset(Some(3))?;
    // The native template reads the task and the schemas; the inline first observation has both.
    assert_eq!(
        first.info["task"],
        "Find out which item has the fewest units in stock."
    );
    let tools = first.info["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 4);
    assert!(first.obs.contains("\"name\": \"list_stock\"") && first.obs.contains("<answer>"));
    assert_eq!(env.criteria()?, [false, false, false]);

    // An answer before the work: not the end, and the feedback names the pending instruction.
    let early = env.step("<answer>done</answer>")?;
    assert!(!early.terminated && !early.truncated && early.reward == 0.0);
    assert!(early.obs.contains("instruction 1 of 3"), "{}", early.obs);
    // No call, no answer: a format error.
    let bad = env.step("I would list the stock.")?;
    assert_eq!(bad.reward, -0.1);
    // Two calls in one reply: both run, in order; the first completes instruction 1.
    let two = env.step(
        "<tool_call>{\"name\": \"list_stock\", \"arguments\": {}}</tool_call>\
         <tool_call>{\"name\": \"fly\", \"arguments\": {}}</tool_call>",
    )?;
    let results = two.info["tool_results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert!(
        results[0]
            .as_str()
            .is_some_and(|r| r.contains("Instruction 2 of 3: Order enough")),
        "{results:?}"
    );
    assert!(
        results[1]
            .as_str()
            .is_some_and(|r| r.starts_with("Unknown tool 'fly'. Available: list_stock")),
        "{results:?}"
    );
    assert_eq!(two.reward, 0.0);
    assert_eq!(env.criteria()?, [true, false, false]);
    // A call the tool's signature refuses is reported as its result, at no cost.
    let fail = env.step(
        "<tool_call>{\"name\": \"order\", \"arguments\": {\"colour\": \"red\"}}</tool_call>",
    )?;
    assert!(fail.obs.contains("Error calling order"), "{}", fail.obs);
    assert_eq!(fail.reward, 0.0);
    Ok(())
}

#[test]
fn the_solution_wins_and_running_out_of_turns_shows_it() -> Result<(), SandboxError> {
    let pool = pool();
    let mut env = pool.load(MULTI, None, Some(3))?;
    let t = env.play_solution(5, std::time::Duration::from_secs(20))?;
    // Three turns are not enough for four actions: truncated with the solution shown.
    let last = t.turns.last().expect("turns");
    assert!(last.result.truncated && last.result.reward == 0.0);
    assert!(
        last.result
            .obs
            .contains("Time up. Solution:\n1. list_stock()")
    );
    let after = env.step("<answer>done</answer>")?;
    assert_eq!(after.obs, "The episode is over.");
    let mut env = pool.load(MULTI, None, None)?;
    let t = env.play_solution(5, std::time::Duration::from_secs(20))?;
    let last = t.turns.last().expect("turns");
    assert!(
        last.result.terminated && last.result.reward == 1.0,
        "{t:#?}"
    );
    assert_eq!(last.action, "<answer>done</answer>");
    assert!(
        t.turns[1]
            .action
            .starts_with("<tool_call>{\"name\": \"order\"")
    );
    Ok(())
}
