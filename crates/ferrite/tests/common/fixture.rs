//! Stored fixture images (`tests/fixtures/`): the files of a closed database as text, so a
//! format version's reader is tested against bytes written by that version.
//!
//! Format: comment lines (`#`), then per file `file NAME LEN` and one `OFFSET HEX` line per
//! 64-byte line that is not all zeros (offsets in hex).

use std::path::Path;

/// Writes the files of `dir` whose names `keep` accepts, sorted by name, to `path` as a
/// fixture beginning with `header` (comment lines).
pub fn write_files(dir: &Path, header: &str, path: &Path, keep: impl Fn(&str) -> bool) {
    let mut out = String::from(header);
    let mut names: Vec<_> = relative_files(dir, "").into_iter().filter(|n| keep(n)).collect();
    names.sort();
    for name in names {
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        out.push_str(&format!("file {name} {}\n", bytes.len()));
        for (i, line) in bytes.chunks(64).enumerate() {
            if line.iter().any(|&b| b != 0) {
                let hex: String = line.iter().map(|b| format!("{b:02x}")).collect();
                out.push_str(&format!("{:x} {hex}\n", i * 64));
            }
        }
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, out).unwrap();
}

/// The files under `dir`, subdirectories included, as paths relative to it (`/`-separated,
/// each prefixed with `prefix`).
fn relative_files(dir: &Path, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = format!("{prefix}{}", e.file_name().into_string().unwrap());
        if e.file_type().unwrap().is_dir() {
            out.extend(relative_files(&e.path(), &format!("{name}/")));
        } else {
            out.push(name);
        }
    }
    out
}

/// Rebuilds, in `dir`, the files of the fixture stored at `path` (a name with `/` in a
/// subdirectory).
pub fn unpack(path: &Path, dir: &Path) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("the fixture {} is committed: {e}", path.display()));
    std::fs::create_dir_all(dir).unwrap();
    let mut cur: Option<(String, Vec<u8>)> = None;
    let flush = |cur: &mut Option<(String, Vec<u8>)>| {
        if let Some((name, bytes)) = cur.take() {
            let to = dir.join(name);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::write(to, bytes).unwrap();
        }
    };
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["file", name, len] => {
                flush(&mut cur);
                cur = Some((name.to_string(), vec![0u8; len.parse().unwrap()]));
            }
            [off, hex] => {
                let off = usize::from_str_radix(off, 16).unwrap();
                let (_, bytes) = cur.as_mut().expect("a file line first");
                for (i, b) in hex.as_bytes().chunks(2).enumerate() {
                    bytes[off + i] =
                        u8::from_str_radix(std::str::from_utf8(b).unwrap(), 16).unwrap();
                }
            }
            _ => panic!("bad fixture line {line:?}"),
        }
    }
    flush(&mut cur);
}
