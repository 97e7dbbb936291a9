//! What the warm start trains on: the seed library's files read and labelled, and the
//! designer, hint and agent pairs built from them ([`build_data`]).

use super::*;

/// One seed environment file.
#[derive(Debug, Clone)]
pub struct SeedEnv {
    pub path: PathBuf,
    pub skill: String,
    pub kind: EnvKind,
    pub code: String,
    /// The module docstring without quotes.
    pub doc: String,
    /// The privileged hint the warm start teaches for it: the docstring for the seed library's
    /// files, the family's own hint for a family's variants.
    pub hint: String,
    /// Whether the designer learns to write it (a family's extra variants teach only the hint
    /// writer and the agent).
    pub designer: bool,
    /// Whether the agent also learns its episodes without the hint (a family's extra variants
    /// teach only reading the hint).
    pub no_hint_plays: bool,
}

/// Reads every `*.py` under `dir/games` and `dir/tooluse`, sorted by path.
pub fn read_seeds(dir: &Path) -> Result<Vec<SeedEnv>, WorkerError> {
    let mut files = Vec::new();
    collect_py(dir, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let code = std::fs::read_to_string(&path).map_err(|e| WorkerError::io(&path, e))?;
        let kind = if path.components().any(|c| c.as_os_str() == "tooluse") {
            EnvKind::ToolUse
        } else {
            EnvKind::Game
        };
        let doc = code
            .lines()
            .next()
            .unwrap_or("")
            .trim_matches('"')
            .trim()
            .to_string();
        let skill = doc
            .strip_prefix("Skill: ")
            .and_then(|s| s.split('.').next())
            .map(str::trim)
            .filter(|s| spade::skills::find(s).is_some())
            .ok_or_else(|| WorkerError::Corrupt {
                path: path.display().to_string(),
                message:
                    "the first line must be a docstring `Skill: <one of the spec's skills>. ...`"
                        .into(),
            })?
            .to_string();
        out.push(SeedEnv {
            path,
            skill,
            kind,
            code,
            hint: doc.clone(),
            doc,
            designer: true,
            no_hint_plays: true,
        });
    }
    if out.is_empty() {
        return Err(WorkerError::Config(format!(
            "no seed environments (*.py) under {}",
            dir.display()
        )));
    }
    Ok(out)
}

