//! The peers rows' program, `first-clock` (`bench/first_clock.c`): a static
//! executable with no libc whose first act is to read the wall clock and
//! print it. Every peer starts this same file, so what differs between the
//! rows is only what each peer does before the program's first instruction.
//!
//! It is compiled here, at run time, with the system C compiler (`cc`, which
//! every Rust build on Linux already needs as its linker): Cargo builds this
//! workspace's binaries against glibc and cannot make one of them static
//! while the others are not, and a Rust `no_std` binary would need the
//! package's panic strategy changed for every other binary too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

/// The program's source, built into the bench at compile time.
const SOURCE: &str = include_str!("first_clock.c");
/// What the program's one line starts with.
const PREFIX: &str = "first-clock ";

/// Compiles the program into `dir/first-clock` (0755, in a directory the
/// caller made searchable) and checks that it runs and prints its clock.
pub fn build(dir: &Path) -> anyhow::Result<PathBuf> {
    let flags = [
        "-static",
        "-nostdlib",
        "-nostartfiles",
        "-ffreestanding",
        "-fno-stack-protector",
        "-fno-builtin",
        "-no-pie",
        "-O2",
    ];
    let program = compile(dir, "first-clock", SOURCE, &flags)?;
    let started = SystemTime::now();
    let run = Command::new(&program)
        .output()
        .with_context(|| format!("run {}", program.display()))?;
    if !run.status.success() {
        bail!("{} exited with {}", program.display(), run.status);
    }
    latency(started, &run.stdout).with_context(|| format!("{} as built", program.display()))?;
    Ok(program)
}

/// Compiles C `source` with `flags` into `dir/<name>` (0755) with the
/// system C compiler (`cc`, which every Rust build on Linux already needs
/// as its linker).
pub fn compile(dir: &Path, name: &str, source: &str, flags: &[&str]) -> anyhow::Result<PathBuf> {
    let source_file = dir.join(format!("{name}.c"));
    std::fs::write(&source_file, source)
        .with_context(|| format!("write {}", source_file.display()))?;
    let program = dir.join(name);
    let output = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&program)
        .arg(&source_file)
        .output()
        .with_context(|| format!("run cc (the C compiler that builds {name})"))?;
    if !output.status.success() {
        bail!(
            "cc {} could not build {} ({}): {}",
            flags.join(" "),
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    crate::setup::set_mode(&program, 0o755)?;
    Ok(program)
}

/// The program's clock in `output` (its stdout, or a log that holds it)
/// less `started`: how long from the call's start to its first instruction.
pub fn latency(started: SystemTime, output: &[u8]) -> anyhow::Result<Duration> {
    let clock = clock(output)?;
    clock.duration_since(started).map_err(|early| {
        anyhow::anyhow!(
            "the program's clock reads {:?} before the call's start: the wall clock stepped",
            early.duration()
        )
    })
}

/// The time in the program's line, if `output` holds a whole one.
pub fn clock(output: &[u8]) -> anyhow::Result<SystemTime> {
    let text = String::from_utf8_lossy(output);
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix(PREFIX))
        .filter(|_| text.contains('\n'))
        .with_context(|| format!("no `{PREFIX}<ns>` line in the output {text:?}"))?;
    let nanos: u64 = line
        .trim()
        .parse()
        .with_context(|| format!("the program's clock {line:?} is not a number"))?;
    Ok(UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// True when `output` holds the program's whole line (for polling a log).
pub fn has_line(output: &[u8]) -> bool {
    clock(output).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_line() {
        let at = clock(b"first-clock 1700000000123456789\n").unwrap();
        assert_eq!(
            at.duration_since(UNIX_EPOCH).unwrap(),
            Duration::new(1_700_000_000, 123_456_789)
        );
        assert!(!has_line(b"first-clock 17"));
        assert!(clock(b"first-clock ?\n").is_err());
        assert!(clock(b"something else\n").is_err());
    }
}
