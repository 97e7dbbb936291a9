//! Tests of the job queue against a real PostgreSQL (`#[sqlx::test]` makes a fresh database).

use super::*;
use std::collections::HashSet;
use std::time::Duration;

async fn runs(pool: &PgPool, n: usize) -> Result<Vec<i64>, sqlx::Error> {
    testing::seed_runs(pool, n).await
}

async fn run_status(pool: &PgPool, run_id: i64) -> Result<String, sqlx::Error> {
    testing::run_status(pool, run_id).await
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn a_job_goes_from_queue_to_success_and_the_run_follows(
    pool: PgPool,
) -> Result<(), JobError> {
    let run = runs(&pool, 1).await?[0];
    let job = enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    assert_eq!((job.state, job.attempt), (JobState::Queued, 1));

    // Another executor's queue does not see it.
    assert!(claim_next(&pool, JobExecutor::Ray, "n1").await?.is_none());
    let claimed = claim_next(&pool, JobExecutor::Local, "n1")
        .await?
        .expect("one queued job");
    assert_eq!(claimed.id, job.id);
    assert_eq!(claimed.state, JobState::Claimed);
    assert_eq!(claimed.claimed_by.as_deref(), Some("n1"));
    assert_eq!(run_status(&pool, run).await?, "starting");
    assert!(claim_next(&pool, JobExecutor::Local, "n2").await?.is_none());

    let state = record_started(&pool, job.id, "pid:42:1000", Some("/tmp/x.log")).await?;
    assert_eq!(state, JobState::Running);
    assert_eq!(run_status(&pool, run).await?, "running");
    assert_eq!(list_active(&pool, JobExecutor::Local, "n1").await?.len(), 1);
    assert!(
        list_active(&pool, JobExecutor::Local, "n2")
            .await?
            .is_empty()
    );
    assert_eq!(heartbeat(&pool, "n1").await?, 1);

    let done = finish(&pool, job.id, JobState::Succeeded, Some(0), "exit status 0").await?;
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at.is_some());
    assert_eq!(done.external_id.as_deref(), Some("pid:42:1000"));
    assert_eq!(run_status(&pool, run).await?, "succeeded");
    // Final means final.
    let again = finish(&pool, job.id, JobState::Failed, None, "late").await;
    assert!(matches!(again, Err(JobError::NotActive { job_id }) if job_id == job.id));
    assert!(
        list_active(&pool, JobExecutor::Local, "n1")
            .await?
            .is_empty()
    );

    // A resume is the next attempt.
    let second = enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        latest_for_run(&pool, run).await?.map(|j| j.id),
        Some(second.id)
    );
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn a_run_has_at_most_one_unfinished_job(pool: PgPool) -> Result<(), JobError> {
    let run = runs(&pool, 1).await?[0];
    enqueue(&pool, run, JobKind::Train, JobExecutor::Local).await?;
    let twice = enqueue(&pool, run, JobKind::Train, JobExecutor::Ray).await;
    assert!(matches!(twice, Err(JobError::AlreadyActive { run_id }) if run_id == run));
    let missing = enqueue(&pool, run + 1000, JobKind::Train, JobExecutor::Local).await;
    assert!(matches!(missing, Err(JobError::NoSuchRun { .. })));
    let not_final = finish(&pool, 1, JobState::Running, None, "").await;
    assert!(matches!(
        not_final,
        Err(JobError::NotFinal {
            state: JobState::Running
        })
    ));
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn cancel_ends_a_queued_job_and_flags_a_running_one(pool: PgPool) -> Result<(), JobError> {
    let ids = runs(&pool, 2).await?;
    let queued = enqueue(&pool, ids[0], JobKind::Train, JobExecutor::Local).await?;
    let running = enqueue(&pool, ids[1], JobKind::Train, JobExecutor::Local).await?;

    assert_eq!(
        request_cancel_for_run(&pool, ids[0]).await?,
        Some(JobState::Cancelled)
    );
    assert_eq!(run_status(&pool, ids[0]).await?, "cancelled");
    let q = get(&pool, queued.id).await?.expect("exists");
    assert!(q.finished_at.is_some());
    assert_eq!(request_cancel_for_run(&pool, ids[0]).await?, None);

    let claimed = claim_next(&pool, JobExecutor::Local, "n1")
        .await?
        .expect("the second job");
    assert_eq!(claimed.id, running.id);
    // Cancel while the scheduler is still starting it: starting does not undo the request.
    assert_eq!(
        request_cancel_for_run(&pool, ids[1]).await?,
        Some(JobState::Cancelling)
    );
    assert_eq!(
        record_started(&pool, running.id, "spade-run-2-a1", None).await?,
        JobState::Cancelling
    );
    assert_eq!(run_status(&pool, ids[1]).await?, "cancelling");
    let active = list_active(&pool, JobExecutor::Local, "n1").await?;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].state, JobState::Cancelling);
    finish(&pool, running.id, JobState::Cancelled, None, "stopped").await?;
    assert_eq!(run_status(&pool, ids[1]).await?, "cancelled");
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn concurrent_claimers_never_claim_a_job_twice(pool: PgPool) -> Result<(), JobError> {
    const JOBS: usize = 60;
    let mut queued = HashSet::new();
    for run in runs(&pool, JOBS).await? {
        queued.insert(
            enqueue(&pool, run, JobKind::Train, JobExecutor::Local)
                .await?
                .id,
        );
    }
    let claimer = |node: &'static str| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(job) = claim_next(&pool, JobExecutor::Local, node).await? {
                assert_eq!(job.claimed_by.as_deref(), Some(node));
                got.push(job.id);
                tokio::task::yield_now().await;
            }
            Ok::<_, JobError>(got)
        })
    };
    let (a, b) = tokio::join!(claimer("a"), claimer("b"));
    let a = a.expect("claimer a panicked")?;
    let b = b.expect("claimer b panicked")?;
    let mut all: Vec<i64> = a.iter().chain(&b).copied().collect();
    all.sort_unstable();
    let before_dedup = all.len();
    all.dedup();
    assert_eq!(
        before_dedup,
        all.len(),
        "a job was claimed twice: a={a:?} b={b:?}"
    );
    assert_eq!(all.into_iter().collect::<HashSet<_>>(), queued);
    assert_eq!(
        list_active(&pool, JobExecutor::Local, "a").await?.len(),
        a.len()
    );
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn a_claim_skips_a_row_another_transaction_holds(pool: PgPool) -> Result<(), JobError> {
    let ids = runs(&pool, 2).await?;
    let first = enqueue(&pool, ids[0], JobKind::Train, JobExecutor::Ray).await?;
    let second = enqueue(&pool, ids[1], JobKind::Train, JobExecutor::Ray).await?;
    let mut holder = pool.begin().await?;
    sqlx::query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(first.id)
        .execute(&mut *holder)
        .await?;
    // Without SKIP LOCKED this would wait for `holder` (forever, here).
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        claim_next(&pool, JobExecutor::Ray, "n"),
    )
    .await
    .expect("claim_next waited on a locked row")?;
    assert_eq!(got.map(|j| j.id), Some(second.id));
    holder.rollback().await?;
    let got = claim_next(&pool, JobExecutor::Ray, "n").await?;
    assert_eq!(got.map(|j| j.id), Some(first.id));
    Ok(())
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn the_queue_follows_what_the_runs_api_records(pool: PgPool) -> Result<(), JobError> {
    let ids = runs(&pool, 3).await?;
    // Three queued runs without jobs: each gets its first attempt, once.
    assert_eq!(
        sync_with_runs(&pool).await?,
        Synced {
            enqueued: 3,
            cancelled: 0
        }
    );
    assert_eq!(sync_with_runs(&pool).await?, Synced::default());
    for &run in &ids {
        assert_eq!(
            latest_for_run(&pool, run).await?.map(|j| j.attempt),
            Some(1)
        );
    }
    let claimed = claim_next(&pool, JobExecutor::Local, "n")
        .await?
        .expect("a job");
    assert_eq!(claimed.run_id, ids[0]);
    record_started(&pool, claimed.id, "pid:9:9", None).await?;

    // The API cancels a running run (-> cancelling) and a queued one (-> cancelled).
    testing::set_run_status(&pool, ids[0], "cancelling").await?;
    testing::set_run_status(&pool, ids[1], "cancelled").await?;
    assert_eq!(
        sync_with_runs(&pool).await?,
        Synced {
            enqueued: 0,
            cancelled: 2
        }
    );
    assert_eq!(
        get(&pool, claimed.id).await?.map(|j| j.state),
        Some(JobState::Cancelling)
    );
    let j1 = latest_for_run(&pool, ids[1]).await?.expect("job");
    assert_eq!(j1.state, JobState::Cancelled);
    assert_eq!(run_status(&pool, ids[0]).await?, "cancelling");
    assert_eq!(run_status(&pool, ids[1]).await?, "cancelled");

    // A running job's run status is not overwritten by a late start record.
    assert_eq!(
        record_started(&pool, claimed.id, "pid:9:9", None).await?,
        JobState::Cancelling
    );
    assert_eq!(run_status(&pool, ids[0]).await?, "cancelling");
    finish(&pool, claimed.id, JobState::Cancelled, None, "stopped").await?;

    // Resume (-> queued) brings the next attempt.
    testing::set_run_status(&pool, ids[1], "queued").await?;
    assert_eq!(
        sync_with_runs(&pool).await?,
        Synced {
            enqueued: 1,
            cancelled: 0
        }
    );
    assert_eq!(
        latest_for_run(&pool, ids[1]).await?.map(|j| j.attempt),
        Some(2)
    );
    Ok(())
}

