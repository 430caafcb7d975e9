//! The compressed datasets' chunks of a trajectory file, filtered here rather than by HDF5.
//!
//! HDF5 runs its filters (byte shuffle, then deflate) inside the library, and the library takes
//! one global lock for every call, so a process writing many episodes compresses them one after
//! another on one core. Filtering the chunks here, with the same two filters and the same zlib,
//! gives the bytes HDF5 would have stored; they are handed over with `H5Dwrite_chunk`, and
//! several episodes are compressed at once on as many cores. Measured on 1024 episodes of 101
//! rows: compression was half of the time spent in the library per episode
//! (`cargo run --release -p arena-data --example trajectory_store_cost`).
//!
//! Readers see nothing different: the datasets declare the same filters, and the chunks are full
//! chunks (the last one padded with the fill value, 0.0) as HDF5 stores them.

use crate::trajectory_file::EpisodeRecord;

/// One dataset's filtered chunks in row order; empty for a dataset stored raw.
pub(crate) type Chunks = Vec<Vec<u8>>;

/// An episode ready to write: the record with every compressed dataset already filtered.
/// Building one takes no HDF5 call, so several are built in parallel
/// ([`crate::trajectory_file::TrajectoryFile::write_prepared`] then writes each under the library's lock).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PreparedEpisode {
    pub(crate) record: EpisodeRecord,
    /// One entry per written dataset, in [`EpisodeRecord::written`] order.
    pub(crate) chunks: Vec<Chunks>,
}

impl PreparedEpisode {
    /// Filters the compressed datasets (the shuffle and deflate of HDF5, done here).
    pub fn new(record: EpisodeRecord) -> Self {
        let chunks = filter_record(&record);
        Self { record, chunks }
    }

    pub fn record(&self) -> &EpisodeRecord {
        &self.record
    }
}

/// Filters the compressed datasets of `record`: one entry per written dataset, in
/// [`EpisodeRecord::written`] order, empty for one stored raw. A dataset whose length does not
/// match the record's rows gets no chunks; writing the episode then reports it.
pub(crate) fn filter_record(record: &EpisodeRecord) -> Vec<Chunks> {
    let rows = record.num_rows();
    record
        .written()
        .map(|((dataset, width), values)| {
            let compressed = crate::trajectory_file::COMPRESSED_DATASETS.contains(dataset);
            match compressed && rows > 0 && values.len() == rows * width {
                true => filtered_chunks(values, rows, *width),
                false => Vec::new(),
            }
        })
        .collect()
}

/// Rows per chunk of a dataset of `rows` rows.
pub(crate) fn chunk_rows(rows: usize) -> usize {
    rows.min(crate::trajectory_file::MAX_CHUNK_ROWS)
}

/// `values` (rows × width, row-major) cut into chunks of [`chunk_rows`] rows, the last padded
/// with zeros, each byte-shuffled and deflated.
fn filtered_chunks(values: &[f64], rows: usize, width: usize) -> Chunks {
    let per_chunk = chunk_rows(rows) * width;
    let mut padded = vec![0.0; per_chunk];
    let mut shuffled = vec![0u8; per_chunk * 8];
    values
        .chunks(per_chunk)
        .map(|part| {
            padded[..part.len()].copy_from_slice(part);
            padded[part.len()..].fill(0.0);
            shuffle(&padded, &mut shuffled);
            deflate(&shuffled)
        })
        .collect()
}

/// HDF5's shuffle filter for 8-byte elements: byte `j` of element `i` goes to `j * n + i`.
fn shuffle(values: &[f64], out: &mut [u8]) {
    // One pass per byte plane: each inner loop is a vectorisable shift and store.
    for (j, plane) in out.chunks_exact_mut(values.len()).enumerate() {
        for (byte, v) in plane.iter_mut().zip(values) {
            *byte = (v.to_bits() >> (8 * j)) as u8;
        }
    }
}

/// HDF5's deflate filter: one zlib stream at the file's level, as `compress2` makes it (window
/// 2^15, memory level 8, default strategy), from this thread's reused stream.
fn deflate(bytes: &[u8]) -> Vec<u8> {
    thread_local! {
        static DEFLATER: std::cell::RefCell<Option<Deflater>> = const { std::cell::RefCell::new(None) };
    }
    DEFLATER.with_borrow_mut(|d| {
        d.get_or_insert_with(|| Deflater::new(crate::trajectory_file::DEFLATE_LEVEL as i32))
            .compress(bytes)
    })
}

/// A zlib deflate stream kept for the next chunk and reset between chunks: a new stream zeroes
/// its window and hash tables (hundreds of kB), which was about a sixth of compressing a
/// two-second episode's chunks; a reset stream writes the same bytes as a new one.
struct Deflater {
    // Boxed: zlib keeps a pointer back to the stream in its state.
    stream: Box<libz_sys::z_stream>,
}

