//! The rank commands' wire form: every command round-trips bit for bit, and a truncated or
//! unknown one is an error, not a panic.

use super::*;
use spade_policy::train::MaskedSeq;

fn sample(i: i64, behavior: bool) -> GrpoSample {
    GrpoSample {
        seq: MaskedSeq {
            ids: vec![1, i, 300 + i],
            loss_mask: vec![false, false, true],
        },
        old_logprobs: vec![0.0, -1.25, -0.1 * i as f32],
        behavior_logprobs: behavior.then(|| vec![0.0, -1.5, f32::MIN_POSITIVE]),
        advantage: -0.75,
        weight: 0.5,
    }
}

#[test]
fn commands_round_trip_bit_for_bit() -> Result<(), WorkerError> {
    let cmds = [
        FollowerCommand::Start {
            model_dir: "/runs/a/checkpoints/latest".into(),
            fingerprint: "abc".into(),
            optimizer: None,
        },
        FollowerCommand::Start {
            model_dir: "m".into(),
            fingerprint: "f".into(),
            optimizer: Some(crate::state::ShardSource {
                path: "m/optimizer.safetensors".into(),
                saved: SavedOptimizer::Shards(3),
                masters: true,
            }),
        },
        FollowerCommand::Start {
            model_dir: "m".into(),
            fingerprint: "f".into(),
            optimizer: Some(crate::state::ShardSource {
                path: "m/optimizer.safetensors".into(),
                saved: SavedOptimizer::Whole,
                masters: false,
            }),
        },
        FollowerCommand::Train(vec![sample(3, false), sample(4, true)]),
        FollowerCommand::Train(vec![]),
        FollowerCommand::SaveOptimizer("/x/optimizer.safetensors".into()),
        FollowerCommand::Finish,
    ];
    for c in cmds {
        let bytes = c.encode()?;
        assert_eq!(FollowerCommand::decode(&bytes)?.encode()?, bytes);
    }
    // The samples themselves, bit for bit (the encoding is the check above otherwise).
    let samples = vec![sample(3, false), sample(4, true)];
    match FollowerCommand::decode(&FollowerCommand::Train(samples.clone()).encode()?)? {
        FollowerCommand::Train(back) => assert_eq!(back, samples),
        other => panic!("decoded {other:?}"),
    }
    Ok(())
}

#[test]
fn a_truncated_or_unknown_command_is_an_error_not_a_panic() -> Result<(), WorkerError> {
    let bytes = FollowerCommand::Train(vec![sample(3, true)]).encode()?;
    for cut in 0..bytes.len() {
        let e = FollowerCommand::decode(&bytes[..cut]);
        assert!(e.is_err(), "{cut} of {} bytes decoded", bytes.len());
    }
    let mut long = bytes.clone();
    long.push(0);
    assert!(FollowerCommand::decode(&long).is_err());
    // A count larger than the message.
    let mut huge = vec![TRAIN];
    huge.extend(u64::MAX.to_le_bytes());
    let e = FollowerCommand::decode(&huge).err().map(|e| e.to_string());
    assert!(e.is_some_and(|e| e.contains("count")));
    assert!(FollowerCommand::decode(&[9]).is_err());
    assert!(FollowerCommand::decode(&[FINISH, 0]).is_err());
    Ok(())
}
