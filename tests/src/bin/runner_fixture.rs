//! `runner-fixture`: a stand-in for the real runner, for the end-to-end tests.
//!
//! On start it writes its whole environment (`env.json`, a flat JSON object)
//! and its pid (`pid`) into `$WORKSPACE_ROOT_DIR`, each through a temporary
//! name and a rename so a test polling for a file never reads half of it.
//! `pid` is written last: once it exists, every other file is complete.
//! Then it waits for SIGTERM and exits 0 on it.
//!
//! Flags:
//! - `--ignore-term`: ignore SIGTERM (only SIGKILL ends it); the grandchild too.
//! - `--fork-grandchild`: fork a child that stays in this process group,
//!   records its pid in `grandchild.pid`, and sleeps forever.
//! - `--exit-code N`: exit with N right after writing the files.
//! - `--print-lines N`: print N numbered lines to stdout, then go on.
//! - `--write-bytes N`: write N bytes of numbered 64-byte lines to stdout as
//!   fast as it can (1 MiB a write), then `runner-fixture wrote N bytes`,
//!   then go on; `pid` is written only after that last line.
//! - `--allocate-mib N`: allocate N MiB and write to every page of it (so
//!   it is resident, not merely reserved), then go on holding it; `pid` is
//!   written only once it is all touched. Under a smaller memory limit the
//!   kernel's OOM killer ends the runner on the way.
//! - `--escape`: start a descendant the way `daemon(3)` does and worse: a
//!   child that calls `setsid` and forks again, and exits; the grandchild
//!   ignores SIGTERM, records its pid in `escapee.pid`, `chdir`s to `/`,
//!   closes every descriptor and sleeps forever (no group, session,
//!   directory or descriptor of the runner's left to find it by).
//! - `--fork-many N`: fork N children that sleep forever, and write
//!   `forks` (`started <n> refused <m> errno <e>`): under a pids limit the
//!   forks past it fail (EAGAIN).
//! - `--connect HOST:PORT`: try one TCP connect (5 s at most) and print
//!   `runner-fixture: connect HOST:PORT: ok` or `…: failed: ERROR` to
//!   stdout, then go on.
//! - `--allocate-when NAME`: with `--allocate-mib`, write `pid` first and
//!   allocate only once `$WORKSPACE_ROOT_DIR/NAME` exists (looked for every
//!   10 ms; a SIGTERM meanwhile waits until then), so a test decides when.
//! - `--fill-when NAME`: once `pid` is written and `$WORKSPACE_ROOT_DIR/NAME`
//!   exists (looked for every 10 ms), write as many bytes as it says into
//!   `$WORKSPACE_ROOT_DIR/fill` (64 KiB a write, then fsync), print
//!   `runner-fixture: fill: ok` or `runner-fixture: fill: errno E after B
//!   bytes` to stdout, then go on.
//! - `--serve-probes`: once `pid` is written, run each `probe.sh` the test
//!   writes (see `attack::serve_probes`); `--ipc OP [ARG]` is the System V
//!   helper those probes call.
//! - `--serve-attacks`: once `pid` is written, wait for an `attack` file and
//!   attack the runner it names (see [`attack`]).
//! - `--serve-net PORT`: listen on TCP and UDP PORT (0: any) on every
//!   address, write the ports to `net` before `pid`, then answer `probe-*`
//!   requests (see [`net`]).
//! - `--probe tcp|udp ADDRESS`: one probe from here, `errno N` on stdout,
//!   and exit (no workspace needed: for `docker exec`).
//! - `--uname`: print `release <uname -r>` and `version <the first line
//!   of /proc/version>` to stdout, and exit (no workspace needed: for
//!   `docker exec`, to see which kernel answers the runner).
//! - `--syscall-probe NAME`: make one system call a seccomp filter should
//!   refuse (see [`syscalls::PROBES`]), `errno N` on stdout (0: it
//!   succeeded), and exit; no workspace needed.
//! - `--kernel-probes`: list the descriptors it started with first thing,
//!   and before `pid` hold a session key and an abstract socket and write
//!   `kernel-start.json` (see [`attack::hold_kernel_objects`]).
//! - `--busy`: once `pid` is written, keep computing in a thread of its own:
//!   20 ms of a busy loop every 100 ms (a fifth of a core, far above the
//!   idle watcher's 1 %, and little on a loaded test machine).
//! - `--line-every-ms N`: once `pid` is written, print
//!   `runner-fixture tick <n>` every N ms from a thread of its own.
//! - `--work-by-queue`: `--busy` when its task queue (`STIGMER_TASK_QUEUE`)
//!   contains `busy`, `--line-every-ms 1000` when it contains `lines`, else
//!   quiet; and `--ignore-term` when it contains `ignore-term`: one
//!   daemon's runners of different work, for the idle and Node tests.

