//! Loading weights into the servers ([`Fleet::sync`]): through safetensors on disk, or
//! through the servers' NCCL weight transfer ([`super::nccl`]); then the checks every sync
//! ends with (the version each server reports, a probe's log-probs against tch's).

use super::*;

impl Fleet {
    /// Writes `policy` under `weights_dir` and loads it into every server as version `label`
    /// (see the module doc for the routes), then checks what each reports.
    pub fn sync(&self, policy: &Policy, label: &str) -> VResult<SyncReport> {
        if let Some(link) = &self.nccl {
            return self.sync_nccl(link, policy, label);
        }
        let t0 = Instant::now();
        let dir = self.weights_dir.join(format!("policy-{label}"));
        write_weights(policy, &dir)?;
        let write_s = t0.elapsed().as_secs_f64();
        let version = version_label(policy, label);
        let t1 = Instant::now();
        for s in &self.servers {
            self.pause(s)?;
            let reload = serde_json::json!({
                "method": "reload_weights",
                "kwargs": {"weights_path": dir.display().to_string()},
            });
            let r = s.post(&self.client, "/collective_rpc", &reload);
            if let Err(e) = r {
                // Leave it serving (the old weights) so the error is the reload's alone.
                let _ = s.post(&self.client, "/resume", &serde_json::json!({}));
                return Err(VllmError(format!(
                    "{} could not load the weights in {}: {}",
                    s.url,
                    dir.display(),
                    e.0
                )));
            }
            s.post(&self.client, "/reset_prefix_cache", &serde_json::json!({}))?;
            s.post(
                &self.client,
                "/update_weight_version",
                &serde_json::json!({"new_version": version}),
            )?;
            s.post(&self.client, "/resume", &serde_json::json!({}))?;
        }
        let probe_gap = self.verify(policy, &version)?;
        self.set_current(&version, dir);
        Ok(SyncReport {
            version,
            path: "disk",
            write_s,
            load_s: t1.elapsed().as_secs_f64(),
            probe_gap,
        })
    }

    /// [`Fleet::sync`] through the servers' NCCL weight transfer: nothing written.
    fn sync_nccl(
        &self,
        link: &nccl::NcclSync,
        policy: &Policy,
        label: &str,
    ) -> VResult<SyncReport> {
        let t0 = Instant::now();
        let version = version_label(policy, label);
        for s in &self.servers {
            self.pause(s)?;
        }
        // A server that failed part way holds some new and some old tensors: the run fails
        // (and resumes from its checkpoint) rather than sample from it.
        link.load(&self.servers, &self.client, policy, &version)?;
        for s in &self.servers {
            s.post(&self.client, "/reset_prefix_cache", &serde_json::json!({}))?;
            s.post(&self.client, "/resume", &serde_json::json!({}))?;
        }
        let probe_gap = self.verify(policy, &version)?;
        if let Ok(mut v) = self.version.lock() {
            v.clone_from(&version);
        }
        Ok(SyncReport {
            version,
            path: "nccl",
            write_s: 0.0,
            load_s: t0.elapsed().as_secs_f64(),
            probe_gap,
        })
    }

    /// Stops `s` generating once its requests are done, its KV and prefix caches cleared.
    fn pause(&self, s: &Server) -> VResult<()> {
        s.check_alive()?;
        s.post(
            &self.client,
            "/pause?mode=wait&clear_cache=true",
            &serde_json::json!({}),
        )
        .map(drop)
    }

    /// Labels weights the servers loaded at start (`dir`) and checks them like a sync.
    pub(super) fn label_loaded(
        &self,
        policy: &Policy,
        label: &str,
        dir: PathBuf,
    ) -> VResult<SyncReport> {
        let t1 = Instant::now();
        let version = version_label(policy, label);
        for s in &self.servers {
            s.post(
                &self.client,
                "/update_weight_version",
                &serde_json::json!({"new_version": version}),
            )?;
        }
        let probe_gap = self.verify(policy, &version)?;
        self.set_current(&version, dir);
        Ok(SyncReport {
            version,
            path: "disk",
            write_s: 0.0,
            load_s: t1.elapsed().as_secs_f64(),
            probe_gap,
        })
    }

