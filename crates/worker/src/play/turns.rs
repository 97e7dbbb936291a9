//! How episodes advance turn by turn: an episode's start (load, reset, the first prompt), each
//! turn (sample, act, check the return against the contract, extend the token trace) and its
//! end, under the two drivers: all jobs' episodes at once on a continuous-batching rollout (the
//! engine, vLLM), or one job at a time in sampler batches.

use super::*;

#[path = "concurrent.rs"]
mod concurrent;
#[cfg(test)]
pub(super) use concurrent::play_concurrently;
pub(super) use concurrent::play_concurrently_timed;

pub(super) struct Live {
    pub(super) idx: usize,
    session: EnvSession,
    pub(super) trace: TokenTrace,
    turn_cap: u32,
    last_obs: String,
    /// A tool-use episode on the model's native tool template (`agent.tool_template`): the
    /// whole reply steps the environment and call results come back as `tool` turns.
    native_tools: bool,
    /// The runner's observation limit in characters: what the environment writes into a
    /// native template's turns (schemas, task, call results, all read from its info dicts)
    /// is held to it as its observations are.
    max_chars: usize,
}

impl Live {
    /// The next turn's token budget, as the reference sets it: the turn cap, within what the
    /// context leaves after [`MIN_TURN_TOKENS`] kept free and what the episode budget leaves.
    /// `None` once fewer than [`MIN_TURN_TOKENS`] are left in the context or nothing in the
    /// episode budget: the episode ends there, truncated.
    fn budget(&self, opts: &PlayOptions) -> Option<usize> {
        turn_budget(opts, self.trace.ids.len(), self.trace.generated())
    }

    /// Whether the episode goes on to another turn; one that cannot ends truncated.
    pub(super) fn fits(&self, opts: &PlayOptions, ep: &mut Episode) -> bool {
        let fits = self.budget(opts).is_some();
        ep.truncated |= !fits;
        fits
    }

    /// The episode's final token trace.
    pub(super) fn finalize(self, ep: &mut Episode) {
        ep.ids = self.trace.ids;
        ep.loss_mask = self.trace.loss_mask;
        ep.logprobs = self.trace.logprobs;
    }
}

/// What every turn of a play call shares.
pub(super) struct Turns<'a> {
    pub tok: &'a Tokenizer,
    pub end: i64,
    pub opts: &'a PlayOptions,
    pub params: SamplingParams,
    /// After every assistant header ([`Policy::generation_suffix`]: thinking off).
    pub suffix: &'a str,
}