#[path = "runner_fixture/attack.rs"]
mod attack;
#[path = "runner_fixture/net.rs"]
mod net;
#[path = "runner_fixture/syscalls.rs"]
mod syscalls;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nix::sys::signal::{signal, SigHandler, SigSet, Signal};
use nix::unistd::{fork, ForkResult};

#[derive(Debug, Default)]
struct Flags {
    ignore_term: bool,
    fork_grandchild: bool,
    exit_code: Option<u8>,
    print_lines: u32,
    write_bytes: u64,
    allocate_mib: usize,
    allocate_when: Option<String>,
    fill_when: Option<String>,
    escape: bool,
    fork_many: u32,
    serve_attacks: bool,
    kernel_probes: bool,
    serve_probes: bool,
    connect: Option<String>,
    serve_net: Option<u16>,
    busy: bool,
    line_every_ms: u64,
}

fn parse_flags() -> Result<Flags, String> {
    let mut flags = Flags::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ignore-term" => flags.ignore_term = true,
            "--fork-grandchild" => flags.fork_grandchild = true,
            "--escape" => flags.escape = true,
            "--fork-many" => {
                let value = args.next().ok_or("--fork-many needs a value")?;
                flags.fork_many = value
                    .parse()
                    .map_err(|_| format!("bad fork count '{value}'"))?;
            }
            "--serve-attacks" => flags.serve_attacks = true,
            "--serve-net" => {
                let value = args.next().ok_or("--serve-net needs a port")?;
                flags.serve_net = Some(value.parse().map_err(|_| format!("bad port '{value}'"))?);
            }
            "--kernel-probes" => flags.kernel_probes = true,
            "--busy" => flags.busy = true,
            "--work-by-queue" => {
                let queue = std::env::var("STIGMER_TASK_QUEUE").unwrap_or_default();
                flags.busy |= queue.contains("busy");
                flags.ignore_term |= queue.contains("ignore-term");
                if queue.contains("lines") {
                    flags.line_every_ms = 1000;
                }
            }
            "--line-every-ms" => {
                let value = args.next().ok_or("--line-every-ms needs a value")?;
                flags.line_every_ms = value
                    .parse()
                    .map_err(|_| format!("bad interval '{value}'"))?;
            }
            "--serve-probes" => flags.serve_probes = true,
            "--exit-code" => {
                let value = args.next().ok_or("--exit-code needs a value")?;
                flags.exit_code = Some(
                    value
                        .parse()
                        .map_err(|_| format!("bad exit code '{value}'"))?,
                );
            }
            "--print-lines" => {
                let value = args.next().ok_or("--print-lines needs a value")?;
                flags.print_lines = value
                    .parse()
                    .map_err(|_| format!("bad line count '{value}'"))?;
            }
            "--write-bytes" => {
                let value = args.next().ok_or("--write-bytes needs a value")?;
                flags.write_bytes = value
                    .parse()
                    .map_err(|_| format!("bad byte count '{value}'"))?;
            }
            "--allocate-mib" => {
                let value = args.next().ok_or("--allocate-mib needs a value")?;
                flags.allocate_mib = value
                    .parse()
                    .map_err(|_| format!("bad size in MiB '{value}'"))?;
            }
            "--connect" => {
                flags.connect = Some(args.next().ok_or("--connect needs HOST:PORT")?);
            }
            "--allocate-when" => {
                let value = args.next().ok_or("--allocate-when needs a file name")?;
                flags.allocate_when = Some(value);
            }
            "--fill-when" => {
                flags.fill_when = Some(args.next().ok_or("--fill-when needs a file name")?);
            }
            other => return Err(format!("unknown flag '{other}'")),
        }
    }
    Ok(flags)
}

