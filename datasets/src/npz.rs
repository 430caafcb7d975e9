//! NumPy `.npz` archives (a zip of `.npy` files, stored or deflated) as the motion files of
//! mjlab, BeyondMimic and holosoma use them: little-endian numbers (`<f4`, `<f8`, `<i4`,
//! `<i8`, `<u1`…`<u8`, `|b1`) read as f64, unicode strings (`<U…`) as `String`s, in C order
//! (Fortran-ordered numbers are reordered). Other dtypes (pickled objects, big-endian) are
//! refused with the array's name.

use crate::{DataError, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// One array of an archive.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    pub data: NpyData,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    Numbers(Vec<f64>),
    Strings(Vec<String>),
}

impl NpyArray {
    /// A float32 array (the precision motion files are written in).
    pub fn f32(shape: Vec<usize>, values: Vec<f64>) -> Self {
        Self {
            shape,
            data: NpyData::Numbers(values),
        }
    }

    pub fn strings(values: Vec<String>) -> Self {
        Self {
            shape: vec![values.len()],
            data: NpyData::Strings(values),
        }
    }

    pub fn numbers(&self) -> Option<&[f64]> {
        match &self.data {
            NpyData::Numbers(v) => Some(v),
            NpyData::Strings(_) => None,
        }
    }
}

fn invalid(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The most bytes reserved for one array before reading it.
const MAX_RESERVE: u64 = 64 << 20;

/// Reads every array of an `.npz` file, keyed by name (without `.npy`).
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, NpyArray>> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        cause: source,
    })?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| invalid(path, format!("not a NumPy .npz archive (zip): {e}")))?;
    let mut arrays = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| invalid(path, format!("zip entry {i}: {e}")))?;
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_string) else {
            continue;
        };
        // The declared size is the file's word, not a fact: reserve no more than a motion's
        // worth up front, and let the read grow the buffer to what is really there.
        let mut bytes = Vec::with_capacity(entry.size().min(MAX_RESERVE) as usize);
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| invalid(path, format!("{name}: {e}")))?;
        let array = parse_npy(&bytes).map_err(|why| invalid(path, format!("array {name:?}: {why}")))?;
        arrays.insert(name, array);
    }
    Ok(arrays)
}

