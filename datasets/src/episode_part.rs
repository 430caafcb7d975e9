//! One finished episode as the server keeps it until its submission's trajectory file is
//! written: a flat file of the [`EpisodeRecord`], with no HDF5 in it.
//!
//! Why not a one-episode HDF5 file: HDF5 takes one global lock for every call, so a server
//! that stored each episode as its own HDF5 file and then copied them all into the submission's
//! file ran the library twice per episode on one core, after the last step of a batch that
//! ends together (1024 two-second episodes on 2 cores: 1.4 s of storing, then a 0.8 s merge;
//! 4096 on a 16-core H100 machine: 12.5 s and 4.3 s). These files are written on every core at
//! once, and the library runs once per episode, when the submission's file is written
//! ([`crate::trajectory_file`], whose layout is the published one; this one is internal).
//!
//! Layout (little-endian): the 8-byte magic `ARENAEP1`; the episode's fields in
//! [`EpisodeRecord`] order (`u32` episode; strings as a `u32` byte length and UTF-8 bytes;
//! `u64` seed; `u32` dr_level; status; reason; `f64` start_s and duration_s; a `u8` flag and an
//! `f64` for scored_until_s); the `u64` row count; then each array of [`crate::trajectory::DATASETS`]
//! and [`crate::trajectory::OPTIONAL_DATASETS`] in order, as a `u64` value count and its `f64`
//! values. A file shorter or longer than that, or with an array of the wrong size, is refused.

use std::io::Write;

use crate::trajectory::{DATASETS, OPTIONAL_DATASETS};
use crate::trajectory_file::EpisodeRecord;

/// The first bytes of every part file.
pub const MAGIC: &[u8; 8] = b"ARENAEP1";

/// A part file that cannot be read: what is wrong, and where (byte offset).
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("not an episode part (its first bytes are not {:?})", std::str::from_utf8(MAGIC).unwrap_or_default())]
    NotAPart,
    #[error("truncated at byte {offset}: {what} needs {needed} more bytes")]
    Truncated { offset: usize, what: String, needed: usize },
    #[error("{what} at byte {offset} is not UTF-8")]
    NotUtf8 { offset: usize, what: &'static str },
    #[error("{dataset} holds {got} values, not {rows} rows × {width}")]
    WrongLength {
        dataset: &'static str,
        rows: usize,
        width: usize,
        got: usize,
    },
    #[error("{extra} bytes after the last array")]
    TrailingBytes { extra: usize },
    #[error("writing: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether `bytes` start as a part file does (an older server stored each episode as HDF5).
pub fn is_part(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Writes `record` as a part file. Array lengths are checked first; nothing is written when one
/// is wrong.
pub fn write(record: &EpisodeRecord, out: &mut impl Write) -> Result<(), PartError> {
    let rows = record.num_rows();
    let arrays = arrays(record);
    for ((dataset, width, optional), values) in &arrays {
        if values.len() != rows * width && !(*optional && values.is_empty()) {
            return Err(PartError::WrongLength {
                dataset,
                rows,
                width: *width,
                got: values.len(),
            });
        }
    }
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&record.episode.to_le_bytes());
    put_str(&mut head, &record.motion);
    put_str(&mut head, &record.category);
    head.extend_from_slice(&record.seed.to_le_bytes());
    head.extend_from_slice(&record.dr_level.to_le_bytes());
    put_str(&mut head, &record.status);
    put_str(&mut head, &record.reason);
    head.extend_from_slice(&record.start_s.to_le_bytes());
    head.extend_from_slice(&record.duration_s.to_le_bytes());
    head.push(record.scored_until_s.is_some() as u8);
    head.extend_from_slice(&record.scored_until_s.unwrap_or(0.0).to_le_bytes());
    head.extend_from_slice(&(rows as u64).to_le_bytes());
    out.write_all(&head)?;
    for (_, values) in arrays {
        out.write_all(&(values.len() as u64).to_le_bytes())?;
        write_f64s(values, out)?;
    }
    Ok(())
}

/// The values' little-endian bytes: on a little-endian machine the slice's own memory, with no
/// conversion (a part is about 400 kB per two-second episode, written for every episode).
#[cfg(target_endian = "little")]
fn write_f64s(values: &[f64], out: &mut impl Write) -> std::io::Result<()> {
    // SAFETY: f64 has no padding and u8 no alignment: the slice's bytes, in the machine's
    // (little-endian) order.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
    out.write_all(bytes)
}

#[cfg(not(target_endian = "little"))]
fn write_f64s(values: &[f64], out: &mut impl Write) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(64 * 1024);
    for part in values.chunks(8 * 1024) {
        buf.clear();
        buf.extend(part.iter().flat_map(|v| v.to_le_bytes()));
        out.write_all(&buf)?;
    }
    Ok(())
}

/// `raw` (a multiple of 8 bytes) as little-endian f64 values.
fn read_f64s(raw: &[u8]) -> Vec<f64> {
    let mut values = vec![0.0f64; raw.len() / 8];
    #[cfg(target_endian = "little")]
    {
        // SAFETY: as in `write_f64s`; every bit pattern is a valid f64.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                values.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(values.as_slice()),
            )
        };
        bytes.copy_from_slice(raw);
    }
    #[cfg(not(target_endian = "little"))]
    for (v, b) in values.iter_mut().zip(raw.chunks_exact(8)) {
        *v = f64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
    values
}