/// `mib` MiB, every page of it written, so it counts against the memory
/// limit (an untouched allocation is only address space). `None` for 0.
fn allocate_resident(mib: usize) -> Option<Vec<u8>> {
    const PAGE: usize = 4096;
    if mib == 0 {
        return None;
    }
    let mut memory = vec![0u8; mib << 20];
    for page in memory.chunks_mut(PAGE) {
        page[0] = 1;
    }
    eprintln!("runner-fixture: holding {mib} MiB");
    Some(std::hint::black_box(memory))
}

/// Writes `total` bytes of 64-byte lines (`runner-fixture bytes <offset>`,
/// padded with dots), in writes of 1 MiB, then the closing line.
fn write_bytes(total: u64) -> std::io::Result<()> {
    const LINE: u64 = 64;
    const WRITE: u64 = 1 << 20;
    let mut stdout = std::io::stdout().lock();
    let mut block = Vec::with_capacity(WRITE as usize);
    let mut offset = 0;
    while offset < total {
        block.clear();
        while (block.len() as u64) < WRITE && offset < total {
            let mut line = format!("runner-fixture bytes {offset:020} ");
            line.extend(std::iter::repeat_n('.', LINE as usize - 1 - line.len()));
            line.push('\n');
            let take = (total - offset).min(LINE) as usize;
            block.extend_from_slice(&line.as_bytes()[..take]);
            offset += take as u64;
        }
        stdout.write_all(&block)?;
    }
    writeln!(stdout, "runner-fixture wrote {total} bytes")?;
    stdout.flush()
}

/// `ok`, or `failed: ERROR`, for one TCP connect to `target`.
fn try_connect(target: &str) -> String {
    use std::net::{TcpStream, ToSocketAddrs};
    let address = match target.to_socket_addrs().map(|mut all| all.next()) {
        Ok(Some(address)) => address,
        Ok(None) => return "failed: no address".to_string(),
        Err(error) => return format!("failed: {error}"),
    };
    match TcpStream::connect_timeout(&address, std::time::Duration::from_secs(5)) {
        Ok(_) => "ok".to_string(),
        Err(error) => format!("failed: {error}"),
    }
}

/// Writes `contents` to `dir/name` through a temporary name and a rename.
/// Writes `total` bytes into `path`; on failure, the error and how many
/// bytes went in.
fn fill(path: &Path, total: u64) -> Result<(), (std::io::Error, u64)> {
    let mut file = std::fs::File::create(path).map_err(|error| (error, 0))?;
    let block = vec![0x5au8; 64 * 1024];
    let mut written = 0;
    while written < total {
        let size = block.len().min((total - written) as usize);
        file.write_all(&block[..size])
            .map_err(|error| (error, written))?;
        written += size as u64;
    }
    file.sync_all().map_err(|error| (error, written))
}

fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<()> {
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, contents)?;
    std::fs::rename(&temporary, dir.join(name))
}