impl Turns<'_> {
    /// The frame of an observation and the next turn's header.
    fn frame(&self, obs: &str) -> String {
        format!("{}{}", observation_frame(obs), self.suffix)
    }

    /// The sampling settings of episode `l`'s next turn (its budget: [`Live::budget`]).
    pub(super) fn params_for(&self, l: &Live) -> SamplingParams {
        let mut p = self.params.clone();
        p.max_new_tokens = l.budget(self.opts).unwrap_or(0);
        p
    }

    /// Loads the environment and resets it for episode `idx` of `job`.
    pub(super) fn start(
        &self,
        pool: &Pool,
        job: &PlayJob<'_>,
        ep: &mut Episode,
        idx: usize,
    ) -> Result<Option<Live>, WorkerError> {
        ep.env_calls += 1;
        let started = pool
            .load(job.code, Some(job.kind), None)
            .and_then(|mut s| s.reset(Some(ep.seed)).map(|obs| (s, obs)));
        match started {
            Ok((session, obs)) => {
                let max_chars = pool.config().runner.limits.max_observation_chars;
                let hint: Option<String> = job
                    .hint
                    .map(|h| h.chars().take(self.opts.max_hint_chars).collect());
                let native = (job.kind == EnvKind::ToolUse
                    && self.opts.tool_template == ToolTemplate::Native)
                    .then(|| native_tool_opening(&obs.info, max_chars))
                    .flatten();
                let native_tools = native.is_some();
                let (system, first) = match native {
                    Some((tools, task)) => (
                        Some(spade_policy::chat::tools_system(&tools)),
                        prompt::reference::tool_use_first_message(&task, hint.as_deref()),
                    ),
                    None => {
                        let (system, first) =
                            self.opts
                                .prompts
                                .agent_opening(job.kind, &obs.obs, hint.as_deref());
                        (system.map(str::to_string), first)
                    }
                };
                ep.transcript.push(Turn {
                    role: TurnRole::User,
                    content: first.clone(),
                });
                let turn_cap = session.max_turns.min(self.opts.max_turns).max(1);
                Ok(Some(Live {
                    idx,
                    session,
                    trace: TokenTrace::opening(self.tok, system.as_deref(), &first, self.suffix)?,
                    turn_cap,
                    last_obs: obs.obs,
                    native_tools,
                    max_chars,
                }))
            }
            Err(e) => {
                ep.failure = Some(failure_of(&e, ep.seed));
                Ok(None)
            }
        }
    }

    /// The sampling seed of the next turn of episode `l` of `job`: by the episode's place in
    /// the whole job, so a job shared out over ranks samples as one process would.
    pub(super) fn seed(&self, job: &PlayJob<'_>, l: &Live, ep: &Episode) -> u64 {
        let idx = (job.first_index + l.idx) as u64;
        crate::seeds::derive(job.sample_seed, &[idx, u64::from(ep.turns)])
    }

    /// Applies one sampled turn: records it, steps the environment (or tells the agent what
    /// was malformed) and says whether the episode goes on.
    pub(super) fn after(
        &self,
        kind: EnvKind,
        l: &mut Live,
        ep: &mut Episode,
        out: Completion,
    ) -> Result<bool, WorkerError> {
        l.trace.push_action(&out.tokens, &out.logprobs);
        let cut = out.finish == Finish::Length;
        if out.finish != Finish::StopToken && !(cut && self.opts.end_on_cut_turn) {
            l.trace.push_context(&[self.end]);
        }
        let reply = out.text.unwrap_or_default();
        ep.transcript.push(Turn {
            role: TurnRole::Assistant,
            content: reply.clone(),
        });
        ep.turns += 1;
        if cut && self.opts.end_on_cut_turn {
            // The reference: a turn without its end token is cut mid-thought; the environment
            // is not stepped with it and the episode ends, truncated.
            ep.truncated = true;
            return Ok(false);
        }
        // On the native tool template the environment reads the whole reply: every call in
        // it, in order (the reference parses the calls and executes each).
        let parsed = if l.native_tools {
            Ok(parse::strip_think(&reply))
        } else {
            env_action_with(kind, &reply, self.opts.raw_actions)
        };
        let action = match parsed {
            Ok(a) => a,
            Err(e) => {
                // A malformed turn: the environment is not stepped; the agent is told what was
                // wrong and sees the same observation (spec: a format error costs -0.1, which
                // only matters if it is the last reward of a terminated episode, and a format
                // error never terminates).
                ep.format_errors += 1;
                let obs = prompt::format_error_message(&e, &l.last_obs);
                ep.transcript.push(Turn {
                    role: TurnRole::User,
                    content: obs.clone(),
                });
                if ep.turns >= l.turn_cap {
                    return Ok(false);
                }
                l.trace.push_context(&self.tok.encode(&self.frame(&obs))?);
                return Ok(true);
            }
        };
        ep.env_calls += 1;
        let stepped = match l.session.step(&action) {
            Ok(r) => match step_violation(&r) {
                None => Ok(r),
                Some(message) => Err(PlayFailure {
                    reason: Reason::RewardOutOfRange,
                    message: format!("with seed {}: {message}", ep.seed),
                }),
            },
            Err(e) => Err(failure_of(&e, ep.seed)),
        };
        match stepped {
            Ok(r) => {
                if l.native_tools && r.info.get("error").is_some() {
                    ep.format_errors += 1;
                }
                ep.rewards.push(r.reward);
                ep.transcript.push(Turn {
                    role: TurnRole::User,
                    content: r.obs.clone(),
                });
                if r.terminated {
                    ep.terminated = true;
                    ep.episode_return = spade::reward::episode_return(r.reward, true);
                    // A win gives reward 1.0 and terminates (spec "Environment contract").
                    ep.won = (r.reward - 1.0).abs() < 1e-9;
                    Ok(false)
                } else if r.truncated || ep.turns >= l.turn_cap {
                    Ok(false)
                } else {
                    let results = tool_results(&r.info, l.max_chars).filter(|_| l.native_tools);
                    let frame = match &results {
                        Some(results) => format!(
                            "{}{}",
                            spade_policy::chat::tool_responses_frame(results),
                            self.suffix
                        ),
                        None => self.frame(&r.obs),
                    };
                    l.trace.push_context(&self.tok.encode(&frame)?);
                    l.last_obs = r.obs;
                    Ok(true)
                }
            }
            Err(f) => {
                ep.failure = Some(f);
                Ok(false)
            }
        }
    }
}

/// The strings of a JSON array in `info[key]`, when there are some and they hold at most
/// `max_chars` characters together.
fn info_strings(info: &serde_json::Value, key: &str, max_chars: usize) -> Option<Vec<String>> {
    let items = info
        .get(key)?
        .as_array()?
        .iter()
        .map(|t| t.as_str().map(str::to_string))
        .collect::<Option<Vec<String>>>()?;
    let chars: usize = items.iter().map(|t| t.chars().count()).sum();
    (!items.is_empty() && chars <= max_chars).then_some(items)
}

