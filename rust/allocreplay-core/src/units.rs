//! Byte sizes as users write them (`--capacity 80GiB`, `16GB`, `0.5`) and as we print them.

use crate::error::{Error, Result};

/// A device capacity as given on the command line: bytes, or a fraction of the device's total
/// memory (resolved per device, from the trace's metadata).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    Bytes(u64),
    Fraction(f64),
}

/// Binary (`KiB` … `TiB`, also `K`/`M`/`G`/`T`) and decimal (`KB` … `TB`) units, case-insensitive.
const UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// Parses a capacity: an integer number of bytes (`17179869184`), a number with a unit
/// (`80GiB`, `81920MiB`, `16GB`, `1.5GiB`), or a fraction in (0, 1] of the device's total
/// memory (`0.5`, `1.0`: a number with a decimal point and no unit).
pub fn parse_capacity(text: &str) -> Result<Capacity> {
    let s = text.trim();
    let bad = |why: &str| {
        Error::InvalidArgument(format!("capacity '{text}': {why}; write bytes (17179869184), a size with a unit (80GiB, 81920MiB, 16GB) or a fraction of the device's memory (0.5)"))
    };
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (num, unit) = (s[..split].replace('_', ""), s[split..].trim());
    if num.is_empty() {
        return Err(bad("no number"));
    }
    if unit.is_empty() {
        if num.contains('.') {
            let f: f64 = num.parse().map_err(|_| bad("not a number"))?;
            if !(f > 0.0 && f <= 1.0) {
                return Err(bad("a fraction must be in (0, 1]"));
            }
            return Ok(Capacity::Fraction(f));
        }
        let b: u64 =
            num.parse().map_err(|_| bad("more than 2^56 bytes (64 PiB), the largest device memory the policies model, or not a number"))?;
        if b == 0 {
            return Err(bad("must be positive"));
        }
        check_capacity(b).map_err(|why| bad(&why))?;
        return Ok(Capacity::Bytes(b));
    }
    let lower = unit.to_ascii_lowercase();
    let Some(&(_, mult)) = UNITS.iter().find(|(u, _)| *u == lower) else {
        return Err(bad(&format!("unknown unit '{unit}'")));
    };
    let bytes = if num.contains('.') {
        let f: f64 = num.parse().map_err(|_| bad("not a number"))?;
        let b = (f * mult as f64).round();
        if !(b >= 1.0 && b < u64::MAX as f64) {
            return Err(bad(if b < 1.0 {
                "out of range"
            } else {
                "more than 2^56 bytes (64 PiB), the largest device memory the policies model"
            }));
        }
        b as u64
    } else {
        let n: u64 = num.parse().map_err(|_| bad("too large or not a number"))?;
        n.checked_mul(mult).ok_or_else(|| bad("more than 2^56 bytes (64 PiB), the largest device memory the policies model"))?
    };
    if bytes == 0 {
        return Err(bad("must be positive"));
    }
    check_capacity(bytes).map_err(|why| bad(&why))?;
    Ok(Capacity::Bytes(bytes))
}

/// The largest capacity a replay takes: 2^56 bytes (64 PiB), the largest size a trace holds
/// (`trace::check::MAX_SIZE`). The policies' address spaces and rounding arithmetic are
/// modelled below it; a larger capacity is refused, not clamped.
pub const MAX_CAPACITY: u64 = 1 << 56;

fn check_capacity(bytes: u64) -> std::result::Result<u64, String> {
    if bytes > MAX_CAPACITY {
        return Err(format!(
            "{bytes} bytes is more than 2^56 bytes (64 PiB), the largest device memory the policies model (leave the capacity out for no limit)"
        ));
    }
    Ok(bytes)
}

impl Capacity {
    /// Bytes for one device (`index`, when known); a fraction needs the device's total memory
    /// (`total_memory`, from the trace's metadata).
    pub fn resolve(self, index: Option<i32>, total_memory: Option<u64>) -> Result<u64> {
        match self {
            Capacity::Bytes(b) => Ok(b),
            Capacity::Fraction(f) => match total_memory {
                Some(total) => Ok(((total as f64) * f).floor() as u64),
                None => Err(Error::InvalidArgument(format!(
                    "capacity {f} is a fraction of the device's memory, but the trace does not record the total memory of device {}; give bytes (e.g. 80GiB) or import the trace with --meta",
                    index.map_or("?".to_string(), |i| i.to_string())
                ))),
            },
        }
    }
}

/// `1.50 GiB`, `512.00 MiB`, `96 B`: binary units, two decimals.
pub fn format_bytes(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < NAMES.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", NAMES[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_by_hand() {
        assert_eq!(parse_capacity("80GiB").unwrap(), Capacity::Bytes(80 * 1024 * 1024 * 1024));
        assert_eq!(parse_capacity("81920MiB").unwrap(), Capacity::Bytes(85_899_345_920));
        assert_eq!(parse_capacity("16GB").unwrap(), Capacity::Bytes(16_000_000_000));
        assert_eq!(parse_capacity("16 gb").unwrap(), Capacity::Bytes(16_000_000_000));
        assert_eq!(parse_capacity("1.5GiB").unwrap(), Capacity::Bytes(1_610_612_736));
        assert_eq!(parse_capacity("4096").unwrap(), Capacity::Bytes(4096));
        assert_eq!(parse_capacity("2k").unwrap(), Capacity::Bytes(2048));
        assert_eq!(parse_capacity("0.5").unwrap(), Capacity::Fraction(0.5));
        assert_eq!(parse_capacity("1.0").unwrap(), Capacity::Fraction(1.0));
        for bad in ["", "GiB", "0", "1.5", "0.0", "-1", "12XB", "1e3", "99999999999999999999", "20000000TiB"] {
            assert!(matches!(parse_capacity(bad), Err(Error::InvalidArgument(_))), "{bad:?} accepted");
        }
    }

    #[test]
    fn capacities_beyond_what_the_policies_model_are_refused_not_clamped() {
        // Issue 28, class 2: 2^56 bytes is the most; one byte more is an error saying why.
        assert_eq!(parse_capacity("72057594037927936").unwrap(), Capacity::Bytes(MAX_CAPACITY));
        assert_eq!(parse_capacity("65536TiB").unwrap(), Capacity::Bytes(MAX_CAPACITY));
        for bad in ["72057594037927937", "18446744073709551615", "65537TiB", "16777216TiB"] {
            let e = parse_capacity(bad).unwrap_err().to_string();
            assert!(e.contains("2^56 bytes (64 PiB), the largest device memory the policies model"), "{bad}: {e}");
        }
    }

    #[test]
    fn fraction_needs_total_memory() {
        assert_eq!(Capacity::Fraction(0.5).resolve(Some(0), Some(150_109_880_320)).unwrap(), 75_054_940_160);
        assert!(Capacity::Fraction(0.5).resolve(Some(0), None).is_err());
        assert_eq!(Capacity::Bytes(7).resolve(None, None).unwrap(), 7);
    }

    #[test]
    fn formats_binary_units() {
        assert_eq!(format_bytes(96), "96 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(22_733_127_680), "21.17 GiB");
    }
}
