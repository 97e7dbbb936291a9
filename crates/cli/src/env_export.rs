//! `spade env export`: a run's environments as a pool directory (`spade::pool`), from a run
//! directory of `spade train` or from the service's streamed JSONL. Both paths write entry by
//! entry ([`PoolWriter`]); from the service nothing is held but the current line.

use anyhow::{Context, bail};
use spade::pool::{Card, PoolEntry, PoolFilter};
use spade::report::EnvStatus;
use spade_worker::pool::{PoolWriter, run_dir_environments};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["run_dir", "server"])))]
pub struct ExportArgs {
    /// A run directory written by `spade train` (its environments.jsonl and events.jsonl).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// The service's base URL (with --run and --token): reads
    /// GET /api/v1/runs/{run}/environments.jsonl.
    #[arg(long, value_name = "URL", requires_all = ["run", "token"])]
    pub server: Option<String>,
    /// The run's id on the service.
    #[arg(long, requires = "server")]
    pub run: Option<i64>,
    /// An access token of a member of the run's team (`api_client` login); or SPADE_TOKEN.
    #[arg(long, env = "SPADE_TOKEN", hide_env_values = true, requires = "server")]
    pub token: Option<String>,
    /// The pool directory to create (must not exist or be empty).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Keep environments of this status: accepted, rejected, broken_in_play, or any.
    #[arg(long, default_value = "accepted")]
    pub status: String,
    /// Keep one skill (display name, e.g. "Logical Deduction").
    #[arg(long)]
    pub skill: Option<String>,
    /// Keep no-hint win rates at or above this (0..=1; unscored environments are left out).
    #[arg(long)]
    pub win_rate_min: Option<f64>,
    /// Keep no-hint win rates at or below this (0..=1; unscored environments are left out).
    #[arg(long)]
    pub win_rate_max: Option<f64>,
    /// Keep regrets at or above this (unscored environments are left out).
    #[arg(long)]
    pub regret_min: Option<f64>,
    /// Keep regrets at or below this (unscored environments are left out).
    #[arg(long)]
    pub regret_max: Option<f64>,
    /// Keep environments generated at or after this step.
    #[arg(long)]
    pub step_min: Option<u64>,
    /// Keep environments generated at or before this step.
    #[arg(long)]
    pub step_max: Option<u64>,
    /// Leave out environments a team member marked so: good, broken, reward_hackable
    /// (comma-separated; marks come with --server, a run directory has none).
    #[arg(long, value_delimiter = ',', value_name = "VERDICT")]
    pub without_verdict: Vec<String>,
    /// Keep environments some member marked so (good, broken, reward_hackable), or that no
    /// member marked (unreviewed); the environment browser's Review filter.
    #[arg(long, value_name = "VERDICT")]
    pub verdict: Option<String>,
    /// Keep only the run's curated pool: marked good by a member, broken or reward-hackable by
    /// none.
    #[arg(long)]
    pub curated: bool,
}

fn parse_status(s: &str) -> anyhow::Result<Option<EnvStatus>> {
    Ok(Some(match s {
        "any" => return Ok(None),
        "accepted" => EnvStatus::Accepted,
        "rejected" => EnvStatus::Rejected,
        "broken_in_play" => EnvStatus::BrokenInPlay,
        other => {
            bail!("--status: expected accepted, rejected, broken_in_play or any, got {other:?}")
        }
    }))
}

