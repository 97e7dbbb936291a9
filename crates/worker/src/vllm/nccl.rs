//! Weight sync GPU to GPU (`vllm.weight_sync = "nccl"`, issue 42 item 4): the trainer and every
//! started server's workers join one NCCL communicator through vLLM's weight-transfer engine
//! (servers started with `--weight-transfer-config '{"backend": "nccl"}'`), and each sync
//! broadcasts the policy's tensors from the trainer's GPU while the servers load them layer by
//! layer. Nothing is written to disk.
//!
//! vLLM 0.32's routes (`vllm/entrypoints/rl/online/api_router.py`, the worker side in
//! `vllm/distributed/weight_transfer/nccl_engine.py`): the trainer mints an `ncclUniqueId` and
//! hands it to every server as `nccl_unique_id_b64` in `POST /init_weight_transfer_engine`
//! (vLLM's path for trainers that are not torch.distributed ranks), each server's workers
//! taking ranks from its `rank_offset` on (`GET /get_world_size` says how many it has), the
//! trainer rank 0; every rank then makes a one-element all-reduce. A sync is `/pause`,
//! `/start_weight_update`, `/update_weights` with the names, dtypes and shapes (unpacked: one
//! broadcast per tensor, in that order) while the trainer broadcasts, `/finish_weight_update`
//! with the version label, `/resume`. The routes block until their NCCL side is done, so they
//! are sent from threads while this one runs the trainer's side.
//!
//! Only the CUDA build has NCCL, and no vLLM has been run on a GPU here (the GPU machine lent
//! to sessions has no vLLM): this path is written against vLLM 0.32's source and has not run.

use super::*;
use base64::Engine as _;
use spade::config::WeightSync;
use spade_dist::NcclLink;

/// How weights reach `opts`' servers for a policy on `device`: `vllm.weight_sync` with `auto`
/// decided, or why `nccl` cannot run here.
pub(super) fn resolve(opts: &FleetOptions, device: spade_policy::Device) -> VResult<WeightSync> {
    let gpu = matches!(device, spade_policy::Device::Cuda(_));
    let built = spade_dist::nccl_built();
    match opts.weight_sync {
        WeightSync::Disk => Ok(WeightSync::Disk),
        WeightSync::Auto => Ok(if gpu && built && opts.start > 0 {
            WeightSync::Nccl
        } else {
            WeightSync::Disk
        }),
        WeightSync::Nccl => {
            if !gpu {
                return Err(VllmError(format!(
                    "vllm.weight_sync = \"nccl\" broadcasts from the policy's GPU, but the \
                     policy is on {device:?} (set model.device = \"cuda\", or \
                     vllm.weight_sync = \"disk\")"
                )));
            }
            if !built {
                return Err(VllmError(
                    "vllm.weight_sync = \"nccl\", but this binary's spade-dist has no NCCL \
                     (build the CUDA worker with scripts/build-cuda --fetch, or set \
                     vllm.weight_sync = \"disk\")"
                        .into(),
                ));
            }
            if opts.start == 0 {
                return Err(VllmError(
                    "vllm.weight_sync = \"nccl\" needs servers the worker starts (vllm.start): \
                     it starts them with vLLM's NCCL weight transfer on"
                        .into(),
                ));
            }
            Ok(WeightSync::Nccl)
        }
    }
}

/// The trainer's end of the communicator.
pub(super) struct NcclSync {
    link: Mutex<NcclLink>,
}

impl std::fmt::Debug for NcclSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclSync")
    }
}

/// `(rank_offset, world_size)` of each server in a group where the trainer is rank 0 and server
/// `i` has `sizes[i]` workers; the group's size last.
pub(super) fn rank_offsets(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut next = 1;
    let offsets = sizes
        .iter()
        .map(|&n| {
            let o = next;
            next += n;
            o
        })
        .collect();
    (offsets, next)
}

/// `/update_weights`' body for `weights`, in their order.
pub(super) fn update_info(weights: &[spade_policy::NamedWeight]) -> serde_json::Value {
    let names: Vec<&str> = weights.iter().map(|w| w.name.as_str()).collect();
    let dtypes: Vec<&str> = weights.iter().map(|w| w.dtype_name()).collect();
    let shapes: Vec<Vec<i64>> = weights.iter().map(|w| w.shape()).collect();
    serde_json::json!({"update_info": {"names": names, "dtype_names": dtypes, "shapes": shapes}})
}

/// Runs `post(i)` for every server on its own thread while `here` runs on this one; the first
/// server's error wins over `here`'s (it says why the other side did not come), then `here`'s.
fn beside<T>(
    servers: &[Server],
    post: impl Fn(usize, &Server) -> VResult<()> + Sync,
    here: impl FnOnce() -> VResult<T>,
) -> VResult<T> {
    std::thread::scope(|scope| {
        let posts: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let post = &post;
                scope.spawn(move || post(i, s))
            })
            .collect();
        let mine = here();
        let mut first = None;
        for p in posts {
            let r = p
                .join()
                .unwrap_or_else(|_| Err(VllmError("a sync thread panicked".into())));
            if let (Err(e), None) = (r, &first) {
                first = Some(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => mine,
        }
    })
}

