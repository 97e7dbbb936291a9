//! Pools on disk: a written pool reads back, a malformed one reports each problem and loads the
//! rest, a plain directory keeps its ids, a run directory gives its scored environments.

use super::*;
use spade::report::EnvironmentRecord;

const GAME: &str = "\"\"\"Skill: Logical Deduction. Mechanic: x.\"\"\"\nclass A:\n    pass\n";

fn entry(id: &str, code: &str) -> PoolEntry {
    PoolEntry {
        id: id.into(),
        kind: EnvKind::Game,
        skill: "Logical Deduction".into(),
        code_file: None,
        code: Some(code.into()),
        hint: Some("h".into()),
        win_rate_hint: Some(1.0),
        win_rate_no_hint: Some(0.5),
        regret: Some(0.5),
        designer_reward: Some(0.2),
        reward_levels: Some(2),
        parent_id: None,
        run: Some("r".into()),
        step: Some(0),
        status: EnvStatus::Accepted,
        reviews: vec![],
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

#[test]
fn a_written_pool_reads_back_with_its_skills_and_code() -> Res {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("pool");
    let mut w = PoolWriter::create(&dir, Card::default())?;
    w.add(entry("s0/game:1", GAME))?;
    w.add(entry("s0-game-2", GAME))?;
    assert!(w.add(entry("s0-game-2", GAME)).is_err(), "duplicate id");
    let card = w.finish()?;
    assert_eq!(card.counts.values().sum::<usize>(), 2);
    assert!(dir.join("s0_game_1.py").is_file());
    assert!(std::fs::read_to_string(dir.join(POOL_CARD))?.contains("environments: 2"));
    let got = read_pool(&dir)?;
    assert!(got.problems.is_empty(), "{:?}", got.problems);
    let ids: Vec<&str> = got.envs.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["s0/game:1", "s0-game-2"]);
    assert_eq!(got.envs[0].code, GAME);
    assert_eq!(got.envs[0].kind, Some(EnvKind::Game));
    // The JSONL alone (its code files beside it) is a pool too.
    assert_eq!(read_pool(&dir.join(POOL_JSONL))?.envs.len(), 2);
    assert!(
        PoolWriter::create(&dir, Card::default()).is_err(),
        "never into a non-empty directory"
    );
    Ok(())
}

#[test]
fn a_malformed_pool_names_each_problem_and_loads_the_rest() -> Res {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    std::fs::write(dir.join("ok.py"), GAME)?;
    let mut missing = entry("missing", "");
    missing.code = None;
    missing.code_file = Some("gone.py".into());
    let mut ok = entry("ok", "");
    ok.code = None;
    ok.code_file = Some("ok.py".into());
    let lines = [
        serde_json::to_string(&ok)?,
        serde_json::to_string(&missing)?,
        "[1, 2]".into(),
        serde_json::to_string(&ok)?,
    ];
    std::fs::write(dir.join(POOL_JSONL), lines.join("\n"))?;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("secret.py"), "x = 1\n")?;
    std::os::unix::fs::symlink(outside.path().join("secret.py"), dir.join("link.py"))?;
    let mut link = entry("link", "");
    link.code = None;
    link.code_file = Some("link.py".into());
    let mut text = lines.join("\n");
    text.push('\n');
    text.push_str(&serde_json::to_string(&link)?);
    std::fs::write(dir.join(POOL_JSONL), text)?;
    let got = read_pool(dir)?;
    assert_eq!(got.envs.len(), 1);
    let msgs: Vec<String> = got.problems.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert!(
        msgs[3].contains("pool.jsonl:5: link: `code_file` \"link.py\"")
            && msgs[3].contains("resolves outside the pool directory"),
        "{msgs:?}"
    );
    assert!(
        msgs[0].contains("pool.jsonl:2: missing: `code_file` \"gone.py\": cannot read"),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("pool.jsonl:3: expected one JSON object"))
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("pool.jsonl:4: duplicate id \"ok\""))
    );
    Ok(())
}

#[test]
fn a_plain_directory_needs_the_skill_docstring_and_keeps_the_old_ids() -> Res {
    let tmp = tempfile::tempdir()?;
    std::fs::create_dir(tmp.path().join("games"))?;
    std::fs::write(tmp.path().join("games/a.py"), GAME)?;
    std::fs::write(tmp.path().join("games/b.py"), "class B:\n    pass\n")?;
    std::fs::write(tmp.path().join("games/c.py"), GAME)?;
    let got = read_pool(tmp.path())?;
    let ids: Vec<&str> = got.envs.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["fixed-0", "fixed-2"]);
    assert_eq!(got.envs[0].kind, None, "the sandbox detects the kind");
    assert_eq!(got.problems.len(), 1);
    let m = got.problems[0].to_string();
    assert!(
        m.contains("games/b.py: line 1: expected a docstring"),
        "{m}"
    );
    Ok(())
}

#[test]
fn a_run_directory_gives_its_environments_with_scores_and_broken_status() -> Res {
    use crate::sink::{FileSink, Sink};
    let tmp = tempfile::tempdir()?;
    let record = |id: &str| EnvironmentRecord {
        hint: Some("h".into()),
        ..EnvironmentRecord::new(
            id,
            0,
            "Logical Deduction",
            EnvKind::Game,
            EnvStatus::Accepted,
            GAME,
        )
    };
    let msgs = vec![
        Message::RunStarted {
            config: spade::config::RunConfig::tiny_cpu_demo().to_json(),
            code_version: "t".into(),
            total_steps: 1,
        },
        Message::Environment {
            record: record("a"),
        },
        Message::Environment {
            record: record("b"),
        },
        Message::EnvironmentScored {
            env_id: "a".into(),
            step: 4,
            regret: 0.25,
            win_rate_hint: 0.75,
            win_rate_no_hint: 0.5,
            designer_reward: 0.1,
            reward_levels: 2,
        },
        Message::EnvironmentBroken {
            env_id: "b".into(),
            step: 1,
            seed: 3,
            reason: "reward_out_of_range".into(),
            message: "m".into(),
        },
    ];
    let envs: Vec<Envelope> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, m)| Envelope::new("r".to_string(), i as u64, m))
        .collect();
    FileSink::open(tmp.path())?.deliver(&envs)?;
    let got = run_dir_environments(tmp.path(), "r")?;
    assert_eq!(got.entries.len(), 2);
    assert_eq!(got.entries[0].regret, Some(0.25));
    assert_eq!(got.entries[0].win_rate_no_hint, Some(0.5));
    assert_eq!(got.entries[1].status, EnvStatus::BrokenInPlay);
    let model = pool::model_of_config(got.config.as_ref().unwrap_or(&serde_json::Value::Null));
    assert_eq!(model, "preset tiny");
    Ok(())
}