impl ExportArgs {
    fn filter(&self) -> anyhow::Result<PoolFilter> {
        let f = PoolFilter {
            status: parse_status(&self.status)?,
            skill: self.skill.clone(),
            win_rate_min: self.win_rate_min,
            win_rate_max: self.win_rate_max,
            regret_min: self.regret_min,
            regret_max: self.regret_max,
            step_min: self.step_min,
            step_max: self.step_max,
            without_verdicts: self
                .without_verdict
                .iter()
                .map(|v| {
                    spade::pool::Verdict::parse(v).ok_or_else(|| {
                        anyhow::anyhow!(
                            "--without-verdict: expected good, broken or reward_hackable, got {v:?}"
                        )
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            verdict: self
                .verdict
                .as_deref()
                .map(|v| {
                    spade::pool::VerdictFilter::parse(v).ok_or_else(|| {
                        anyhow::anyhow!(
                            "--verdict: expected good, broken, reward_hackable or unreviewed, got {v:?}"
                        )
                    })
                })
                .transpose()?,
            curated: self.curated,
        };
        f.check()
            .map_err(|m| anyhow::anyhow!("--{}", m.replace('_', "-")))?;
        Ok(f)
    }
}

pub fn run(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let filter = args.filter()?;
    let (card, skipped) = match (&args.run_dir, &args.server) {
        (Some(dir), _) => from_run_dir(dir, &args.out, filter)?,
        (None, Some(server)) => {
            let (Some(run), Some(token)) = (args.run, args.token.as_deref()) else {
                bail!("--server needs --run and --token");
            };
            from_server(server, run, token, &args.out, filter)?
        }
        (None, None) => bail!("give --run-dir or --server"),
    };
    let total: usize = card.counts.values().sum();
    println!(
        "wrote {total} environments to {} ({skipped} left out)",
        args.out.display()
    );
    for ((kind, skill), n) in &card.counts {
        println!("  {} {skill}: {n}", kind.as_str());
    }
    Ok(ExitCode::SUCCESS)
}

fn add_or_report(w: &mut PoolWriter, e: PoolEntry, where_: &str, skipped: &mut usize) {
    if let Err(err) = w.add(e) {
        eprintln!("{where_}: left out: {err}");
        *skipped += 1;
    }
}

fn from_run_dir(dir: &Path, out: &Path, filter: PoolFilter) -> anyhow::Result<(Card, usize)> {
    let run = std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string();
    let envs = run_dir_environments(dir, &run)?;
    let card = Card {
        run: format!("run directory {run}"),
        model: envs
            .config
            .as_ref()
            .map_or_else(|| "unknown".into(), spade::pool::model_of_config),
        filter: filter.clone(),
        ..Card::default()
    };
    let mut w = PoolWriter::create(out, card)?;
    let mut skipped = 0;
    for e in envs.entries.into_iter().filter(|e| filter.matches(e)) {
        let id = e.id.clone();
        add_or_report(&mut w, e, &id, &mut skipped);
    }
    Ok((w.finish()?, skipped))
}

fn from_server(
    server: &str,
    run: i64,
    token: &str,
    out: &Path,
    filter: PoolFilter,
) -> anyhow::Result<(Card, usize)> {
    let base = server.trim_end_matches('/');
    // No overall timeout: a large export streams for as long as it takes.
    let client = reqwest::blocking::Client::builder()
        .timeout(None)
        .connect_timeout(std::time::Duration::from_secs(30))
        .build()?;
    let get = |url: &str| -> anyhow::Result<reqwest::blocking::Response> {
        let resp = client
            .get(url)
            .bearer_auth(token)
            .send()
            .with_context(|| format!("GET {url}"))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().unwrap_or_default();
            bail!("GET {url}: {status}: {body}");
        }
        Ok(resp)
    };
    let run_json: serde_json::Value = get(&format!("{base}/api/v1/runs/{run}"))?
        .json()
        .context("the run is not JSON")?;
    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(s) = filter.status {
        query.push(("status", spade::pool::status_str(s).into()));
    }
    if let Some(s) = &filter.skill {
        query.push(("skill", s.clone()));
    }
    for (k, v) in [
        ("win_rate_min", filter.win_rate_min),
        ("win_rate_max", filter.win_rate_max),
        ("regret_min", filter.regret_min),
        ("regret_max", filter.regret_max),
    ] {
        if let Some(v) = v {
            query.push((k, v.to_string()));
        }
    }
    for (k, v) in [("step_min", filter.step_min), ("step_max", filter.step_max)] {
        if let Some(v) = v {
            query.push((k, v.to_string()));
        }
    }
    if let Some(v) = filter.verdict {
        query.push(("verdict", v.as_str().into()));
    }
    if filter.curated {
        query.push(("curated", "true".into()));
    }
    let url = format!("{base}/api/v1/runs/{run}/environments.jsonl");
    let url = reqwest::Url::parse_with_params(&url, &query).with_context(|| url.clone())?;
    let resp = get(url.as_str())?;
    let card = Card {
        run: format!("run {run} of {base}"),
        model: spade::pool::model_of_config(&run_json["config"]),
        filter: filter.clone(),
        ..Card::default()
    };
    let mut w = PoolWriter::create(out, card)?;
    let mut skipped = 0;
    let reader = std::io::BufReader::new(resp);
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| {
            format!(
                "reading the export at line {}: the transfer ended early",
                i + 1
            )
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let where_ = format!("{url} line {}", i + 1);
        match serde_json::from_str::<PoolEntry>(&line) {
            // The server filtered already; this keeps the two paths' meaning one.
            Ok(e) if filter.matches(&e) => add_or_report(&mut w, e, &where_, &mut skipped),
            Ok(_) => skipped += 1,
            Err(e) => {
                eprintln!("{where_}: not a pool line: {e}");
                skipped += 1;
            }
        }
    }
    Ok((w.finish()?, skipped))
}
