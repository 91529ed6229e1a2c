//! The output of a helper program the daemon runs (`nft`, a
//! `sandboxd-init --stamp`), collected within a bound: a wedged tool is
//! killed rather than waited on for ever, and its pipes are drained on
//! threads of their own, so a long output cannot fill one and stall it.

use std::io::Read;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Why no output was collected.
#[derive(Debug)]
pub enum WaitError {
    /// The bound passed: the child was killed (and reaped).
    TimedOut,
    /// Waiting for it failed.
    Wait(std::io::Error),
}

/// Waits for `child` until `timeout` has passed, with whatever of its
/// stdout and stderr were piped.
pub fn output_within(mut child: Child, timeout: Duration) -> Result<Output, WaitError> {
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(WaitError::TimedOut);
            }
            Err(error) => return Err(WaitError::Wait(error)),
        }
    };
    let collect =
        |reader: Option<std::thread::JoinHandle<Vec<u8>>>| reader.and_then(|r| r.join().ok());
    Ok(Output {
        status,
        stdout: collect(stdout).unwrap_or_default(),
        stderr: collect(stderr).unwrap_or_default(),
    })
}

/// Reads a pipe to its end on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn the_output_of_a_child_that_ends_in_time_is_collected() {
        let child = Command::new("/bin/sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output = output_within(child, Duration::from_secs(30)).unwrap();
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(output.stdout, b"out\n");
        assert_eq!(output.stderr, b"err\n");
    }

    #[test]
    fn a_child_past_the_bound_is_killed_and_reaped() {
        let child = Command::new("/bin/sleep")
            .arg("60")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let started = Instant::now();
        assert!(matches!(
            output_within(child, Duration::from_millis(100)),
            Err(WaitError::TimedOut)
        ));
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
