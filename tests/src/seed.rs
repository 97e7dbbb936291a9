//! Rows the browser tests seed through `spade-db` (the worker's ingestion path), into the
//! test's own database: teams, runs with curves, logs, checkpoints, benchmark scores and
//! environments, as a worker would have reported them. Their configurations are ones a worker
//! can read, so a scheduler that picks a seeded run up runs it instead of failing on it.

use spade_db::evaluations::NewResult;
use spade_db::ingest::{self, NewEnvironment, NewPlay};
use spade_db::types::{EnvKind, EnvStatus};
use spade_db::{Pool, RunScope, TeamScope, runs, teams};

const PARENT_CODE: &str = "class CoinEnv:\n    \"\"\"Pay an amount with the fewest coins.\"\"\"\n\n    def reset(self, seed=None):\n        self.amount = 7\n        return f\"Pay {self.amount}\", {}\n";
const CHILD_CODE: &str = "class CoinEnv:\n    \"\"\"Pay an amount with the fewest coins.\"\"\"\n\n    def reset(self, seed=None):\n        self.amount = 11  # harder than its parent\n        return f\"Pay {self.amount} with coins 1, 5, 7\", {}\n";

/// A team named `team` owned by `owner` with one project named `project`, created as the API
/// creates them; returns the owner's scope in the team and the project's id.
pub async fn team_and_project(
    db: &Pool,
    owner: i64,
    team: &str,
    project: &str,
) -> anyhow::Result<(TeamScope, i64)> {
    let t = teams::create_team(db, owner, team).await?;
    let scope = TeamScope::for_member(db, owner, t.id).await?;
    let p = teams::create_project(db, &scope, project).await?;
    Ok((scope, p.id))
}

/// A queued run named `name` in `project_id` with `config` and `seed`; returns the scope its
/// worker reports in (as `owner`).
pub async fn run_in(
    db: &Pool,
    team_scope: &TeamScope,
    owner: i64,
    project_id: i64,
    name: &str,
    config: &serde_json::Value,
    seed: i64,
) -> anyhow::Result<RunScope> {
    run_on(
        db, team_scope, owner, project_id, name, config, seed, "local",
    )
    .await
}

/// [`run_in`] for the executor `executor` (`local` or `ray`).
#[allow(clippy::too_many_arguments)]
pub async fn run_on(
    db: &Pool,
    team_scope: &TeamScope,
    owner: i64,
    project_id: i64,
    name: &str,
    config: &serde_json::Value,
    seed: i64,
    executor: &str,
) -> anyhow::Result<RunScope> {
    let run = runs::create(
        db,
        team_scope,
        &runs::NewRun {
            project_id,
            name,
            config,
            executor,
            seed,
            code_version: "e2e",
        },
    )
    .await?;
    Ok(RunScope::for_member(db, owner, run.id).await?)
}

/// Makes the account `email` a member of the team with `role` the way the product does: an
/// invitation it accepts (issue 36). The database compares hashes of invitation codes; any 32
/// bytes stand for one here.
pub async fn join(
    db: &Pool,
    team_scope: &TeamScope,
    email: &str,
    role: spade_db::types::Role,
) -> anyhow::Result<()> {
    let code_hash = [7u8; 32];
    let invited = teams::invitations::invite(db, team_scope, email, role, &code_hash).await?;
    let teams::invitations::Invited::Pending(invitation) = invited else {
        anyhow::bail!("inviting {email}: {invited:?}");
    };
    teams::invitations::answer(
        db,
        crate::user_id(db, email).await?,
        invitation.id,
        teams::invitations::Answer::Accept,
        &code_hash,
    )
    .await?;
    Ok(())
}

/// A queued run in `project` with `config`, reported started, with five curves.
pub async fn seeded_run(
    db: &Pool,
    team_scope: &TeamScope,
    user_id: i64,
    project_id: i64,
    name: &str,
    config: &serde_json::Value,
    offset: f64,
) -> anyhow::Result<(i64, ingest::Batch)> {
    let scope = run_in(db, team_scope, user_id, project_id, name, config, 7).await?;
    let mut b = ingest::begin(db, &scope).await?;
    b.run_started("e2e", 40).await?;
    let names: Vec<String> = [
        "regret_mean",
        "learnable_share",
        "acceptance_rate",
        "r_hint",
        "r_no_hint",
    ]
    .map(String::from)
    .to_vec();
    for step in 0..24i64 {
        let t = step as f64;
        let values = [
            offset + 0.05 + 0.01 * t + 0.03 * (t * 1.3).sin(),
            (offset + 0.1 + 0.01 * t).min(0.33),
            0.6 + 0.01 * t - offset,
            0.4 + 0.012 * t,
            0.35 + 0.006 * t + offset,
        ];
        b.metrics(step, 12.0 * t, &names, &values).await?;
    }
    // Held-out results of three checkpoints (0 = the base model both runs start from), as
    // evaluation jobs report them: per task and the aggregate `all`.
    for (step, gain) in [(0i64, 0.0), (12, 0.5), (24, 1.0)] {
        b.checkpoint(step, &format!("/ckpt/{name}/step-{step}"), 1 << 20)
            .await?;
        let tasks = [
            ("aiw", 0.10),
            ("zebra_puzzles", 0.05),
            ("propositional_logic", 0.20),
        ];
        let mut sum = 0.0;
        for (task, base) in tasks {
            let score = if step == 0 {
                base
            } else {
                base + gain * (0.1 + offset)
            };
            sum += score;
            b.benchmark(Some(step), "rg-logic", &result(task, score, 20, Some(0.06)))
                .await?;
        }
        b.benchmark(
            Some(step),
            "rg-logic",
            &result("all", sum / 3.0, 60, Some(0.035)),
        )
        .await?;
        // A second games suite, Avg@4 without a per-task split: the paper's games average.
        let pass = 0.15 + gain * (0.2 + offset);
        b.benchmark(
            Some(step),
            "humaneval",
            &result("all", pass, 164, Some(0.028)).with_samples(4),
        )
        .await?;
    }
    Ok((scope.run_id(), b))
}

