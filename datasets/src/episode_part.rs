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
//! Two layouts (little-endian), told apart by their first 8 bytes:
//!
//! - `ARENAEP2` (written now): the rows in blocks, then the episode's fields. A block is its
//!   `u64` row count, the `u64` byte offset in the file where the next block (or the end)
//!   starts, each array of [`crate::trajectory::DATASETS`] and
//!   [`crate::trajectory::OPTIONAL_DATASETS`] in order as a `u64` value count (rows × width, or
//!   0 for an optional array the episode leaves empty, the same in every block) and its `f64`
//!   values, then any bytes up to that offset (zeros). The end is `u64::MAX` where a block's
//!   row count would be, the episode's fields in [`EpisodeRecord`] order (`u32` episode;
//!   strings as a `u32` byte length and UTF-8 bytes; `u64` seed; `u32` dr_level; status;
//!   reason; `f64` start_s and duration_s; a `u8` flag and an `f64` for scored_until_s) and
//!   the `u64` row count of all blocks; nothing follows it. Blocks let the server write an
//!   episode's rows while it runs, each at an offset aligned for writes past the page cache
//!   (the padding), and only the last rows and the fields once it has ended; a part written in
//!   one go has one block and no padding.
//! - `ARENAEP1` (older servers; read only): the fields as above, the `u64` row count, then
//!   each array as a `u64` value count and its values.
//!
//! A file shorter or longer than its layout says, or with an array of the wrong size, is
//! refused.

use std::io::Write;
use std::ops::Range;

use crate::trajectory::{DATASETS, OPTIONAL_DATASETS, TrajectoryRows};
use crate::trajectory_file::EpisodeRecord;

/// The first bytes of every part file written now (the block layout).
pub const MAGIC: &[u8; 8] = b"ARENAEP2";
/// The first bytes of a part of the older, one-piece layout.
pub const MAGIC_V1: &[u8; 8] = b"ARENAEP1";
/// Where a block's row count would be, the end of the blocks.
const END: u64 = u64::MAX;

/// A part file that cannot be read: what is wrong, and where (byte offset).
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("not an episode part (its first bytes are neither {:?} nor {:?})", std::str::from_utf8(MAGIC).unwrap_or_default(), std::str::from_utf8(MAGIC_V1).unwrap_or_default())]
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
    #[error("{dataset} is empty in some blocks and not in others (the block at byte {offset})")]
    Inconsistent { dataset: &'static str, offset: usize },
    #[error("the block at byte {offset} says the next starts at byte {next}, inside it or past the file's end")]
    BadBlock { offset: usize, next: u64 },
    #[error("the end says {said} rows, the blocks hold {held}")]
    RowCount { said: u64, held: u64 },
    #[error("{extra} bytes after the last array")]
    TrailingBytes { extra: usize },
    #[error("writing: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether `bytes` start as a part file does, of either layout (an older server stored each
/// episode as HDF5).
pub fn is_part(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || bytes.starts_with(MAGIC_V1)
}

/// Writes `record` as a part file in one go (one block). Array lengths are checked first;
/// nothing is written when one is wrong.
pub fn write(record: &EpisodeRecord, out: &mut impl Write) -> Result<(), PartError> {
    check(record)?;
    let rows = record.num_rows();
    out.write_all(MAGIC)?;
    write_block(&record.rows, 0..rows, MAGIC.len() as u64, 1, out)?;
    write_end(record, out)
}

/// Whether every array of `record` holds its rows (an optional one may be empty).
pub fn check(record: &EpisodeRecord) -> Result<(), PartError> {
    let rows = record.num_rows();
    for ((dataset, width, optional), values) in &arrays(&record.rows) {
        if values.len() != rows * width && !(*optional && values.is_empty()) {
            return Err(PartError::WrongLength {
                dataset,
                rows,
                width: *width,
                got: values.len(),
            });
        }
    }
    Ok(())
}

/// Writes rows `range` of `rows` as one block that starts at byte `at` of the file, then zeros
/// up to the next multiple of `align` (1: none); returns the offset where the next block (or
/// the end) starts. Every array must hold at least `range.end` rows (an array may run ahead,
/// as `actions` does by the action of a row not yet recorded), an optional one may be empty.
pub fn write_block(
    rows: &TrajectoryRows,
    range: Range<usize>,
    at: u64,
    align: u64,
    out: &mut impl Write,
) -> Result<u64, PartError> {
    let arrays = arrays(rows);
    let n = range.len();
    let mut values = 0u64;
    for ((dataset, width, optional), held) in &arrays {
        if held.len() < range.end * width && !(*optional && held.is_empty()) {
            return Err(PartError::WrongLength {
                dataset,
                rows: range.end,
                width: *width,
                got: held.len(),
            });
        }
        values += if held.is_empty() { 0 } else { (n * width) as u64 };
    }
    let end = at + 16 + 8 * arrays.len() as u64 + 8 * values;
    let next = end.div_ceil(align.max(1)) * align.max(1);
    out.write_all(&(n as u64).to_le_bytes())?;
    out.write_all(&next.to_le_bytes())?;
    for ((_, width, _), held) in &arrays {
        let block = match held.is_empty() {
            true => &[][..],
            false => &held[range.start * width..range.end * width],
        };
        out.write_all(&(block.len() as u64).to_le_bytes())?;
        write_f64s(block, out)?;
    }
    write_zeros((next - end) as usize, out)?;
    Ok(next)
}

/// Writes the end of a block part: the marker, `record`'s fields and its row count (which its
/// blocks must hold together). Its arrays are not read.
pub fn write_end(record: &EpisodeRecord, out: &mut impl Write) -> Result<(), PartError> {
    let mut end = Vec::with_capacity(256);
    end.extend_from_slice(&END.to_le_bytes());
    put_fields(&mut end, record);
    end.extend_from_slice(&(record.num_rows() as u64).to_le_bytes());
    out.write_all(&end)?;
    Ok(())
}

fn put_fields(out: &mut Vec<u8>, record: &EpisodeRecord) {
    out.extend_from_slice(&record.episode.to_le_bytes());
    put_str(out, &record.motion);
    put_str(out, &record.category);
    out.extend_from_slice(&record.seed.to_le_bytes());
    out.extend_from_slice(&record.dr_level.to_le_bytes());
    put_str(out, &record.status);
    put_str(out, &record.reason);
    out.extend_from_slice(&record.start_s.to_le_bytes());
    out.extend_from_slice(&record.duration_s.to_le_bytes());
    out.push(record.scored_until_s.is_some() as u8);
    out.extend_from_slice(&record.scored_until_s.unwrap_or(0.0).to_le_bytes());
}

fn write_zeros(mut n: usize, out: &mut impl Write) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len());
        out.write_all(&ZEROS[..k])?;
        n -= k;
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

