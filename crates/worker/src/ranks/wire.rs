//! The binary form of the samples rank 0 sends the other ranks: little-endian, so every rank
//! trains on exactly the floats rank 0 has; a malformed message is an error, never a panic.

use spade_policy::grpo::GrpoSample;
use spade_policy::train::MaskedSeq;

pub(super) fn put_u64(out: &mut Vec<u8>, v: usize) {
    out.extend((v as u64).to_le_bytes());
}

pub(super) fn encode_sample(out: &mut Vec<u8>, s: &GrpoSample) {
    put_u64(out, s.seq.ids.len());
    for id in &s.seq.ids {
        out.extend(id.to_le_bytes());
    }
    put_u64(out, s.seq.loss_mask.len());
    out.extend(s.seq.loss_mask.iter().map(|&m| u8::from(m)));
    let floats = |out: &mut Vec<u8>, v: &[f32]| {
        put_u64(out, v.len());
        for x in v {
            out.extend(x.to_le_bytes());
        }
    };
    floats(out, &s.old_logprobs);
    match &s.behavior_logprobs {
        Some(b) => {
            out.push(1);
            floats(out, b);
        }
        None => out.push(0),
    }
    out.extend(s.advantage.to_le_bytes());
    out.extend(s.weight.to_le_bytes());
}

pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "{n} bytes wanted at offset {} of {}",
                self.at,
                self.bytes.len()
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A count, checked against the bytes left (each element at least one byte).
    pub(super) fn len(&mut self) -> Result<usize, String> {
        let n = u64::from_le_bytes(self.array()?);
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!("a count of {n} with {left} bytes left"));
        }
        Ok(n as usize)
    }

    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    fn floats(&mut self) -> Result<Vec<f32>, String> {
        let n = self.len()?;
        (0..n).map(|_| self.f32()).collect()
    }
}

pub(super) fn decode_sample(r: &mut Reader<'_>) -> Result<GrpoSample, String> {
    let n = r.len()?;
    let ids = (0..n)
        .map(|_| r.array().map(i64::from_le_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let m = r.len()?;
    let loss_mask = r.take(m)?.iter().map(|&b| b != 0).collect();
    let old_logprobs = r.floats()?;
    let behavior_logprobs = match r.array::<1>()? {
        [0] => None,
        [1] => Some(r.floats()?),
        [b] => return Err(format!("behaviour flag {b}")),
    };
    Ok(GrpoSample {
        seq: MaskedSeq { ids, loss_mask },
        old_logprobs,
        behavior_logprobs,
        advantage: r.f32()?,
        weight: r.f32()?,
    })
}