/// Reads a part file's bytes back into the record it was written from.
pub fn read(bytes: &[u8]) -> Result<EpisodeRecord, PartError> {
    if !is_part(bytes) {
        return Err(PartError::NotAPart);
    }
    let mut r = Reader { bytes, at: MAGIC.len() };
    let mut record = EpisodeRecord {
        episode: u32::from_le_bytes(r.take("episode")?),
        motion: r.string("motion")?,
        category: r.string("category")?,
        seed: u64::from_le_bytes(r.take("seed")?),
        dr_level: u32::from_le_bytes(r.take("dr_level")?),
        status: r.string("status")?,
        reason: r.string("reason")?,
        start_s: f64::from_le_bytes(r.take("start_s")?),
        duration_s: f64::from_le_bytes(r.take("duration_s")?),
        ..Default::default()
    };
    let [has_scored_until] = r.take("scored_until_s")?;
    let scored_until = f64::from_le_bytes(r.take("scored_until_s")?);
    record.scored_until_s = (has_scored_until != 0).then_some(scored_until);
    let rows = u64::from_le_bytes(r.take("rows")?) as usize;
    let required = DATASETS.iter().map(|(n, w)| (*n, *w, false));
    let optional = OPTIONAL_DATASETS.iter().map(|(n, w)| (*n, *w, true));
    let mut arrays = Vec::with_capacity(DATASETS.len() + OPTIONAL_DATASETS.len());
    for (dataset, width, may_be_empty) in required.chain(optional) {
        let count = u64::from_le_bytes(r.take(dataset)?) as usize;
        if count != rows.saturating_mul(width) && !(may_be_empty && count == 0) {
            return Err(PartError::WrongLength {
                dataset,
                rows,
                width,
                got: count,
            });
        }
        let raw = r.slice(dataset, count.saturating_mul(8))?;
        arrays.push(read_f64s(raw));
    }
    let mut arrays = arrays.into_iter();
    let targets = record.rows.arrays_mut().into_iter();
    for target in targets {
        *target = arrays.next().expect("one per required dataset");
    }
    for target in record.rows.optional_arrays_mut() {
        *target = arrays.next().expect("one per optional dataset");
    }
    match bytes.len() - r.at {
        0 => Ok(record),
        extra => Err(PartError::TrailingBytes { extra }),
    }
}

/// An array's name, width and whether it may be empty.
type ArrayKind = (&'static str, usize, bool);

/// Every array with its kind, in file order.
fn arrays(record: &EpisodeRecord) -> Vec<(ArrayKind, &[f64])> {
    let required = DATASETS.iter().map(|(n, w)| (*n, *w, false)).zip(record.rows.arrays());
    let optional = OPTIONAL_DATASETS
        .iter()
        .map(|(n, w)| (*n, *w, true))
        .zip(record.rows.optional_arrays());
    required.chain(optional).collect()
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn slice(&mut self, what: &str, n: usize) -> Result<&'a [u8], PartError> {
        let left = self.bytes.len() - self.at;
        if n > left {
            return Err(PartError::Truncated {
                offset: self.at,
                what: what.to_owned(),
                needed: n - left,
            });
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn take<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PartError> {
        Ok(self.slice(what, N)?.try_into().expect("N bytes"))
    }

    fn string(&mut self, what: &'static str) -> Result<String, PartError> {
        let len = u32::from_le_bytes(self.take(what)?) as usize;
        let offset = self.at;
        let raw = self.slice(what, len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| PartError::NotUtf8 { offset, what })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> EpisodeRecord {
        let rows = 3;
        let mut r = EpisodeRecord {
            episode: 7,
            motion: "walk".into(),
            category: "locomotion".into(),
            seed: 42,
            dr_level: 3,
            status: "fell".into(),
            reason: "the robot fell at step 2 (ü)".into(),
            start_s: 1.5,
            duration_s: 0.04,
            scored_until_s: Some(0.02),
            ..Default::default()
        };
        for (i, (v, (_, w))) in r.rows.arrays_mut().into_iter().zip(DATASETS).enumerate() {
            *v = (0..rows * w).map(|k| (i * 1000 + k) as f64 * 0.1 - 7.0).collect();
        }
        r.rows.torques = vec![f64::NAN; rows * 29];
        r
    }

    #[test]
    fn a_record_round_trips_bit_for_bit() {
        let mut bytes = Vec::new();
        write(&record(), &mut bytes).unwrap();
        let back = read(&bytes).unwrap();
        let bits = |r: &EpisodeRecord| r.rows.torques.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&record()));
        let (mut a, mut b) = (back, record());
        a.rows.torques.clear();
        b.rows.torques.clear();
        assert_eq!(a, b);
        let empty = EpisodeRecord::default();
        let mut bytes = Vec::new();
        write(&empty, &mut bytes).unwrap();
        assert_eq!(read(&bytes).unwrap(), empty);
    }

    #[test]
    fn damaged_parts_are_refused_with_the_reason() {
        let mut bytes = Vec::new();
        write(&record(), &mut bytes).unwrap();
        let err = read(&bytes[..bytes.len() - 3]).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("feedforward"), "{err}");
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read(&longer).unwrap_err().to_string().contains("1 bytes after"));
        assert!(matches!(read(b"\x89HDF\r\n\x1a\n"), Err(PartError::NotAPart)));
        let mut wrong = record();
        wrong.rows.qvel.pop();
        let err = write(&wrong, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("qvel holds 104 values, not 3 rows × 35"), "{err}");
    }
}
