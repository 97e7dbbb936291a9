//! Round trips of every message through JSON, and the pinned JSON shape the backend reads.

use super::*;
use serde_json::json;

fn record() -> EnvironmentRecord {
    EnvironmentRecord {
        rejection_reason: Some("not_solvable".into()),
        rejection_message: Some("solution() did not win within 25 turns".into()),
        parent_env_id: Some("r1-e2".into()),
        win_rate_hint: Some(0.5),
        designer_reward: Some(-0.5),
        reward_levels: Some(3),
        attempts: 8,
        ..EnvironmentRecord::new(
            "r1-e7",
            4,
            "Logical Deduction",
            EnvKind::ToolUse,
            EnvStatus::Rejected,
            "class KnightsEnv:\n    pass\n",
        )
    }
}

fn every_message() -> Vec<Message> {
    vec![
        Message::RunStarted {
            config: json!({"steps": 6, "designer": {"plateau": {"low": 0.4}}}),
            code_version: "0.1.0+abc".into(),
            total_steps: 6,
        },
        Message::Environment { record: record() },
        Message::EnvironmentScored {
            env_id: "r1-e7".into(),
            step: 8,
            regret: 0.35,
            win_rate_hint: 0.65,
            win_rate_no_hint: 0.3,
            designer_reward: 0.73,
            reward_levels: 2,
        },
        Message::EnvironmentBroken {
            env_id: "r1-e7".into(),
            step: 9,
            seed: 1_234_567,
            reason: "reward_out_of_range".into(),
            message: "with seed 1234567: reward 1000000 is outside [-10, 10]".into(),
        },
        Message::Plays {
            records: vec![PlayRecord {
                env_id: "r1-e7".into(),
                step: 5,
                with_hint: true,
                episode_return: -1.0,
                won: false,
                turns: 2,
                transcript: vec![
                    Turn {
                        role: TurnRole::User,
                        content: "Guess a number \u{1F3B2}".into(),
                    },
                    Turn {
                        role: TurnRole::Assistant,
                        content: "\\boxed{7}".into(),
                    },
                ],
            }],
        },
        Message::Metrics {
            step: 3,
            elapsed_s: 12.5,
            values: BTreeMap::from([("learnable_share".into(), 0.25), ("vendi".into(), 3.0)]),
        },
        Message::Checkpoint {
            step: 6,
            path: "checkpoints/step-6".into(),
            bytes: 1 << 33,
        },
        Message::Progress {
            step: 2,
            total_steps: 6,
            phase: "play".into(),
        },
        Message::Log {
            level: LogLevel::Warn,
            line: "designer slot 3: 8 attempts rejected".into(),
        },
        Message::BenchmarkResult {
            checkpoint_step: None,
            suite: "gsm8k".into(),
            task: "main".into(),
            score: 0.41,
            n: 200,
            stderr: Some(0.035),
            samples: 4,
        },
        Message::Finished {
            status: FinishStatus::Cancelled,
            message: "cancel requested".into(),
        },
    ]
}

#[test]
fn every_message_round_trips_through_json() {
    for (seq, message) in every_message().into_iter().enumerate() {
        let env = Envelope::at("run-9", seq as u64, 1_700_000_000_000, message);
        let text = serde_json::to_string(&env).expect("serialises");
        let back: Envelope = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, env, "{text}");
    }
}

#[test]
fn a_batch_round_trips() {
    let req = IngestRequest {
        envelopes: every_message()
            .into_iter()
            .enumerate()
            .map(|(i, m)| Envelope::new("7", i as u64, m))
            .collect(),
    };
    let back: IngestRequest =
        serde_json::from_str(&serde_json::to_string(&req).expect("serialises")).expect("parses");
    assert_eq!(back, req);
    let reply: IngestReply =
        serde_json::from_value(json!({"acknowledged": ["7/0"], "cancel_requested": true}))
            .expect("parses");
    assert!(reply.cancel_requested);
}

