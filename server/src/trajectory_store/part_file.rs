//! Writing one part file (the flat format of [`arena_data::episode_part`]).
//!
//! A part is written once, while its episode is committed, and read again only by a full merge
//! or a recovery: usually never, since the merge ahead has the episode already. So where the
//! filesystem allows it the part bypasses the page cache (`O_DIRECT`): the file's bytes go from
//! a buffer this thread keeps to the device, without the kernel copying them into freshly
//! allocated cache pages first. On the virtual machines these servers were measured on, the
//! first touch of a page costs about 12 µs (0.33 GB/s, against 10 GB/s for memory touched
//! before), and a 4096-episode evaluation wrote 1.6 GB of parts in the same seconds as it wrote
//! the merged file and scored (docs/server.md, "Trajectory files"). Elsewhere (tmpfs on older
//! kernels, filesystems that refuse `O_DIRECT`, other systems) the part is written through the
//! page cache as before; both ways write the same bytes.

use anyhow::Context;
use arena_data::episode_part;
use arena_data::trajectory_file::EpisodeRecord;
use std::cell::RefCell;
use std::io::Write;
use std::path::Path;

/// The alignment `O_DIRECT` asks of a write's buffer, offset and length: the largest logical
/// block size in use (4096; 512-byte devices accept it too).
pub(super) const DIRECT_ALIGN: usize = 4096;

/// One aligned block of [`DirectBuffer`].
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; DIRECT_ALIGN]);

/// A growable byte buffer whose start and capacity are multiples of [`DIRECT_ALIGN`]. Each
/// committer thread keeps one, so serialising a part touches memory it has touched before.
#[derive(Default)]
pub(super) struct DirectBuffer {
    blocks: Vec<Block>,
    len: usize,
}

impl DirectBuffer {
    /// Empties it, keeping its memory.
    pub(super) fn clear(&mut self) {
        self.len = 0;
    }

    /// The bytes written.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The memory it keeps, in bytes.
    pub(super) fn capacity(&self) -> usize {
        self.blocks.len() * DIRECT_ALIGN
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `Block` is a plain array of bytes with no padding, so the blocks are
        // `blocks.len() * DIRECT_ALIGN` initialised bytes in a row.
        unsafe {
            std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), self.blocks.len() * DIRECT_ALIGN)
        }
    }

    /// The bytes written, zero-padded to whole blocks.
    pub(super) fn padded(&mut self) -> &[u8] {
        let end = self.len.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let len = self.len;
        let bytes = self.bytes_mut();
        bytes[len..end].fill(0);
        &bytes[..end]
    }
}

impl Write for DirectBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let needed = (self.len + data.len()).div_ceil(DIRECT_ALIGN);
        if needed > self.blocks.len() {
            self.blocks.resize(needed, Block([0; DIRECT_ALIGN]));
        }
        let start = self.len;
        self.bytes_mut()[start..start + data.len()].copy_from_slice(data);
        self.len += data.len();
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    static BUFFER: RefCell<DirectBuffer> = RefCell::new(DirectBuffer::default());
}

/// A thread keeps its buffer up to this size (a 20-second episode's part is about 4 MB); a
/// longer episode's is given back after its write.
const KEPT_BUFFER_BYTES: usize = 16 << 20;

/// Runs `f` with this thread's buffer, emptied; gives the buffer's memory back after where it
/// grew past [`KEPT_BUFFER_BYTES`].
pub(super) fn with_buffer<R>(f: impl FnOnce(&mut DirectBuffer) -> R) -> R {
    BUFFER.with(|cell| {
        let mut buffer = cell.borrow_mut();
        buffer.clear();
        let result = f(&mut buffer);
        if buffer.capacity() > KEPT_BUFFER_BYTES {
            *buffer = DirectBuffer::default();
        }
        result
    })
}

/// How a part reached its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartWrite {
    /// Past the page cache (`O_DIRECT`).
    Direct,
    /// Through the page cache.
    Buffered,
}