/// Starts the run's next attempt the way the scheduler does (sync, claim, record); returns it.
async fn next_running_attempt(pool: &PgPool, run: i64) -> Result<Job, JobError> {
    sync_with_runs(pool).await?;
    let job = claim_next(pool, JobExecutor::Local, "n1")
        .await?
        .expect("the run's next attempt is queued");
    assert_eq!(job.run_id, run);
    record_started(pool, job.id, &format!("pid:{}:1", 100 + job.attempt), None).await?;
    Ok(job)
}

#[sqlx::test(migrator = "crate::MIGRATOR")]
async fn a_lost_job_requeues_its_run_three_times_in_a_row_then_no_more(
    pool: PgPool,
) -> Result<(), JobError> {
    let run = runs(&pool, 1).await?[0];
    for attempt in 1..=3 {
        let job = next_running_attempt(&pool, run).await?;
        assert_eq!(job.attempt, attempt);
        assert!(requeue_lost(&pool, job.id, "process gone").await?);
        assert_eq!(run_status(&pool, run).await?, "queued");
        let ended = list_active(&pool, JobExecutor::Local, "n1").await?;
        assert!(ended.is_empty(), "attempt {attempt} still active");
    }
    // A fourth loss in a row is not requeued: the caller fails the run as usual.
    let fourth = next_running_attempt(&pool, run).await?;
    assert!(!requeue_lost(&pool, fourth.id, "process gone").await?);
    assert_eq!(run_status(&pool, run).await?, "running");
    finish(&pool, fourth.id, JobState::Failed, None, "process gone").await?;
    assert_eq!(run_status(&pool, run).await?, "failed");

    // An attempt that ended otherwise (resumed by hand after that failure) starts the count anew.
    testing::set_run_status(&pool, run, "queued").await?;
    let fifth = next_running_attempt(&pool, run).await?;
    assert_eq!(fifth.attempt, 5);
    assert!(requeue_lost(&pool, fifth.id, "process gone").await?);

    // Nor is a run being cancelled queued again.
    let sixth = next_running_attempt(&pool, run).await?;
    testing::set_run_status(&pool, run, "cancelling").await?;
    assert!(!requeue_lost(&pool, sixth.id, "process gone").await?);
    Ok(())
}
