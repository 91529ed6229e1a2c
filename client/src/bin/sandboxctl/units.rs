//! Sizes and CPU counts as an admin types them, the way `docker run
//! --memory` and `--cpus` take them, turned into the wire's numbers.

/// `512m`, `1g`, `1.5G`, `64MiB`, `1048576` (bytes): binary units, as
/// docker counts them. The daemon checks the range; this checks the form.
pub fn size_bytes(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}' is not a size (like 512m, 2g, 64MiB, or bytes: 1048576)");
    let trimmed = text.trim();
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(number_end);
    let value: f64 = number.parse().map_err(|_| bad())?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = value * scale as f64;
    if !(1.0..=u64::MAX as f64).contains(&bytes) {
        return Err(format!("'{text}' is out of range (at least 1 byte)"));
    }
    Ok(bytes as u64)
}

/// CPUs as a decimal (`1.5`, `0.25`) in thousandths (1500, 250), the
/// wire's `cpu_millis`.
pub fn cpu_millis(text: &str) -> Result<u32, String> {
    let cpus: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of CPUs (like 1.5 or 0.25)"))?;
    let millis = (cpus * 1000.0).round();
    if !(1.0..=1_000_000.0).contains(&millis) {
        return Err(format!("'{text}' CPUs is out of range (0.001 to 1000)"));
    }
    Ok(millis as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(size_bytes("512m"), Ok(512 << 20));
        assert_eq!(size_bytes("1G"), Ok(1 << 30));
        assert_eq!(size_bytes("1.5g"), Ok(3 << 29));
        assert_eq!(size_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(size_bytes("2kb"), Ok(2048));
        assert_eq!(size_bytes("1048576"), Ok(1 << 20));
        for bad in ["", "m", "12x", "-1m", "1.2.3m", "0"] {
            assert!(size_bytes(bad).is_err(), "{bad}");
        }
        assert!(size_bytes("12x").unwrap_err().contains("'12x'"));
    }

    #[test]
    fn cpus_are_thousandths() {
        assert_eq!(cpu_millis("1.5"), Ok(1500));
        assert_eq!(cpu_millis("0.25"), Ok(250));
        assert_eq!(cpu_millis("2"), Ok(2000));
        for bad in ["", "0", "-1", "x", "0.0001"] {
            assert!(cpu_millis(bad).is_err(), "{bad}");
        }
    }
}