/// The schemas (JSON texts) and the task of a tool-use reset, for the native tool template;
/// `None` when the environment's reset did not give them (it overrode the base class's) or
/// they pass the observation limit: the episode then plays inline, on the checked observation.
fn native_tool_opening(
    info: &serde_json::Value,
    max_chars: usize,
) -> Option<(Vec<String>, String)> {
    let task = info.get("task")?.as_str()?.to_string();
    let left = max_chars.checked_sub(task.chars().count())?;
    Some((info_strings(info, "tools", left)?, task))
}

/// Each tool call's result of a step, in order; `None` when the turn ran no call (a format
/// error or an answer) or the results pass the observation limit: the checked observation
/// then goes back as a user turn.
fn tool_results(info: &serde_json::Value, max_chars: usize) -> Option<Vec<String>> {
    info_strings(info, "tool_results", max_chars)
}

/// The sampler path of [`play_envs`] for one job: batches of `concurrency` episodes, each turn
/// of a batch one `generate` call over the whole transcripts.
pub(super) fn play_batched(
    policy: &Policy,
    pool: &Pool,
    turns: &Turns<'_>,
    job: &PlayJob<'_>,
    concurrency: usize,
) -> Result<Vec<Episode>, WorkerError> {
    let mut episodes: Vec<Episode> = job
        .seeds
        .iter()
        .map(|&s| Episode::new(s, job.hint.is_some()))
        .collect();
    let idxs: Vec<usize> = (0..job.seeds.len()).collect();
    let mut started_eps = 0;
    for chunk in idxs.chunks(concurrency) {
        // The first violation ends the environment's life: no further episodes start.
        if turns.opts.stop_at_violation && episodes.iter().any(|e| e.failure.is_some()) {
            break;
        }
        started_eps += chunk.len();
        let mut live = Vec::new();
        for &i in chunk {
            if let Some(l) = turns.start(pool, job, &mut episodes[i], i)? {
                live.push(l);
            }
        }
        let mut finished: Vec<Live> = Vec::new();
        while !live.is_empty() {
            // A violation stops the environment's other episodes where they are.
            if turns.opts.stop_at_violation && episodes.iter().any(|e| e.failure.is_some()) {
                finished.append(&mut live);
                break;
            }
            let (fit, over): (Vec<Live>, Vec<Live>) = live
                .drain(..)
                .partition(|l| l.fits(turns.opts, &mut episodes[l.idx]));
            finished.extend(over);
            live = fit;
            if live.is_empty() {
                break;
            }
            // One batch per turn budget (rows near their end get less): each row's tokens
            // depend only on its own seed, so splitting the batch changes nothing else.
            let mut outs: Vec<Option<Completion>> = vec![None; live.len()];
            let mut budgets: Vec<usize> = live
                .iter()
                .map(|l| turns.params_for(l).max_new_tokens)
                .collect();
            let rows_of = budgets.clone();
            budgets.sort_unstable();
            budgets.dedup();
            for b in budgets {
                let rows: Vec<usize> = (0..live.len()).filter(|&r| rows_of[r] == b).collect();
                let prompts: Vec<Vec<i64>> =
                    rows.iter().map(|&r| live[r].trace.ids.clone()).collect();
                let row_seeds: Vec<u64> = rows
                    .iter()
                    .map(|&r| turns.seed(job, &live[r], &episodes[live[r].idx]))
                    .collect();
                let params = SamplingParams {
                    max_new_tokens: b,
                    ..turns.params.clone()
                };
                let got = generate(
                    policy.model(),
                    &prompts,
                    &row_seeds,
                    &params,
                    Some(turns.tok),
                )?;
                for (r, c) in rows.into_iter().zip(got) {
                    outs[r] = Some(c);
                }
            }
            let mut keep = Vec::new();
            for (mut l, out) in live.drain(..).zip(outs.into_iter().flatten()) {
                let idx = l.idx;
                if turns.after(job.kind, &mut l, &mut episodes[idx], out)? {
                    keep.push(l);
                } else {
                    finished.push(l);
                }
            }
            live = keep;
        }
        for l in finished {
            let idx = l.idx;
            l.finalize(&mut episodes[idx]);
        }
    }
    // Episodes that never started (the environment broke first) are not plays.
    episodes.truncate(started_eps);
    Ok(episodes)
}

fn failure_of(e: &SandboxError, seed: i64) -> PlayFailure {
    let message = match e {
        SandboxError::Env(env) => env.message.clone(),
        other => other.to_string(),
    };
    PlayFailure {
        reason: reason_of(e, false),
        message: format!("with seed {seed}: {message}"),
    }
}

#[cfg(test)]
#[path = "tool_template_tests.rs"]
mod tool_template_tests;
