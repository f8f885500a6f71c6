//! Memory sizes as users write them. `-m` keeps samtools' exact reading
//! (strtol base 0, then an optional K/M/G suffix, per thread) so pipelines
//! that switch to alnsort mean the same budget; but where samtools silently
//! reads a typo as something else ("1.5G" as 1 byte, "09M" as 0), we refuse
//! with a message saying what was understood and what to write instead.
//! `--max-memory` is the total budget users actually want, with decimals and
//! percentages of the machine (or of the cgroup limit when one is set).
use crate::error::SizeError;

/// samtools' minimum per-thread memory (`SORT_MIN_MEGS_PER_THREAD`, bam_sort.c).
pub const MIN_PER_THREAD: u64 = 1 << 20;
/// samtools' default per-thread memory (`SORT_DEFAULT_MEGS_PER_THREAD`, 768 MiB).
pub const DEFAULT_PER_THREAD: u64 = 768 << 20;

/// C `strtol(s, &end, 0)`: returns (value, bytes consumed). Leading
/// whitespace and a sign are accepted; "0x" selects hex, a leading "0" octal.
fn strtol_base0(s: &str) -> (i128, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i] as char).is_ascii_whitespace() {
        i += 1;
    }
    let mut neg = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        neg = b[i] == b'-';
        i += 1;
    }
    let (radix, start) = if b.len() > i + 1
        && b[i] == b'0'
        && (b[i + 1] | 0x20) == b'x'
        && b.get(i + 2).is_some_and(|c| c.is_ascii_hexdigit())
    {
        (16, i + 2)
    } else if i < b.len() && b[i] == b'0' {
        (8, i)
    } else {
        (10, i)
    };
    let mut j = start;
    let mut v: i128 = 0;
    while j < b.len() {
        let d = match (b[j] as char).to_digit(radix) {
            Some(d) => d as i128,
            None => break,
        };
        v = (v * radix as i128 + d).min(i64::MAX as i128 + 1);
        j += 1;
    }
    if j == start {
        return (0, 0); // no digits: nothing consumed, as strtol
    }
    (if neg { -v } else { v }, j)
}

/// How samtools reads `-m`: the value it would use, in bytes (may be below
/// the minimum). Mirrors bam_sort.c: strtol base 0, then K/M/G suffix.
pub fn samtools_reading(s: &str) -> i128 {
    let (v, used) = strtol_base0(s);
    let mult = match s.as_bytes().get(used) {
        Some(b'k' | b'K') => 1 << 10,
        Some(b'm' | b'M') => 1 << 20,
        Some(b'g' | b'G') => 1 << 30,
        _ => 1,
    };
    v * mult
}

/// Parses `-m` (per-thread memory). Accepts exactly what samtools accepts
/// (including hex and octal), and refuses what samtools would misread or
/// reject, explaining both.
pub fn parse_per_thread(s: &str) -> Result<u64, SizeError> {
    let (v, used) = strtol_base0(s);
    let rest = &s[used..];
    let suffix_ok = matches!(rest, "" | "k" | "K" | "m" | "M" | "g" | "G");
    let understood = samtools_reading(s);
    if used == 0 || !suffix_ok || v <= 0 {
        return Err(SizeError(format!(
            "invalid -m value '{s}': samtools would read it as {understood} bytes per thread; \
             -m takes an integer with an optional K, M or G suffix (for example -m 768M or -m 2G), \
             or use --max-memory for a total budget such as --max-memory 1.5G"
        )));
    }
    // An octal-looking value with a non-octal digit ("09M") stops early; the
    // suffix check above already caught it because '9' is left unread.
    let bytes = understood as u64;
    if bytes < MIN_PER_THREAD {
        return Err(SizeError(format!(
            "-m {s} is {} per thread, below the 1M minimum; write for example -m 1M, -m 768M or -m 2G",
            human(bytes)
        )));
    }
    Ok(bytes)
}

/// Where `--max-memory N%` takes its 100% from.
pub trait MachineMemory {
    /// Total physical memory, or the cgroup limit when one is set and lower.
    fn available_total(&self) -> Option<u64>;
}

/// Reads /proc/meminfo and the cgroup v2 / v1 limits.
pub struct SystemMemory;

