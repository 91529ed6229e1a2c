//! What the figures were measured on: the machine, the date, the load.

use std::time::{SystemTime, UNIX_EPOCH};

/// The facts printed with every run.
#[derive(Debug, Clone)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub mem_total_mib: u64,
    pub user: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|text| text.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let mem_total_mib = proc_kib("/proc/meminfo", "MemTotal:").unwrap_or(0) / 1024;
        let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(euid))
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {euid}"), |user| user.name);
        Machine {
            nproc,
            cpu_model,
            kernel,
            mem_total_mib,
            user,
        }
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut words = text
        .split_whitespace()
        .map(|word| word.parse().unwrap_or(f64::NAN));
    [(); 3].map(|_| words.next().unwrap_or(f64::NAN))
}

/// A `Key:   1234 kB` line of a /proc file, in KiB.
pub fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|line| line.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// A process's resident set size (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_kib(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// CPU time (user + system, every thread, living or not) a process has
/// used so far, in microseconds; clock-tick resolution (usually 10 ms).
pub fn cpu_us(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    // utime and stime are fields 14 and 15; field 3 is the first here.
    let utime: f64 = fields.nth(11)?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 1e6 / clock_ticks_per_second())
}

/// CPU time the whole host has spent busy since boot, every CPU summed
/// (`/proc/stat`'s user, nice, system, irq and softirq; idle, I/O wait and
/// time stolen by the hypervisor left out), in microseconds; clock-tick
/// resolution.
pub fn host_busy_us() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0.0))
        .collect();
    // user, nice, system, idle, iowait, irq, softirq: fields 0-2, 5, 6.
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    Some(busy * 1e6 / clock_ticks_per_second())
}

/// The unit of `/proc`'s CPU times (`USER_HZ`, usually 100).
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// CPU time this process has used so far, in microseconds.
pub fn own_cpu_us() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    usage.map_or(f64::NAN, |usage| {
        let us = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1e6 + tv.tv_usec() as f64;
        us(usage.user_time()) + us(usage.system_time())
    })
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Waits (at most `timeout`) until the kernel has finished removing the
/// cgroups a daemon that held thousands of sandboxes left dying (cgroup
/// v2's `nr_dying_descendants` back at `at_most`): their teardown loads
/// the machine for minutes, and a daemon measured meanwhile measures it.
/// Says how long it waited.
pub fn wait_for_dying_cgroups(at_most: u64, timeout: std::time::Duration) {
    let started = std::time::Instant::now();
    while dying_cgroups() > at_most && started.elapsed() < timeout {
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    if started.elapsed() > std::time::Duration::from_secs(1) {
        eprintln!(
            "bench: waited {:.0} s for the kernel to finish removing dying cgroups ({} left)",
            started.elapsed().as_secs_f64(),
            dying_cgroups()
        );
    }
}

/// cgroup v2's `nr_dying_descendants` now (0 where it cannot be read).
pub fn dying_cgroups() -> u64 {
    [
        "/sys/fs/cgroup/unified/cgroup.stat",
        "/sys/fs/cgroup/cgroup.stat",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|stat| {
        stat.lines()
            .find_map(|line| line.strip_prefix("nr_dying_descendants "))
            .and_then(|count| count.trim().parse().ok())
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