fn environment_json() -> Vec<u8> {
    let env: BTreeMap<String, String> = std::env::vars_os()
        .map(|(key, value)| {
            (
                key.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        })
        .collect();
    serde_json::to_vec_pretty(&env).expect("a string map serializes")
}

/// Forks a child that leaves the session and forks the escapee (see the
/// module doc), and reaps that child; returns once `escapee.pid` exists.
fn escape(workspace: &Path) -> Result<(), String> {
    // SAFETY: this program is single-threaded, so the child may run any code.
    match unsafe { fork() }.map_err(|error| error.to_string())? {
        ForkResult::Child => {
            let _ = nix::unistd::setsid();
            // SAFETY: as above; still one thread.
            if let Ok(ForkResult::Child) = unsafe { fork() } {
                // SAFETY: SIG_IGN installs no handler code.
                let _ = unsafe { signal(Signal::SIGTERM, SigHandler::SigIgn) };
                let _ = SigSet::all().thread_unblock();
                let text = format!("{}\n", std::process::id());
                let _ = write_atomically(workspace, "escapee.pid", text.as_bytes());
                let _ = std::env::set_current_dir("/");
                // SAFETY: close_range on every descriptor; nothing here uses one after.
                unsafe { libc::syscall(libc::SYS_close_range, 0, u32::MAX, 0) };
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            std::process::exit(0);
        }
        ForkResult::Parent { child } => {
            let _ = nix::sys::wait::waitpid(child, None);
            let recorded = workspace.join("escapee.pid");
            for _ in 0..1000 {
                if recorded.exists() {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err("the escapee never wrote escapee.pid".to_string())
        }
    }
}

/// Forks `count` sleeping children; says how many forks succeeded, how
/// many were refused, and the first refusal's errno.
fn fork_many(count: u32) -> String {
    let (mut started, mut refused, mut first_errno) = (0, 0, 0);
    for _ in 0..count {
        // SAFETY: single-threaded; the child only sleeps.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            Ok(ForkResult::Parent { .. }) => started += 1,
            Err(error) => {
                refused += 1;
                if first_errno == 0 {
                    first_errno = error as i32;
                }
            }
        }
    }
    format!("started {started} refused {refused} errno {first_errno}\n")
}

/// `/proc/self/fd` as `[fd, link target]` (the listing's own descriptor
/// among them, linked to `/proc/<pid>/fd`).
fn open_descriptors() -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut fds: Vec<(i32, String)> = entries
        .flatten()
        .filter_map(|entry| {
            let fd = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect();
    fds.sort();
    fds
}

/// `uname -r`: the release of the kernel that answers this process.
fn kernel_release() -> String {
    // SAFETY: utsname is arrays of c_char only, for which all zeroes is a value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into the struct it is given, which outlives the call.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return format!("unknown ({})", std::io::Error::last_os_error());
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn main() -> ExitCode {
    // First, before anything here opens one: what it was started with.
    let start_fds = open_descriptors();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, protocol, address] = &args[..] {
        if flag == "--probe" {
            println!("errno {}", net::probe(protocol, address));
            return ExitCode::SUCCESS;
        }
    }
    if args == ["--uname"] {
        let release = kernel_release();
        let version = std::fs::read_to_string("/proc/version")
            .unwrap_or_else(|error| format!("unreadable ({error})"));
        println!("release {release}");
        println!("version {}", version.lines().next().unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if let [flag, name] = &args[..] {
        if flag == "--syscall-probe" {
            println!("errno {}", syscalls::probe(name));
            return ExitCode::SUCCESS;
        }
    }
    // A helper for probes, not a runner.
    if args.first().map(String::as_str) == Some("--ipc") {
        return attack::ipc(
            args.get(1).map_or("", String::as_str),
            args.get(2).map(String::as_str),
        );
    }
    let flags = match parse_flags() {
        Ok(flags) => flags,
        Err(message) => {
            eprintln!("runner-fixture: {message}");
            return ExitCode::from(2);
        }
    };
    let Some(workspace) = std::env::var_os("WORKSPACE_ROOT_DIR").map(PathBuf::from) else {
        eprintln!("runner-fixture: WORKSPACE_ROOT_DIR is not set");
        return ExitCode::from(3);
    };
    eprintln!(
        "runner-fixture: pid {} starting with {flags:?}",
        std::process::id()
    );

    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    if flags.ignore_term {
        // SAFETY: installing SIG_IGN runs no handler code; the disposition is
        // inherited by the grandchild forked below.
        unsafe { signal(Signal::SIGTERM, SigHandler::SigIgn) }.expect("ignore SIGTERM");
    } else {
        // Blocked from the start, so a SIGTERM that arrives early is still a
        // clean exit 0 once we wait for it below.
        term.thread_block().expect("block SIGTERM");
    }

    if let Some(target) = &flags.connect {
        println!("runner-fixture: connect {target}: {}", try_connect(target));
    }

    if let Err(error) = write_atomically(&workspace, "env.json", &environment_json()) {
        eprintln!(
            "runner-fixture: cannot write env.json in {}: {error}",
            workspace.display()
        );
        return ExitCode::from(4);
    }

    if flags.fork_grandchild {
        // SAFETY: this program is single-threaded, so the child may run any code.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                // Stays in our process group; SIGTERM kills it unless ignored.
                let _ = term.thread_unblock();
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            Ok(ForkResult::Parent { child }) => {
                let text = format!("{child}\n");
                if let Err(error) = write_atomically(&workspace, "grandchild.pid", text.as_bytes())
                {
                    eprintln!("runner-fixture: cannot write grandchild.pid: {error}");
                    return ExitCode::from(4);
                }
            }
            Err(error) => {
                eprintln!("runner-fixture: fork failed: {error}");
                return ExitCode::from(5);
            }
        }
    }

    if flags.escape {
        if let Err(error) = escape(&workspace) {
            eprintln!("runner-fixture: cannot start the escapee: {error}");
            return ExitCode::from(5);
        }
    }

    if flags.fork_many > 0 {
        let text = fork_many(flags.fork_many);
        if let Err(error) = write_atomically(&workspace, "forks", text.as_bytes()) {
            eprintln!("runner-fixture: cannot write forks: {error}");
            return ExitCode::from(4);
        }
    }

    if flags.print_lines > 0 {
        let mut stdout = std::io::stdout().lock();
        for line in 1..=flags.print_lines {
            let _ = writeln!(stdout, "runner-fixture line {line}");
        }
        let _ = stdout.flush();
    }

    if flags.write_bytes > 0 {
        if let Err(error) = write_bytes(flags.write_bytes) {
            eprintln!("runner-fixture: cannot write to stdout: {error}");
            return ExitCode::from(4);
        }
    }

    // Held until the process ends.
    let mut _memory = None;
    if flags.allocate_when.is_none() {
        _memory = allocate_resident(flags.allocate_mib);
    }

    if let Some(port) = flags.serve_net {
        if let Err(error) = net::listen(&workspace, port) {
            eprintln!("runner-fixture: cannot listen on port {port}: {error}");
            return ExitCode::from(4);
        }
    }
    if flags.kernel_probes {
        if let Err(error) = attack::hold_kernel_objects(&workspace, start_fds) {
            eprintln!("runner-fixture: cannot hold its kernel objects: {error}");
            return ExitCode::from(4);
        }
    }

    let pid_text = format!("{}\n", std::process::id());
    if let Err(error) = write_atomically(&workspace, "pid", pid_text.as_bytes()) {
        eprintln!("runner-fixture: cannot write pid: {error}");
        return ExitCode::from(4);
    }

    // Threads only now: every fork above happened single-threaded, and
    // SIGTERM is blocked in them too (they inherit the mask).
    if flags.busy {
        std::thread::spawn(|| loop {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(20);
            while std::time::Instant::now() < until {
                std::hint::black_box(0u64);
            }
            std::thread::sleep(std::time::Duration::from_millis(80));
        });
    }
    if flags.line_every_ms > 0 {
        let every = std::time::Duration::from_millis(flags.line_every_ms);
        std::thread::spawn(move || {
            for tick in 1.. {
                std::thread::sleep(every);
                println!("runner-fixture tick {tick}");
            }
        });
    }

    if flags.serve_probes && !attack::serve_probes(&workspace) {
        eprintln!("runner-fixture: got SIGTERM, exiting");
        return ExitCode::SUCCESS;
    }

    if flags.serve_attacks && !attack::serve(&workspace) {
        eprintln!("runner-fixture: got SIGTERM, exiting");
        return ExitCode::SUCCESS;
    }

    if flags.serve_net.is_some() && !net::serve(&workspace) {
        eprintln!("runner-fixture: got SIGTERM, exiting");
        return ExitCode::SUCCESS;
    }

    if let Some(name) = &flags.allocate_when {
        let trigger = workspace.join(name);
        while !trigger.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        _memory = allocate_resident(flags.allocate_mib);
    }

    if let Some(name) = &flags.fill_when {
        let trigger = workspace.join(name);
        let total = loop {
            match std::fs::read_to_string(&trigger).map(|text| text.trim().parse::<u64>()) {
                Ok(Ok(total)) => break total,
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        match fill(&workspace.join("fill"), total) {
            Ok(()) => println!("runner-fixture: fill: ok"),
            Err((error, written)) => println!(
                "runner-fixture: fill: errno {} after {written} bytes",
                error.raw_os_error().unwrap_or(0)
            ),
        }
        let _ = std::io::stdout().flush();
    }

    if let Some(code) = flags.exit_code {
        return ExitCode::from(code);
    }

    if flags.ignore_term {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }

    match term.wait() {
        Ok(signal) => {
            eprintln!("runner-fixture: got {signal}, exiting");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("runner-fixture: sigwait failed: {error}");
            ExitCode::from(6)
        }
    }
}
