//! What machine a run is on, and when (UTC, without a date library).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The machine a report was measured on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// Total memory.
    pub memory: String,
    /// Kernel release.
    pub kernel: String,
}

fn proc_field(file: &str, field: &str) -> Option<String> {
    std::fs::read_to_string(file).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_owned())
    })
}

/// This machine.
pub fn machine() -> Machine {
    let memory = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next().and_then(|k| k.parse::<u64>().ok()))
        .map_or_else(|| "unknown".to_owned(), |kib| format!("{:.1} GiB", kib as f64 / 1048576.0));
    Machine {
        cpu: proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown CPU".into()),
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        memory,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_owned()),
    }
}

/// (year, month, day, hour, minute, second) of now, UTC.
fn utc_parts() -> (i64, u32, u32, u64, u64, u64) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `2026-11-23 15:04:05`.
pub fn utc_now() -> String {
    let (y, mo, d, h, mi, s) = utc_parts();
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// `20261123-150405`, for directory names.
pub fn utc_stamp() -> String {
    let (y, mo, d, h, mi, s) = utc_parts();
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn date_shape() {
        let d = super::utc_now();
        assert_eq!(d.len(), 19);
        assert!(d.starts_with("20"), "{d}");
        assert_eq!(super::utc_stamp().len(), 15);
        assert!(super::machine().cores >= 1);
    }
}