/// A team and project for `user_id` with two runs that differ in two settings; the newer one
/// ("tiny-demo") also has progress, logs and two environments (one derived from the other), as
/// a worker would have reported them; a third repeats tiny-demo's setting with another seed.
/// Returns the ids of (tiny-demo, tiny-demo-b, tiny-demo-seed9).
pub async fn dashboard_runs(db: &Pool, user_id: i64, tag: &str) -> anyhow::Result<(i64, i64, i64)> {
    let team = teams::create_team(db, user_id, &format!("lab-{tag}")).await?;
    let team_scope = TeamScope::for_member(db, user_id, team.id).await?;
    let project = teams::create_project(db, &team_scope, "coin games").await?;
    // Configurations as the server stores them, which a worker can read (issue 35: a stored
    // `{"preset": ...}` answered every worker of these runs 500).
    let config_b = demo_config(8, 0.3)?;
    let (run_b, b) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo-b",
        &config_b,
        0.04,
    )
    .await?;
    b.commit().await?;
    // The same setting as "tiny-demo" with another seed: the compare view averages the two.
    let config_c = demo_config(9, 0.28)?;
    let (run_c, c) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo-seed9",
        &config_c,
        0.02,
    )
    .await?;
    c.commit().await?;
    let config = demo_config(7, 0.28)?;
    let (run_id, mut b) = seeded_run(
        db,
        &team_scope,
        user_id,
        project.id,
        "tiny-demo",
        &config,
        0.0,
    )
    .await?;

    b.progress(24, 40, "playing").await?;
    b.log("info", "step 23: 24 environments, 19 accepted")
        .await?;
    b.log("warn", "environment e-23 rejected: not_solvable")
        .await?;
    for (env_id, code, parent, status) in [
        ("m-1", PARENT_CODE, None, EnvStatus::Accepted),
        ("e-24", CHILD_CODE, Some("m-1"), EnvStatus::Accepted),
    ] {
        b.environment(&NewEnvironment {
            env_id,
            step: if parent.is_some() { 20 } else { 4 },
            skill: "Optimization",
            kind: EnvKind::Game,
            status,
            rejection_reason: None,
            rejection_message: None,
            code,
            hint: Some("Use the largest coin first, then check whether 5 + 5 + 1 beats it."),
            parent_env_id: parent,
            regret: Some(0.35),
            win_rate_hint: Some(0.65),
            win_rate_no_hint: Some(0.3),
            designer_reward: Some(0.83),
            reward_levels: Some(2),
            attempts: 1,
        })
        .await?;
    }
    b.plays(&[NewPlay {
        env_id: "e-24",
        step: 20,
        with_hint: true,
        episode_return: 1.0,
        won: true,
        turns: 2,
        transcript: serde_json::json!([
            {"role": "user", "content": "Pay 11 with coins 1, 5, 7"},
            {"role": "assistant", "content": "7 + 1 + 1 + 1 + 1 uses five coins; 5 +5 + 1 uses three. \\boxed{3}"}
        ]),
    }])
    .await?;
    b.commit().await?;
    Ok((run_id, run_b, run_c))
}

/// The CPU demo's run configuration with `run.seed` and `grpo.clip_high` set, as the server
/// stores a run's configuration (every default filled in). Issue 35: runs seeded with
/// `{"preset": "tiny", ...}` answered every worker that picked them up 500.
pub fn demo_config(seed: u64, clip_high: f64) -> anyhow::Result<serde_json::Value> {
    let mut cfg = spade::config::RunConfig::from_toml_str(spade::config::DEMO_TOML)?;
    cfg.run.seed = seed;
    cfg.grpo.clip_high = clip_high;
    Ok(serde_json::to_value(&cfg)?)
}

fn result(task: &str, score: f64, n: i32, stderr: Option<f64>) -> NewResult {
    NewResult {
        task: task.to_owned(),
        score,
        n,
        stderr,
        samples: 1,
    }
}

trait WithSamples {
    fn with_samples(self, k: i32) -> Self;
}

impl WithSamples for NewResult {
    fn with_samples(mut self, k: i32) -> Self {
        self.samples = k;
        self
    }
}