/// Appends `raw` (a multiple of 8 bytes) as little-endian f64 values to `values`.
fn append_f64s(raw: &[u8], values: &mut Vec<f64>) {
    let start = values.len();
    values.resize(start + raw.len() / 8, 0.0);
    #[cfg(target_endian = "little")]
    {
        let added = &mut values[start..];
        // SAFETY: as in `write_f64s`; every bit pattern is a valid f64.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(added.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(added)) };
        bytes.copy_from_slice(raw);
    }
    #[cfg(not(target_endian = "little"))]
    for (v, b) in values[start..].iter_mut().zip(raw.chunks_exact(8)) {
        *v = f64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
}

/// Reads a part file's bytes back into the record it was written from.
pub fn read(bytes: &[u8]) -> Result<EpisodeRecord, PartError> {
    if bytes.starts_with(MAGIC) {
        read_blocks(bytes)
    } else if bytes.starts_with(MAGIC_V1) {
        read_v1(bytes)
    } else {
        Err(PartError::NotAPart)
    }
}

fn read_blocks(bytes: &[u8]) -> Result<EpisodeRecord, PartError> {
    let mut r = Reader { bytes, at: MAGIC.len() };
    let mut rows = TrajectoryRows::default();
    let mut held = 0u64;
    // Whether each array is filled, as the first block with rows says.
    let mut filled: Vec<Option<bool>> = vec![None; DATASETS.len() + OPTIONAL_DATASETS.len()];
    loop {
        let offset = r.at;
        let n = u64::from_le_bytes(r.take("a block's row count")?);
        if n == END {
            break;
        }
        let next = u64::from_le_bytes(r.take("a block's end")?);
        each_array_mut(&mut rows, |k, kind, values| {
            let is_filled = r.array(kind, n as usize, values)?;
            if n > 0 && *filled[k].get_or_insert(is_filled) != is_filled {
                return Err(PartError::Inconsistent {
                    dataset: kind.0,
                    offset,
                });
            }
            Ok(())
        })?;
        if next < r.at as u64 || next > bytes.len() as u64 {
            return Err(PartError::BadBlock { offset, next });
        }
        r.at = next as usize;
        held += n;
    }
    let mut record = r.fields()?;
    let said = u64::from_le_bytes(r.take("rows")?);
    if said != held {
        return Err(PartError::RowCount { said, held });
    }
    record.rows = rows;
    r.finished(record)
}

fn read_v1(bytes: &[u8]) -> Result<EpisodeRecord, PartError> {
    let mut r = Reader {
        bytes,
        at: MAGIC_V1.len(),
    };
    let mut record = r.fields()?;
    let rows = u64::from_le_bytes(r.take("rows")?) as usize;
    each_array_mut(&mut record.rows, |_, kind, values| {
        r.array(kind, rows, values).map(|_| ())
    })?;
    r.finished(record)
}

/// An array's name, width and whether it may be empty.
type ArrayKind = (&'static str, usize, bool);

/// Every array's kind, in file order.
fn kinds() -> Vec<ArrayKind> {
    let required = DATASETS.iter().map(|(n, w)| (*n, *w, false));
    let optional = OPTIONAL_DATASETS.iter().map(|(n, w)| (*n, *w, true));
    required.chain(optional).collect()
}

/// Every array with its kind, in file order.
fn arrays(rows: &TrajectoryRows) -> Vec<(ArrayKind, &[f64])> {
    let held = rows.arrays().into_iter().chain(rows.optional_arrays());
    kinds().into_iter().zip(held).collect()
}

/// Calls `f` with each array's index, kind and values to fill, in file order.
fn each_array_mut(
    rows: &mut TrajectoryRows,
    mut f: impl FnMut(usize, ArrayKind, &mut Vec<f64>) -> Result<(), PartError>,
) -> Result<(), PartError> {
    let kinds = kinds();
    for (k, values) in rows.arrays_mut().into_iter().enumerate() {
        f(k, kinds[k], values)?;
    }
    for (j, values) in rows.optional_arrays_mut().into_iter().enumerate() {
        let k = DATASETS.len() + j;
        f(k, kinds[k], values)?;
    }
    Ok(())
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

    /// One array of `rows` rows (its value count, then the values) appended to `values`; whether
    /// it held any (an optional one may be empty).
    fn array(
        &mut self,
        (dataset, width, may_be_empty): ArrayKind,
        rows: usize,
        values: &mut Vec<f64>,
    ) -> Result<bool, PartError> {
        let count = u64::from_le_bytes(self.take(dataset)?) as usize;
        if count != rows.saturating_mul(width) && !(may_be_empty && count == 0) {
            return Err(PartError::WrongLength {
                dataset,
                rows,
                width,
                got: count,
            });
        }
        let raw = self.slice(dataset, count.saturating_mul(8))?;
        append_f64s(raw, values);
        Ok(count > 0)
    }

    /// The episode's fields, as [`put_fields`] writes them (no rows).
    fn fields(&mut self) -> Result<EpisodeRecord, PartError> {
        let mut record = EpisodeRecord {
            episode: u32::from_le_bytes(self.take("episode")?),
            motion: self.string("motion")?,
            category: self.string("category")?,
            seed: u64::from_le_bytes(self.take("seed")?),
            dr_level: u32::from_le_bytes(self.take("dr_level")?),
            status: self.string("status")?,
            reason: self.string("reason")?,
            start_s: f64::from_le_bytes(self.take("start_s")?),
            duration_s: f64::from_le_bytes(self.take("duration_s")?),
            ..Default::default()
        };
        let [has_scored_until] = self.take("scored_until_s")?;
        let scored_until = f64::from_le_bytes(self.take("scored_until_s")?);
        record.scored_until_s = (has_scored_until != 0).then_some(scored_until);
        Ok(record)
    }

    /// `record`, where nothing follows what was read.
    fn finished(&self, record: EpisodeRecord) -> Result<EpisodeRecord, PartError> {
        match self.bytes.len() - self.at {
            0 => Ok(record),
            extra => Err(PartError::TrailingBytes { extra }),
        }
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

    /// `record` with its torques' NaNs as bits, so that records compare with `==`.
    fn comparable(mut r: EpisodeRecord) -> (EpisodeRecord, Vec<u64>) {
        let bits = r.rows.torques.iter().map(|v| v.to_bits()).collect();
        r.rows.torques.clear();
        (r, bits)
    }

    /// The older layout, as servers before the block layout wrote it.
    fn write_v1(record: &EpisodeRecord, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC_V1);
        put_fields(out, record);
        out.extend_from_slice(&(record.num_rows() as u64).to_le_bytes());
        for (_, values) in arrays(&record.rows) {
            out.extend_from_slice(&(values.len() as u64).to_le_bytes());
            write_f64s(values, out).unwrap();
        }
    }

    #[test]
    fn every_array_is_filled_in_file_order() {
        let mut rows = TrajectoryRows::default();
        each_array_mut(&mut rows, |k, _, v| {
            v.push(k as f64);
            Ok(())
        })
        .unwrap();
        let held: Vec<f64> = rows
            .arrays()
            .into_iter()
            .chain(rows.optional_arrays())
            .flatten()
            .copied()
            .collect();
        assert_eq!(held, (0..12).map(|k| k as f64).collect::<Vec<_>>());
    }

    #[test]
    fn a_record_round_trips_bit_for_bit() {
        let mut bytes = Vec::new();
        write(&record(), &mut bytes).unwrap();
        assert_eq!(comparable(read(&bytes).unwrap()), comparable(record()));
        let empty = EpisodeRecord::default();
        let mut bytes = Vec::new();
        write(&empty, &mut bytes).unwrap();
        assert_eq!(read(&bytes).unwrap(), empty);
    }

    #[test]
    fn parts_of_the_older_layout_are_read() {
        for rec in [record(), EpisodeRecord::default()] {
            let mut bytes = Vec::new();
            write_v1(&rec, &mut bytes);
            assert!(is_part(&bytes));
            assert_eq!(comparable(read(&bytes).unwrap()), comparable(rec));
        }
    }

    #[test]
    fn rows_written_in_aligned_blocks_as_they_come_read_back_whole() {
        let whole = record();
        // The rows as a running episode has them: the actions one row ahead.
        let mut running = whole.clone();
        for (v, (_, w)) in running.rows.arrays_mut().into_iter().zip(DATASETS) {
            v.truncate(2 * w);
        }
        running.rows.actions = whole.rows.actions.clone();
        running.rows.torques.truncate(2 * 29);
        let mut bytes = MAGIC.to_vec();
        let next = write_block(&running.rows, 0..1, bytes.len() as u64, 4096, &mut bytes).unwrap();
        assert_eq!((next, bytes.len()), (4096, 4096));
        let next = write_block(&running.rows, 1..2, next, 4096, &mut bytes).unwrap();
        assert_eq!((next, bytes.len()), (8192, 8192));
        write_block(&whole.rows, 2..3, next, 1, &mut bytes).unwrap();
        write_end(&whole, &mut bytes).unwrap();
        assert_eq!(comparable(read(&bytes).unwrap()), comparable(whole.clone()));

        // A block cannot take rows an array does not hold yet.
        let err = write_block(&running.rows, 2..3, 0, 1, &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string().contains("times holds 2 values, not 3 rows × 1"),
            "{err}"
        );
    }

    #[test]
    fn damaged_parts_are_refused_with_the_reason() {
        let mut bytes = Vec::new();
        write(&record(), &mut bytes).unwrap();
        let err = read(&bytes[..bytes.len() - 3]).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("rows"), "{err}");
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read(&longer).unwrap_err().to_string().contains("1 bytes after"));
        assert!(matches!(read(b"\x89HDF\r\n\x1a\n"), Err(PartError::NotAPart)));
        let mut wrong = record();
        wrong.rows.qvel.pop();
        let err = write(&wrong, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("qvel holds 104 values, not 3 rows × 35"), "{err}");

        // The end saying more rows than the blocks hold.
        let rec = record();
        let mut bytes = MAGIC.to_vec();
        write_block(&rec.rows, 0..2, 8, 1, &mut bytes).unwrap();
        write_end(&rec, &mut bytes).unwrap();
        let err = read(&bytes).unwrap_err().to_string();
        assert!(err.contains("the end says 3 rows, the blocks hold 2"), "{err}");

        // An optional array filled in one block and empty in the next.
        let mut bytes = MAGIC.to_vec();
        let next = write_block(&rec.rows, 0..2, 8, 1, &mut bytes).unwrap();
        let mut no_torques = rec.clone();
        no_torques.rows.torques.clear();
        write_block(&no_torques.rows, 2..3, next, 1, &mut bytes).unwrap();
        write_end(&rec, &mut bytes).unwrap();
        let err = read(&bytes).unwrap_err().to_string();
        assert!(
            err.contains("torques is empty in some blocks and not in others"),
            "{err}"
        );

        // A block whose next offset points back into it.
        let mut bytes = Vec::new();
        write(&rec, &mut bytes).unwrap();
        bytes[16..24].copy_from_slice(&9u64.to_le_bytes());
        let err = read(&bytes).unwrap_err().to_string();
        assert!(
            err.contains("the block at byte 8 says the next starts at byte 9"),
            "{err}"
        );
    }
}