    fn set_current(&self, version: &str, dir: PathBuf) {
        if let Ok(mut v) = self.version.lock() {
            *v = version.to_string();
        }
        if let Ok(mut cur) = self.current_dir.lock() {
            // The servers hold the weights in memory once loaded; the old copy is not needed.
            if let Some(old) = cur.replace(dir.clone())
                && old != dir
            {
                let _ = std::fs::remove_dir_all(old);
            }
        }
    }

    /// Every server reports `version` and gives the probe tch's log-probs; the largest gap.
    pub(super) fn verify(&self, policy: &Policy, version: &str) -> VResult<f64> {
        let tok = policy
            .require_tokenizer()
            .map_err(|e| VllmError(format!("the policy has no tokenizer: {e}")))?;
        // Not temperature 1: a server that returns raw log-probs fails the check.
        let temperature = 0.7;
        let req = Request {
            tokens: probe_ids(tok)?,
            params: spade_policy::sample::SamplingParams {
                temperature,
                max_new_tokens: 8,
                ..Default::default()
            },
            seed: 17,
        };
        let body = completion_body(self, &req);
        let mut worst = 0.0f64;
        for s in &self.servers {
            let got = s.weight_version(&self.client)?;
            if got != version {
                return Err(VllmError(format!(
                    "{} reports weight version {got:?} after loading {version:?}",
                    s.url
                )));
            }
            let url = format!("{}/v1/completions", s.url);
            let c = match complete(&self.client, &url, &body, 8) {
                Turn::Done(c) => c,
                Turn::Refused(m) | Turn::Fatal(m) => {
                    return Err(VllmError(format!("the probe: {m}{}", s.log_tail_note())));
                }
            };
            let mut ids = req.tokens.clone();
            ids.extend(&c.tokens);
            let want = spade_policy::train::token_logprobs(policy.model(), &[ids], temperature)
                .map_err(|e| VllmError(format!("tch log-probs of the probe: {e}")))?
                .pop()
                .unwrap_or_default();
            let want: Vec<f32> = want.into_iter().skip(req.tokens.len()).collect();
            let (_, gap, _) = logprob_gap(&c.logprobs, &want, &vec![true; want.len()]);
            if c.tokens.is_empty() || !gap.is_finite() || gap > self.probe_tolerance {
                return Err(VllmError(format!(
                    "{} does not serve the policy's weights: its log-probs of a probe differ \
                     from tch's by up to {gap:.3e} (allowed {:.1e}). Is it serving another \
                     model, or started without --logprobs-mode processed_logprobs?",
                    s.url, self.probe_tolerance
                )));
            }
            worst = worst.max(gap);
            if let Ok(mut p) = self.probe.lock()
                && (p.is_none() || s.url == self.servers[0].url)
            {
                *p = Some(Probe {
                    body: body.clone(),
                    tokens: c.tokens.clone(),
                    want,
                });
            }
        }
        Ok(worst)
    }
}

/// `step-N-<12 hex of the weights fingerprint>`: the label names the step and the weights.
fn version_label(policy: &Policy, label: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(policy.weights_fingerprint().as_bytes());
    let hex: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{label}-{hex}")
}

/// A fixed text the servers and tch score after every sync.
fn probe_ids(tok: &Tokenizer) -> VResult<Vec<i64>> {
    let ids = tok
        .encode(
            "<|im_start|>user\nWhat is 2 + 3? Answer in a box.<|im_end|>\n<|im_start|>assistant\n",
        )
        .map_err(|e| VllmError(format!("cannot encode the probe: {e}")))?;
    if ids.len() < 2 {
        return Err(VllmError("the probe encodes to fewer than 2 tokens".into()));
    }
    Ok(ids)
}

/// `policy` as safetensors in `dir`, written beside it first so a server never reads half.
pub(super) fn write_weights(policy: &Policy, dir: &Path) -> VResult<()> {
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    policy.save_untied(&tmp).map_err(|e| {
        VllmError(format!(
            "cannot write the weights to {}: {e}",
            tmp.display()
        ))
    })?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir)
        .map_err(|e| VllmError(format!("cannot move the weights to {}: {e}", dir.display())))
}