#[test]
fn the_json_shape_is_tagged_by_kind_in_snake_case() {
    let env = Envelope::at(
        "r",
        3,
        5,
        Message::Progress {
            step: 1,
            total_steps: 2,
            phase: "designer".into(),
        },
    );
    assert_eq!(
        serde_json::to_value(&env).expect("serialises"),
        json!({"run_id": "r", "seq": 3, "key": "r/3", "sent_at_ms": 5,
               "message": {"kind": "progress", "step": 1, "total_steps": 2, "phase": "designer"}})
    );
    let v = serde_json::to_value(Message::Environment { record: record() }).expect("serialises");
    assert_eq!(v["kind"], "environment");
    assert_eq!(v["record"]["kind"], "tool_use");
    assert_eq!(v["record"]["status"], "rejected");
    let v = serde_json::to_value(Message::Finished {
        status: FinishStatus::Succeeded,
        message: String::new(),
    })
    .expect("serialises");
    assert_eq!(
        v,
        json!({"kind": "finished", "status": "succeeded", "message": ""})
    );
    let v = serde_json::to_value(Message::BenchmarkResult {
        checkpoint_step: Some(2),
        suite: "s".into(),
        task: "t".into(),
        score: 1.0,
        n: 1,
        stderr: None,
        samples: 1,
    })
    .expect("serialises");
    assert_eq!(v["kind"], "benchmark_result");
    // One sample and no standard error are left out, and a message without them (from a worker
    // older than the fields) reads as exactly that.
    assert!(
        v.get("stderr").is_none() && v.get("samples").is_none(),
        "{v}"
    );
    let old: Message = serde_json::from_value(json!({
        "kind": "benchmark_result", "checkpoint_step": 2, "suite": "s", "task": "t",
        "score": 1.0, "n": 1
    }))
    .expect("an old message reads");
    assert!(matches!(
        old,
        Message::BenchmarkResult {
            stderr: None,
            samples: 1,
            ..
        }
    ));
}

#[test]
fn keys_derive_from_run_and_seq() {
    let e = Envelope::new(
        "run-1",
        42,
        Message::Log {
            level: LogLevel::Info,
            line: "x".into(),
        },
    );
    assert_eq!(e.key, "run-1/42");
    assert!(e.key_is_consistent());
    assert!(e.sent_at_ms > 1_600_000_000_000, "stamped with the clock");
    let mut forged = e.clone();
    forged.key = "run-2/42".into();
    assert!(!forged.key_is_consistent());
}

#[test]
fn unknown_kinds_and_fields_are_rejected() {
    let bad_kind = json!({"run_id": "r", "seq": 1, "key": "r/1", "sent_at_ms": 0,
                          "message": {"kind": "explode"}});
    let err = serde_json::from_value::<Envelope>(bad_kind).expect_err("unknown kind");
    assert!(err.to_string().contains("explode"), "{err}");
    let extra = json!({"run_id": "r", "seq": 1, "key": "r/1", "sent_at_ms": 0, "extra": 1,
                       "message": {"kind": "log", "level": "info", "line": ""}});
    assert!(serde_json::from_value::<Envelope>(extra).is_err());
    let bad_level = json!({"kind": "log", "level": "loud", "line": ""});
    assert!(serde_json::from_value::<Message>(bad_level).is_err());
}

#[test]
fn reports_replace_nul_where_they_are_made_and_keep_everything_else() {
    let line = "print('\\u0000') wrote \u{0} then more";
    let env = Envelope::at(
        "7",
        3,
        0,
        Message::Log {
            level: LogLevel::Info,
            line: line.into(),
        },
    );
    let Message::Log { line: stored, .. } = &env.message else {
        panic!("a log message: {env:?}");
    };
    // The literal backslash-u text stays; only the real NUL becomes U+FFFD.
    assert_eq!(stored, "print('\\u0000') wrote \u{FFFD} then more");
    // Messages without a NUL are untouched (same value, no rewrite).
    let clean = Message::Log {
        level: LogLevel::Warn,
        line: "plain".into(),
    };
    assert_eq!(storable(clean.clone()), clean);
}