/// Parses one `.npy` file.
fn parse_npy(bytes: &[u8]) -> std::result::Result<NpyArray, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy array (bad magic)".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!(".npy format version {v} is not supported")),
    };
    let header = bytes.get(start..start + header_len).ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let descr = dict_value(header, "descr").ok_or("header has no descr")?;
    let quote = descr
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')
        .ok_or("descr is not a string")?;
    let descr = &descr[1..];
    let descr = &descr[..descr.find(quote).ok_or("unclosed descr")?];
    let fortran = dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True"));
    let shape_text = dict_value(header, "shape").ok_or("header has no shape")?;
    let shape_text = shape_text.trim_start_matches('(');
    let shape_text = &shape_text[..shape_text.find(')').ok_or("unclosed shape")?];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| format!("bad shape entry {s:?}")))
        .collect::<std::result::Result<_, _>>()?;
    let too_big = || format!("shape {shape:?} is too large (its size overflows)");
    let count = shape
        .iter()
        .try_fold(1usize, |n, d| n.checked_mul(*d))
        .ok_or_else(too_big)?;
    let body = &bytes[start + header_len..];
    let check_length = |width: usize| -> std::result::Result<(), String> {
        let needed = count.checked_mul(width).ok_or_else(too_big)?;
        if body.len() < needed {
            return Err(format!(
                "holds {} bytes, its shape {shape:?} needs {needed}",
                body.len()
            ));
        }
        Ok(())
    };
    let numbers = |width: usize, convert: &dyn Fn(&[u8]) -> f64| -> std::result::Result<NpyData, String> {
        check_length(width)?;
        Ok(NpyData::Numbers(
            body.chunks_exact(width).take(count).map(convert).collect(),
        ))
    };
    let data = match descr {
        "<f8" => numbers(8, &|b| f64::from_le_bytes(b.try_into().expect("8")))?,
        "<f4" => numbers(4, &|b| f32::from_le_bytes(b.try_into().expect("4")) as f64)?,
        "<i8" => numbers(8, &|b| i64::from_le_bytes(b.try_into().expect("8")) as f64)?,
        "<i4" => numbers(4, &|b| i32::from_le_bytes(b.try_into().expect("4")) as f64)?,
        "<u8" => numbers(8, &|b| u64::from_le_bytes(b.try_into().expect("8")) as f64)?,
        "<u4" => numbers(4, &|b| u32::from_le_bytes(b.try_into().expect("4")) as f64)?,
        "|u1" | "|i1" | "|b1" => numbers(1, &|b| b[0] as f64)?,
        d if d.starts_with("<U") => {
            let chars: usize = d[2..].parse().map_err(|_| format!("bad dtype {d:?}"))?;
            let width = chars.checked_mul(4).ok_or_else(|| format!("bad dtype {d:?}"))?;
            check_length(width)?;
            let strings = body
                .chunks_exact(width.max(1))
                .take(count)
                .map(|item| {
                    item.chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
                        .take_while(|&c| c != 0)
                        .filter_map(char::from_u32)
                        .collect()
                })
                .collect();
            NpyData::Strings(strings)
        }
        d => {
            return Err(format!(
                "dtype {d:?} is not supported (little-endian numbers or unicode strings; no pickled objects)"
            ));
        }
    };
    let data = match data {
        NpyData::Numbers(v) if fortran && shape.len() > 1 => NpyData::Numbers(c_order(&v, &shape)),
        NpyData::Strings(_) if fortran && shape.len() > 1 => {
            return Err("Fortran-ordered string arrays of more than one dimension are not supported".into());
        }
        other => other,
    };
    Ok(NpyArray { shape, data })
}

/// Column-major (Fortran) values of `shape` in row-major order (numpy writes a Fortran-contiguous
/// array, e.g. a column selection `a[:, order]`, that way).
fn c_order(values: &[f64], shape: &[usize]) -> Vec<f64> {
    let mut out = vec![0.0; values.len()];
    let mut index = vec![0usize; shape.len()];
    for v in values {
        // `index` walks the Fortran order: the first axis fastest.
        let mut c = 0;
        for (d, i) in index.iter().enumerate() {
            c = c * shape[d] + i;
        }
        out[c] = *v;
        for (d, i) in index.iter_mut().enumerate() {
            *i += 1;
            if *i < shape[d] {
                break;
            }
            *i = 0;
        }
    }
    out
}

/// The text after `'key':` in a `.npy` header dict, up to the end of the header.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    let colon = rest.find(':')?;
    Some(rest[colon + 1..].trim_start())
}