impl MachineMemory for SystemMemory {
    fn available_total(&self) -> Option<u64> {
        let phys = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(|kb| kb * 1024)
                })
        });
        let cgroup = [
            "/sys/fs/cgroup/memory.max",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| t.trim().parse::<u64>().ok())
        .min();
        match (phys, cgroup) {
            (Some(p), Some(c)) => Some(p.min(c)),
            (p, c) => p.or(c),
        }
    }
}

/// Parses `--max-memory`: `1.5G`, `800M`, `65536K`, `2000000000` (bytes),
/// or `80%` of the machine's memory (the cgroup limit when lower).
pub fn parse_total(s: &str, machine: &dyn MachineMemory) -> Result<u64, SizeError> {
    let bad = |why: &str| {
        SizeError(format!(
            "invalid --max-memory value '{s}': {why}; write a size such as 1.5G, 800M or 80% (of the machine's memory)"
        ))
    };
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let pct: f64 = p.parse().map_err(|_| bad("not a number before '%'"))?;
        if !(pct > 0.0 && pct <= 100.0) {
            return Err(bad("a percentage must be above 0 and at most 100"));
        }
        let total = machine
            .available_total()
            .ok_or_else(|| bad("the machine's memory size could not be read"))?;
        return Ok((total as f64 * pct / 100.0) as u64);
    }
    let (num, mult) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 1 << 30),
        Some(b't' | b'T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return Err(bad(
            "expected a number with an optional K, M, G or T suffix",
        ));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| bad("expected a number with an optional K, M, G or T suffix"))?;
    let bytes = (v * mult as f64) as u64;
    if bytes == 0 {
        return Err(bad("the budget must be above zero"));
    }
    Ok(bytes)
}

/// Formats a byte count for messages ("1.50 GiB").
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);
    impl MachineMemory for Fixed {
        fn available_total(&self) -> Option<u64> {
            Some(self.0)
        }
    }

    #[test]
    fn per_thread_accepts_what_samtools_accepts() {
        // reference §E7: all of these are 1 MiB for samtools
        for s in ["1M", "1048576", "0x100000", "1024k", "1m"] {
            assert_eq!(parse_per_thread(s), Ok(1 << 20), "{s}");
        }
        assert_eq!(parse_per_thread("2m"), Ok(2 << 20));
        assert_eq!(parse_per_thread("2G"), Ok(2 << 30));
        assert_eq!(
            parse_per_thread("010M"),
            Ok(8 << 20),
            "octal as strtol reads it"
        );
    }

    #[test]
    fn per_thread_refuses_misreadings() {
        assert!(
            parse_per_thread("1000000").unwrap_err().0.contains("976"),
            "below minimum, says bytes"
        );
        let e = parse_per_thread("1.5G").unwrap_err().0;
        assert!(
            e.contains("as 1 bytes") && e.contains("--max-memory"),
            "{e}"
        );
        assert!(parse_per_thread("09M").is_err());
        assert!(parse_per_thread("G10").is_err());
        assert!(parse_per_thread("0").is_err());
        assert!(parse_per_thread("-5M").is_err());
        assert!(parse_per_thread("1K").is_err());
        assert!(parse_per_thread("").is_err());
    }

    #[test]
    fn samtools_reading_matches_reference() {
        assert_eq!(samtools_reading("1.5G"), 1);
        assert_eq!(samtools_reading("09M"), 0);
        assert_eq!(samtools_reading("1K"), 1024);
        assert_eq!(samtools_reading("0x100000"), 1 << 20);
    }

    #[test]
    fn total_budget_forms() {
        let m = Fixed(10 << 30);
        assert_eq!(parse_total("1.5G", &m), Ok(3 << 29));
        assert_eq!(parse_total("800M", &m), Ok(800 << 20));
        assert_eq!(parse_total("4096", &m), Ok(4096));
        assert_eq!(parse_total("50%", &m), Ok(5 << 30));
        for bad in ["", "G", "0", "-1G", "1.5X", "150%", "0%", "abc%"] {
            assert!(parse_total(bad, &m).is_err(), "{bad}");
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.50 GiB");
    }
}
