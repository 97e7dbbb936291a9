//! A regeneration shared out over the ranks (issue 41, item 3): each rank designs its share of
//! the slots (sampling, sandbox validation, the self-judge) and writes its share of the hints
//! on its own engine, and rank 0 gathers the results in slot order. Rank 0 plans every
//! attempt's prompt, environment id and seed first (the corpus and the memory are its state;
//! `crate::run::generate`), so a slot's attempts are the ones one process makes, whichever rank
//! makes them: every draw has seeds of its own and the engine samples a request alike in any
//! batch. Validation seeds come from OS randomness on every rank, as in one process.

use super::Ranks;
use crate::WorkerError;
use crate::designer::{self, Attempt, SlotPlan};
use crate::play::{Backend, EngineLimits};
use serde::{Deserialize, Serialize};
use spade::prompt::ChatPrompt;

/// What every rank designs of a regeneration: `parts[r]` is rank r's slots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DesignOrder {
    parts: Vec<Vec<SlotPlan>>,
    /// The engine's limits; None = the sampler.
    engine: Option<EngineLimits>,
}

/// What every rank writes of a regeneration's hints: `parts[r]` is rank r's (prompt, seed)s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HintOrder {
    parts: Vec<Vec<(ChatPrompt, u64)>>,
    temperature: f64,
    max_new_tokens: usize,
    engine: Option<EngineLimits>,
}

/// The engine settings a backend carries to the other ranks (each builds its own engine).
fn engine_of(backend: &Backend) -> Result<Option<EngineLimits>, WorkerError> {
    match backend {
        Backend::Engine(limits) => Ok(Some(*limits)),
        Backend::Sampler => Ok(None),
        Backend::Vllm(_) => Err(WorkerError::Config(
            "ranks design on their own engines, not vLLM".into(),
        )),
    }
}

fn backend_of(engine: Option<EngineLimits>) -> Backend {
    engine.map_or(Backend::Sampler, Backend::Engine)
}

/// `items` cut into `world` runs in order, as even as whole items allow.
fn split<T: Clone>(items: &[T], world: usize) -> Vec<Vec<T>> {
    let n = items.len();
    (0..world)
        .map(|r| items[n * r / world..n * (r + 1) / world].to_vec())
        .collect()
}

impl Ranks {
    /// The attempts of every planned slot, in slot order, each rank designing its share.
    pub(crate) fn design_shared(
        &self,
        policy: &spade_policy::Policy,
        pool: &spade_sandbox::Pool,
        plans: &[SlotPlan],
        opts: &designer::DesignOptions,
    ) -> Result<Vec<Vec<Attempt>>, WorkerError> {
        if matches!(opts.backend, Backend::Vllm(_)) {
            // The servers sample every slot at once for rank 0 (see `Ranks::play_shared`).
            return designer::design_planned(policy, pool, plans, opts);
        }
        let order = DesignOrder {
            parts: split(plans, self.world_size()),
            engine: engine_of(&opts.backend)?,
        };
        self.send(&super::FollowerCommand::Design(Box::new(order.clone())))?;
        let own = designer::design_planned(policy, pool, &order.parts[0], opts)?;
        let gathered = self.gather(own, "designer attempts")?;
        let mut all = Vec::with_capacity(plans.len());
        for (rank, (theirs, part)) in gathered.into_iter().zip(&order.parts).enumerate() {
            if theirs.len() != part.len() {
                return Err(WorkerError::Ranks(format!(
                    "rank {rank} designed {} slots of {}",
                    theirs.len(),
                    part.len()
                )));
            }
            all.extend(theirs);
        }
        Ok(all)
    }

    /// A follower: designs its slots of `order` ([`Ranks::design_shared`] on rank 0) with the
    /// run's designer settings and sends the attempts back; returns how many it made.
    pub(crate) fn design_part(
        &self,
        order: DesignOrder,
        cfg: &spade::config::RunConfig,
        policy: &spade_policy::Policy,
        pool: &spade_sandbox::Pool,
    ) -> Result<usize, WorkerError> {
        let opts = designer::design_options(cfg, backend_of(order.engine));
        let mine = order
            .parts
            .get(self.rank())
            .ok_or_else(|| WorkerError::Ranks(format!("no slots for rank {}", self.rank())))?;
        let own = designer::design_planned(policy, pool, mine, &opts)?;
        let made = own.iter().map(Vec::len).sum();
        self.gather(own, "designer attempts")?;
        Ok(made)
    }

    /// The hints of `prompts` (with their `seeds`), in order, each rank writing its share.
    pub(crate) fn hints_shared(
        &self,
        policy: &spade_policy::Policy,
        prompts: &[ChatPrompt],
        seeds: &[u64],
        temperature: f64,
        max_new_tokens: usize,
        backend: Backend,
    ) -> Result<Vec<String>, WorkerError> {
        if prompts.len() != seeds.len() {
            return Err(WorkerError::Ranks(format!(
                "{} hint prompts with {} seeds",
                prompts.len(),
                seeds.len()
            )));
        }
        if matches!(backend, Backend::Vllm(_)) {
            return designer::hints_for(
                policy,
                prompts,
                temperature,
                max_new_tokens,
                seeds,
                backend,
            );
        }
        let pairs: Vec<(ChatPrompt, u64)> =
            prompts.iter().cloned().zip(seeds.iter().copied()).collect();
        let order = HintOrder {
            parts: split(&pairs, self.world_size()),
            temperature,
            max_new_tokens,
            engine: engine_of(&backend)?,
        };
        self.send(&super::FollowerCommand::Hints(Box::new(order.clone())))?;
        let own = hints_of(policy, &order.parts[0], &order)?;
        let gathered = self.gather(own, "hints")?;
        let all: Vec<String> = gathered.into_iter().flatten().collect();
        if all.len() != prompts.len() {
            return Err(WorkerError::Ranks(format!(
                "the ranks wrote {} hints for {} environments",
                all.len(),
                prompts.len()
            )));
        }
        Ok(all)
    }

    /// A follower: writes its hints of `order` and sends them back; returns how many.
    pub(crate) fn hints_part(
        &self,
        order: HintOrder,
        policy: &spade_policy::Policy,
    ) -> Result<usize, WorkerError> {
        let mine = order
            .parts
            .get(self.rank())
            .ok_or_else(|| WorkerError::Ranks(format!("no hints for rank {}", self.rank())))?;
        let own = hints_of(policy, mine, &order)?;
        let n = own.len();
        self.gather(own, "hints")?;
        Ok(n)
    }
}

fn hints_of(
    policy: &spade_policy::Policy,
    part: &[(ChatPrompt, u64)],
    order: &HintOrder,
) -> Result<Vec<String>, WorkerError> {
    let (prompts, seeds): (Vec<ChatPrompt>, Vec<u64>) = part.iter().cloned().unzip();
    designer::hints_for(
        policy,
        &prompts,
        order.temperature,
        order.max_new_tokens,
        &seeds,
        backend_of(order.engine),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_split_in_order_and_evenly() {
        let items: Vec<u32> = (0..5).collect();
        assert_eq!(split(&items, 2), vec![vec![0, 1], vec![2, 3, 4]]);
        assert_eq!(split(&items, 1), vec![items.clone()]);
        let three = split(&items, 3);
        assert_eq!(three.concat(), items);
        assert!(three.iter().all(|p| p.len() <= 2 && !p.is_empty()));
        // More ranks than slots: some ranks get none.
        assert_eq!(split(&items[..1], 2), vec![vec![], vec![0]]);
    }
}