pub(crate) fn collect_py(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), WorkerError> {
    let entries = std::fs::read_dir(dir).map_err(|e| WorkerError::io(dir, e))?;
    for e in entries {
        let p = e.map_err(|e| WorkerError::io(dir, e))?.path();
        if p.is_dir() {
            collect_py(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "py") {
            out.push(p);
        }
    }
    Ok(())
}

/// The designer prompt for a seed (`spade::prompt::designer_prompt`), with a corpus document
/// and memory examples drawn from the other seeds, as the loop draws them from its memory.
pub(super) fn designer_pair_prompt(
    seeds_all: &[SeedEnv],
    me: usize,
    variant: usize,
    opts: &WarmStartOptions,
) -> ChatPrompt {
    let s = &seeds_all[me];
    let skill = spade::skills::find(&s.skill).unwrap_or(&spade::skills::SKILLS[0]);
    let pick = |tag: u64, k: usize| -> usize {
        seeds::derive(opts.seed, &[tag, me as u64, variant as u64, k as u64]) as usize
    };
    let doc = (!opts.corpus_docs.is_empty())
        .then(|| opts.corpus_docs[pick(seeds::tag::CORPUS, 0) % opts.corpus_docs.len()].as_str());
    // The loop's examples share the slot's skill (`memory.match_by`, default "skill"); the
    // seed library has few files a skill, so any of the kind stands in there.
    let same_skill: Vec<usize> = (0..seeds_all.len())
        .filter(|&i| i != me && seeds_all[i].designer && seeds_all[i].skill == s.skill)
        .collect();
    let others: Vec<usize> = if same_skill.is_empty() {
        (0..seeds_all.len())
            .filter(|&i| i != me && seeds_all[i].kind == s.kind)
            .collect()
    } else {
        same_skill
    };
    // The loop's memory examples carry measured win rates and regrets, and the first
    // generation has none: the pairs vary both, so no such prompt is one the model never saw.
    let rate = |k: usize| (pick(seeds::tag::MEMORY, 200 + k) % 101) as f64 / 100.0;
    let with_memory = pick(seeds::tag::MEMORY, 300) % 4 != 0;
    let record = |i: usize, win_rate: f64, regret: f64| MemoryRecord {
        env_id: format!("seed-{i}"),
        step: 0,
        skill: seeds_all[i].skill.clone(),
        kind: seeds_all[i].kind,
        code: seeds_all[i]
            .code
            .chars()
            .take(opts.memory_code_chars)
            .collect(),
        win_rate,
        regret,
    };
    let mut pos = Vec::new();
    let mut neg = Vec::new();
    if !others.is_empty() && with_memory {
        for k in 0..opts.memory_positives {
            pos.push(record(
                others[pick(seeds::tag::MEMORY, k) % others.len()],
                0.15 + 0.7 * rate(k),
                rate(50 + k),
            ));
        }
        for k in 0..opts.memory_negatives {
            neg.push(record(
                others[pick(seeds::tag::MEMORY, 100 + k) % others.len()],
                if rate(100 + k) < 0.5 { 0.0 } else { 1.0 },
                0.0,
            ));
        }
    }
    let examples = Examples {
        positives: pos.iter().collect(),
        negatives: neg.iter().collect(),
    };
    spade::prompt::designer_prompt(skill, doc, &examples, opts.max_turns)
}

/// A supervised pair: `prompt` (not trained) and `completion` closed by `<|im_end|>`.
pub(crate) fn pair(
    tok: &Tokenizer,
    prompt: &str,
    completion: &str,
) -> Result<MaskedSeq, WorkerError> {
    let p = tok.encode(prompt)?;
    let mut c = tok.encode(completion)?;
    c.extend(tok.token_id(IM_END));
    Ok(MaskedSeq::prompt_completion(&p, &c))
}

/// Builds every training sequence; plays the seeds' solutions in the sandbox for the agent part.
pub fn build_data(
    tok: &Tokenizer,
    pool: &Pool,
    seeds_all: &[SeedEnv],
    opts: &WarmStartOptions,
) -> Result<(Vec<MaskedSeq>, [usize; 3]), WorkerError> {
    let mut data = Vec::new();
    let mut counts = [0usize; 3];
    let end = tok
        .token_id(IM_END)
        .ok_or_else(|| WorkerError::Model("the tokenizer has no <|im_end|> token".into()))?;
    let designer_files = designer_files(seeds_all, opts);
    for (i, s) in seeds_all.iter().enumerate() {
        if !opts.kinds.contains(&s.kind) {
            continue;
        }
        // Of the designer's files only those it learns: every pair costs CPU time, and the loop
        // plays what the designer writes, which is (at best) these files. A family's play-only
        // variants teach the hint writer and the agent, never the designer.
        if s.designer && !designer_files.contains(&i) {
            continue;
        }
        let designer_variants = if s.designer {
            opts.designer_variants
        } else {
            0
        };
        for v in 0..designer_variants {
            let prompt = designer::render(&designer_pair_prompt(seeds_all, i, v, opts));
            data.push(pair(tok, &prompt, &format!("```python\n{}```", s.code))?);
            counts[0] += 1;
        }
        let hint_prompt = designer::render(&designer::hint_prompt(
            spade::prompt::PromptStyle::Compact,
            s.kind,
            &s.code,
            opts.hint_code_chars,
        ));
        data.push(pair(tok, &hint_prompt, &s.hint)?);
        counts[1] += 1;
        let mut session = pool.load(&s.code, Some(s.kind), None)?;
        for ep in 0..opts.agent_episodes {
            let t = session.play_solution(ep as i64, Duration::from_secs(60))?;
            let with_hint = ep % 2 == 1;
            if !with_hint && (!s.no_hint_plays || opts.agent_hint_only) {
                continue;
            }
            let first = spade::prompt::agent_first_message(
                &t.reset.obs,
                with_hint.then_some(s.hint.as_str()),
            );
            let mut trace = TokenTrace::start(tok, s.kind, &first)?;
            let n = t.turns.len();
            for (k, turn) in t.turns.iter().enumerate() {
                let mut ids = tok.encode(&turn.action)?;
                ids.push(end);
                trace.push_action(&ids, &vec![0.0; ids.len()]);
                if k + 1 < n {
                    trace.push_context(&tok.encode(&observation_frame(&turn.result.obs))?);
                }
            }
            if trace.ids.len() <= 4096 && n > 0 {
                data.push(MaskedSeq {
                    ids: trace.ids,
                    loss_mask: trace.loss_mask,
                });
                counts[2] += 1;
            }
        }
    }
    Ok((data, counts))
}

/// Indices of the seeds the designer learns: the `designer_files` shortest of the kinds.
pub fn designer_files(seeds_all: &[SeedEnv], opts: &WarmStartOptions) -> Vec<usize> {
    let mut v: Vec<usize> = (0..seeds_all.len())
        .filter(|&i| opts.kinds.contains(&seeds_all[i].kind) && seeds_all[i].designer)
        .collect();
    v.sort_by_key(|&i| seeds_all[i].code.len());
    v.truncate(opts.designer_files);
    v
}