impl NcclSync {
    /// Joins every server's workers and the trainer (rank 0, on `gpu`) in one communicator.
    pub(super) fn connect(
        servers: &[Server],
        client: &reqwest::blocking::Client,
        gpu: usize,
        timeout: Duration,
    ) -> VResult<Self> {
        let mut sizes = Vec::with_capacity(servers.len());
        for s in servers {
            sizes.push(s.world_size(client)?);
        }
        let (offsets, world) = rank_offsets(&sizes);
        let id =
            NcclLink::unique_id().map_err(|e| VllmError(format!("cannot mint an NCCL id: {e}")))?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(id);
        let link = beside(
            servers,
            |i, s| {
                let body = serde_json::json!({"init_info": {
                    "rank_offset": offsets[i],
                    "world_size": world,
                    "nccl_unique_id_b64": b64,
                    "packed": false,
                }});
                s.post(client, "/init_weight_transfer_engine", &body)
                    .map(drop)
            },
            || {
                let mut link = NcclLink::join(&id, 0, world, gpu, timeout).map_err(|e| {
                    VllmError(format!("joining the servers' NCCL weight transfer: {e}"))
                })?;
                link.warm_up()
                    .map_err(|e| VllmError(format!("the NCCL warm-up all-reduce: {e}")))?;
                Ok(link)
            },
        )?;
        Ok(NcclSync {
            link: Mutex::new(link),
        })
    }

    /// Loads `policy` into every (paused) server as `version`; the caller resumes them.
    pub(super) fn load(
        &self,
        servers: &[Server],
        client: &reqwest::blocking::Client,
        policy: &Policy,
        version: &str,
    ) -> VResult<()> {
        let mut link = self
            .link
            .lock()
            .map_err(|_| VllmError("the NCCL link is poisoned".into()))?;
        for s in servers {
            s.post(client, "/start_weight_update", &serde_json::json!({}))?;
        }
        let mut weights = policy.untied_weights();
        let body = update_info(&weights);
        beside(
            servers,
            |_, s| s.post(client, "/update_weights", &body).map(drop),
            || {
                link.broadcast_weights(&mut weights, 0)
                    .map_err(|e| VllmError(format!("broadcasting the weights: {e}")))
            },
        )?;
        for s in servers {
            s.post(
                client,
                "/finish_weight_update",
                &serde_json::json!({"weight_version": version}),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_the_trainer_server_by_server() {
        assert_eq!(rank_offsets(&[1]), (vec![1], 2));
        assert_eq!(rank_offsets(&[2, 2, 1]), (vec![1, 3, 5], 6));
        assert_eq!(rank_offsets(&[]), (vec![], 1));
    }

    fn opts(start: u32, sync: WeightSync) -> FleetOptions {
        let cfg = spade::config::RunConfig::default();
        let mut o = FleetOptions::from_config(&cfg, Path::new("/tmp"));
        o.start = start;
        o.weight_sync = sync;
        o
    }

    #[test]
    fn auto_syncs_through_disk_where_nccl_cannot_run() -> VResult<()> {
        let cpu = spade_policy::Device::Cpu;
        assert_eq!(resolve(&opts(1, WeightSync::Auto), cpu)?, WeightSync::Disk);
        assert_eq!(resolve(&opts(1, WeightSync::Disk), cpu)?, WeightSync::Disk);
        // Servers reached by URL stay on disk even for a GPU policy.
        let gpu = spade_policy::Device::Cuda(0);
        assert_eq!(resolve(&opts(0, WeightSync::Auto), gpu)?, WeightSync::Disk);
        let want = if spade_dist::nccl_built() {
            WeightSync::Nccl
        } else {
            WeightSync::Disk
        };
        assert_eq!(resolve(&opts(1, WeightSync::Auto), gpu)?, want);
        Ok(())
    }

    #[test]
    fn nccl_asked_where_it_cannot_run_is_refused_with_the_reason() {
        let why = |o: &FleetOptions, d| match resolve(o, d) {
            Ok(m) => panic!("accepted as {m:?}"),
            Err(e) => e.0,
        };
        let e = why(&opts(1, WeightSync::Nccl), spade_policy::Device::Cpu);
        assert!(e.contains("model.device") && e.contains("\"disk\""), "{e}");
        let e = why(&opts(0, WeightSync::Nccl), spade_policy::Device::Cuda(0));
        if spade_dist::nccl_built() {
            assert!(e.contains("vllm.start"), "{e}");
        } else {
            assert!(e.contains("scripts/build-cuda"), "{e}");
        }
    }
}