/// Writes arrays as an uncompressed `.npz` (numbers as `<f4`, strings as `<U`), through a
/// temporary file renamed into place.
pub fn write_npz(path: &Path, arrays: &[(&str, NpyArray)]) -> Result<()> {
    let io = |source: std::io::Error| DataError::Io {
        path: path.to_path_buf(),
        cause: source,
    };
    let tmp = path.with_extension("npz.tmp");
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, array) in arrays {
        zip.start_file(format!("{name}.npy"), options)
            .map_err(|e| invalid(path, format!("{name}: {e}")))?;
        zip.write_all(&npy_bytes(array)).map_err(io)?;
    }
    zip.finish()
        .map_err(|e| invalid(path, format!("finishing the archive: {e}")))?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn npy_bytes(array: &NpyArray) -> Vec<u8> {
    let (descr, body): (String, Vec<u8>) = match &array.data {
        NpyData::Numbers(v) => ("<f4".into(), v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()),
        NpyData::Strings(v) => {
            let chars = v.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(1);
            let mut body = Vec::with_capacity(v.len() * chars * 4);
            for s in v {
                let mut n = 0;
                for c in s.chars() {
                    body.extend((c as u32).to_le_bytes());
                    n += 1;
                }
                body.extend(std::iter::repeat_n(0u8, 4 * (chars - n)));
            }
            (format!("<U{chars}"), body)
        }
    };
    let shape = match array.shape.as_slice() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + newline, padded to a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + body.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip() {
        let dir = std::env::temp_dir().join(format!("arena-npz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npz");
        let values = vec![0.5, -1.25, 3.0, 4.0, 5.0, 6.0];
        write_npz(
            &path,
            &[
                ("fps", NpyArray::f32(vec![], vec![50.0])),
                ("joint_pos", NpyArray::f32(vec![2, 3], values.clone())),
                ("joint_names", NpyArray::strings(vec!["a".into(), "knee_ü".into()])),
            ],
        )
        .unwrap();
        let arrays = read_npz(&path).unwrap();
        assert_eq!(arrays["fps"], NpyArray::f32(vec![], vec![50.0]));
        assert_eq!(arrays["joint_pos"].shape, [2, 3]);
        assert_eq!(arrays["joint_pos"].numbers().unwrap(), values);
        assert_eq!(
            arrays["joint_names"].data,
            NpyData::Strings(vec!["a".into(), "knee_ü".into()])
        );
        assert_eq!(
            c_order(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], &[2, 3]),
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        std::fs::write(&path, b"not a zip").unwrap();
        assert!(
            read_npz(&path)
                .unwrap_err()
                .to_string()
                .contains("not a NumPy .npz archive")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_shape_whose_size_overflows_is_refused_with_its_name() {
        let dir = std::env::temp_dir().join(format!("arena-npz-shape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npz");
        let huge = NpyArray::f32(vec![1 << 32, 1 << 32], vec![]);
        write_npz(&path, &[("joint_pos", huge)]).unwrap();
        let e = read_npz(&path).unwrap_err().to_string();
        assert!(
            e.contains("\"joint_pos\"") && e.contains("[4294967296, 4294967296]") && e.contains("too large"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A one-entry archive, stored, whose central directory declares `declared` bytes (zip64).
    fn zip_declaring(name: &str, declared: u64) -> Vec<u8> {
        let mut z = Vec::new();
        // Local header: an empty stored entry (crc 0, sizes 0).
        z.extend(0x0403_4b50u32.to_le_bytes());
        z.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // version, flags, method, time, date
        z.extend([0u8; 12]); // crc, compressed size, uncompressed size
        z.extend((name.len() as u16).to_le_bytes());
        z.extend(0u16.to_le_bytes());
        z.extend(name.as_bytes());
        let central = z.len() as u32;
        z.extend(0x0201_4b50u32.to_le_bytes());
        z.extend([45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // made by, needed, flags, method, time, date
        z.extend([0u8; 8]); // crc, compressed size
        z.extend(u32::MAX.to_le_bytes()); // uncompressed size: see the zip64 field
        z.extend((name.len() as u16).to_le_bytes());
        z.extend(12u16.to_le_bytes()); // extra field length
        z.extend([0u8; 14]); // comment length, disk, attributes, local header offset
        z.extend(name.as_bytes());
        z.extend(1u16.to_le_bytes());
        z.extend(8u16.to_le_bytes());
        z.extend(declared.to_le_bytes());
        let size = z.len() as u32 - central;
        z.extend(0x0605_4b50u32.to_le_bytes());
        z.extend([0, 0, 0, 0, 1, 0, 1, 0]);
        z.extend(size.to_le_bytes());
        z.extend(central.to_le_bytes());
        z.extend(0u16.to_le_bytes());
        z
    }

    #[test]
    fn a_declared_size_is_not_trusted_for_memory() {
        let dir = std::env::temp_dir().join(format!("arena-npz-declared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npz");
        std::fs::write(&path, zip_declaring("fps.npy", 1 << 62)).unwrap();
        // Reserving the declared 4 EiB would abort the process; the entry is empty.
        let e = read_npz(&path).unwrap_err().to_string();
        assert!(e.contains("\"fps\"") && e.contains("bad magic"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