/// Writes `record` as a new part file at `path`, past the page cache if `direct` and the
/// filesystem allows it, and on disk when it returns if `durable` (its data and length synced;
/// the name is its folder's to sync); a file already there is an error and left alone, a file
/// this call began is removed again if writing fails.
pub(crate) fn write(path: &Path, record: &EpisodeRecord, direct: bool, durable: bool) -> anyhow::Result<PartWrite> {
    with_buffer(|buffer| {
        let written = episode_part::write(record, &mut *buffer)
            .map_err(anyhow::Error::from)
            .and_then(|()| match direct && write_direct(path, buffer, durable)? {
                true => Ok(PartWrite::Direct),
                false => write_buffered(path, buffer, durable).map(|()| PartWrite::Buffered),
            });
        written.map_err(|e| {
            let theirs = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::AlreadyExists);
            if !theirs {
                let _ = std::fs::remove_file(path);
            }
            e.context(format!(
                "writing episode {}'s trajectory to {}",
                record.episode,
                path.display()
            ))
        })
    })
}

/// The serialised part to `path` with `O_DIRECT`, then cut to its length: false (and no file
/// left) where the filesystem refuses `O_DIRECT` for the file or its write.
#[cfg(target_os = "linux")]
fn write_direct(path: &Path, buffer: &mut DirectBuffer, durable: bool) -> anyhow::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let len = buffer.len as u64;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    match file.write_all(buffer.padded()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            drop(file);
            std::fs::remove_file(path).context("removing a part the filesystem would not write directly")?;
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    file.set_len(len)?;
    if durable {
        // The bytes are on the device already (O_DIRECT); this makes the length so.
        file.sync_data()?;
    }
    Ok(true)
}

#[cfg(not(target_os = "linux"))]
fn write_direct(_path: &Path, _buffer: &mut DirectBuffer, _durable: bool) -> anyhow::Result<bool> {
    Ok(false)
}

fn write_buffered(path: &Path, buffer: &DirectBuffer, durable: bool) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    // SAFETY: as in `bytes_mut`, read only.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.blocks.as_ptr().cast::<u8>(), buffer.len) };
    file.write_all(bytes)?;
    if durable {
        file.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(rows: usize) -> EpisodeRecord {
        crate::trajectory_store::tests::record(3, rows)
    }

    fn serialised(record: &EpisodeRecord) -> Vec<u8> {
        let mut out = Vec::new();
        episode_part::write(record, &mut out).unwrap();
        out
    }

    /// The way a part in `dir` must be written: directly where the filesystem opens files
    /// with `O_DIRECT` (ext4, xfs, btrfs), else through the page cache (tmpfs).
    fn expected_way(dir: &Path) -> PartWrite {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::OpenOptionsExt;
            let probe = dir.join("probe");
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_DIRECT)
                .open(&probe);
            let _ = std::fs::remove_file(&probe);
            if opened.is_ok() {
                return PartWrite::Direct;
            }
        }
        PartWrite::Buffered
    }

    #[test]
    fn both_ways_write_the_bytes_of_the_part_format() {
        // The default temporary folder (a disk's filesystem here: direct), and tmpfs where there
        // is one (which refuses O_DIRECT: buffered).
        let mut dirs = vec![tempfile::tempdir().unwrap()];
        if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
            dirs.push(shm);
        }
        for dir in &dirs {
            write_every_length(dir.path());
        }
    }

    fn write_every_length(dir: &Path) {
        // Lengths that end inside a block, and one past the thread's buffer from the last.
        for rows in [0, 1, 101, 7] {
            let rec = record(rows);
            let expected = serialised(&rec);
            let direct = dir.join(format!("d{rows}.part"));
            let how = write(&direct, &rec, true, true).unwrap();
            assert_eq!(
                std::fs::read(&direct).unwrap(),
                expected,
                "{rows} rows, written {how:?}"
            );
            assert_eq!(how, expected_way(dir), "in {}", dir.display());
            assert_eq!(episode_part::read(&std::fs::read(&direct).unwrap()).unwrap(), rec);
            let buffered = dir.join(format!("b{rows}.part"));
            assert_eq!(write(&buffered, &rec, false, true).unwrap(), PartWrite::Buffered);
            assert_eq!(std::fs::read(&buffered).unwrap(), expected);
        }
    }

    #[test]
    fn a_part_already_there_is_an_error_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ep0-a1.part");
        std::fs::write(&path, b"someone else's").unwrap();
        for direct in [true, false] {
            let err = write(&path, &record(4), direct, true).unwrap_err();
            assert!(format!("{err:#}").contains("ep0-a1.part"), "{err:#}");
            assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
        }
    }
}