unsafe extern "C" fn zlib_alloc(_: libz_sys::voidpf, items: libz_sys::uInt, size: libz_sys::uInt) -> libz_sys::voidpf {
    // SAFETY: plain calloc; zlib checks for NULL.
    unsafe { libc::calloc(items as usize, size as usize) }
}

unsafe extern "C" fn zlib_free(_: libz_sys::voidpf, address: libz_sys::voidpf) {
    // SAFETY: `address` came from `zlib_alloc`.
    unsafe { libc::free(address) }
}

impl Deflater {
    fn new(level: i32) -> Self {
        let mut stream = Box::new(libz_sys::z_stream {
            next_in: std::ptr::null_mut(),
            avail_in: 0,
            total_in: 0,
            next_out: std::ptr::null_mut(),
            avail_out: 0,
            total_out: 0,
            msg: std::ptr::null_mut(),
            state: std::ptr::null_mut(),
            zalloc: zlib_alloc,
            zfree: zlib_free,
            opaque: std::ptr::null_mut(),
            data_type: 0,
            adler: 0,
            reserved: 0,
        });
        // SAFETY: a zeroed stream with allocator functions, as deflateInit2 expects.
        let status = unsafe {
            libz_sys::deflateInit2_(
                &mut *stream,
                level,
                libz_sys::Z_DEFLATED,
                15,
                8,
                libz_sys::Z_DEFAULT_STRATEGY,
                libz_sys::zlibVersion(),
                std::mem::size_of::<libz_sys::z_stream>() as i32,
            )
        };
        // Only an allocation failure (fatal in Rust everywhere else too) or a bad level.
        assert_eq!(status, libz_sys::Z_OK, "zlib deflateInit2 failed with status {status}");
        Self { stream }
    }

    fn compress(&mut self, bytes: &[u8]) -> Vec<u8> {
        let s = &mut *self.stream;
        // SAFETY: the stream is initialised; deflate reads `bytes` and writes at most `bound`
        // bytes (deflateBound: enough for one Z_FINISH call) into `out`'s capacity.
        unsafe {
            let bound = libz_sys::deflateBound(s, bytes.len() as libz_sys::uLong) as usize;
            let mut out = Vec::<u8>::with_capacity(bound);
            s.next_in = bytes.as_ptr().cast_mut();
            s.avail_in = bytes.len() as libz_sys::uInt;
            s.next_out = out.as_mut_ptr();
            s.avail_out = bound as libz_sys::uInt;
            let status = libz_sys::deflate(s, libz_sys::Z_FINISH);
            assert_eq!(
                status,
                libz_sys::Z_STREAM_END,
                "zlib deflate failed with status {status}"
            );
            out.set_len(s.total_out as usize);
            let reset = libz_sys::deflateReset(s);
            assert_eq!(reset, libz_sys::Z_OK, "zlib deflateReset failed with status {reset}");
            out
        }
    }
}

impl Drop for Deflater {
    fn drop(&mut self) {
        // SAFETY: the stream was initialised by deflateInit2 and is ended once.
        unsafe {
            libz_sys::deflateEnd(&mut *self.stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `compress2` (a new stream per call) writes.
    fn compress2(bytes: &[u8]) -> Vec<u8> {
        let level = crate::trajectory_file::DEFLATE_LEVEL as i32;
        // SAFETY: compress2 writes at most `bound` bytes into `out`'s capacity and sets `bound`.
        unsafe {
            let mut bound = libz_sys::compressBound(bytes.len() as libz_sys::uLong);
            let mut out = Vec::<u8>::with_capacity(bound as usize);
            let status = libz_sys::compress2(out.as_mut_ptr(), &mut bound, bytes.as_ptr(), bytes.len() as _, level);
            assert_eq!(status, libz_sys::Z_OK);
            out.set_len(bound as usize);
            out
        }
    }

    #[test]
    fn a_reused_stream_writes_what_a_new_one_does() {
        let inputs: Vec<Vec<u8>> = [0u64, 1, 2, 3]
            .iter()
            .map(|&k| {
                (0..20_000u64)
                    .map(|i| ((i * (k + 3)) % 251 + (i >> (k + 4))) as u8)
                    .collect()
            })
            .collect();
        // The same thread's stream, reset between inputs (and an empty input among them).
        for bytes in inputs.iter().chain([&Vec::new()]).chain(&inputs) {
            assert_eq!(deflate(bytes), compress2(bytes));
        }
    }

    #[test]
    fn shuffle_transposes_bytes() {
        let values = [
            f64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8]),
            f64::from_le_bytes([11, 12, 13, 14, 15, 16, 17, 18]),
        ];
        let mut out = [0u8; 16];
        shuffle(&values, &mut out);
        assert_eq!(out, [1, 11, 2, 12, 3, 13, 4, 14, 5, 15, 6, 16, 7, 17, 8, 18]);
    }
}
