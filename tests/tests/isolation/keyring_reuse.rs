//! The kernel's keyrings, attacked from inside real process-tier
//! sandboxes:
//! - a uid's own keyrings (`@u`, `@us`, the persistent one where Kerberos
//!   keeps its credential cache) and its key quota outlive its processes:
//!   a later sandbox given the same uid must find nothing the earlier one
//!   left there, and a fresh quota; released, the uid leaves the kernel
//!   no key at all, nor does a uid a stopped daemon kept once its state
//!   directory was emptied and it started again;
//! - a sandbox's runner and commands share one session keyring, so a
//!   thousand commands at once fit in the uid's key quota
//!   (`kernel.keys.maxkeys`, 200 by default), while no other sandbox can
//!   join it or read from it, even knowing its name.
//!
//! The keys are made and looked for by `python3` (ctypes, raw `add_key`
//! and `keyctl` system calls), run in the sandbox with `exec`.

use std::time::Duration;

use sandboxd_client::{CommandRef, OutputStream, SandboxdClient, Scope};
use sandboxd_tests::commands::{read_all, request};
use sandboxd_tests::procs::{self, wait_until};
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// Plants, looks for and counts keys; see each mode. x86_64 system call
/// numbers (`add_key` 248, `keyctl` 250).
const KEYS_PY: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(nr), *conv)
    return r if r >= 0 else -ctypes.get_errno()
def keyctl(*a): return call(250, *a)
def add(name, ring):
    data = b"secret:" + name
    return call(248, b"user", name, data, len(data), ring)
U, US, S = -4, -5, -3
def persistent(): return keyctl(22, -1, S)
def search(ring, name): return keyctl(10, ring, b"user", name, 0)
def read(key):
    buf = ctypes.create_string_buffer(256)
    n = keyctl(11, key, buf, 256)
    return buf.raw[:n].decode() if n >= 0 else "unreadable"
def describe(key):
    buf = ctypes.create_string_buffer(256)
    n = keyctl(6, key, buf, 256)
    return buf.value.decode() if n >= 0 else "undescribable"
mode = sys.argv[1]
if mode == "plant":
    p = persistent()
    print("persistent", p)
    for ring, name in ((U, b"planted-u"), (US, b"planted-us"), (p, b"planted-p")):
        k = add(name, ring)
        keyctl(5, k, 0x3f3f0000)  # readable by the uid, possessed or not
        print(name.decode(), k)
    n = 0
    while n < 1000 and add(b"fill-%d" % n, U) >= 0: n += 1
    print("filled", n, "then", add(b"one-more", U))
elif mode == "probe":
    p = persistent()
    for ring, name in ((U, b"planted-u"), (US, b"planted-us"), (p, b"planted-p")):
        k = search(ring, name)
        print(name.decode(), ("found " + read(k)) if k >= 0 else "absent")
    n = 0
    while n < 150 and add(b"fresh-%d" % n, U) >= 0: n += 1
    print("added", n)
elif mode == "session-plant":
    print("key", add(b"session-secret", S))
    print("session", keyctl(0, S, 0), describe(S))
elif mode == "session-read":
    k = search(S, b"session-secret")
    print("session", keyctl(0, S, 0), ("found " + read(k)) if k >= 0 else "absent")
elif mode == "session-join":
    names = sys.argv[2:]
    for line in open("/proc/keys"):
        fields = line.split()
        if fields[7] == "keyring" and fields[8].startswith("sandboxd-session-"):
            names.append(fields[8].rstrip(":"))
    for name in names:
        joined = keyctl(1, name.encode())
        k = search(S, b"session-secret")
        print("joined", name, describe(joined), ("found " + read(k)) if k >= 0 else "absent")
"#;

/// Runs the keys script in `mode` in session sandbox `id`; its stdout.
async fn keys(client: &SandboxdClient, id: &str, mode: &[&str]) -> String {
    let mut argv = vec!["python3", "-c", KEYS_PY];
    argv.extend_from_slice(mode);
    let started = client
        .exec(Scope::Session, id, &request(&argv))
        .await
        .unwrap_or_else(|error| panic!("exec in {id}: {error}"));
    let command = CommandRef::Id(started.command_id);
    let (stdout, proof) = read_all(client, id, &command, OutputStream::Stdout, WAIT).await;
    let (stderr, _) = read_all(client, id, &command, OutputStream::Stderr, WAIT).await;
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert_eq!(
        proof.exit_code,
        Some(0),
        "{mode:?} in {id}: {stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// The value after `name ` on the line that starts with it.
fn field<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in:\n{output}"))
}

/// Removes session sandbox `id` and waits until its uid is released (its
/// workspace gone).
async fn remove(daemon: &TestDaemon, id: &str) {
    let client = daemon.client().await;
    client.deprovision(Scope::Session, id, false).await.unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    assert!(
        wait_until(WAIT, || !workspace.exists()),
        "{id}'s teardown never finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_sandbox_of_the_same_uid_finds_none_of_the_earlier_ones_keys_and_a_fresh_quota() {
    // One uid: the second sandbox must get the first one's. No pool, so
    // nothing else takes it.
    let uid = 2_100_000_700u32;
    let daemon = TestDaemon::start(Options {
        extra_toml: format!(
            "runner_uid_range = \"{uid}-{uid}\"\n[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n"
        ),
        ..Options::default()
    });
    let client = daemon.client().await;
    let first = sandboxd_tests::start_session(&daemon, "first").await;
    assert_eq!(procs::uid_of(first), Some(uid));
    let planted = keys(&client, "first", &["plant"]).await;
    for name in ["persistent", "planted-u", "planted-us", "planted-p"] {
        let id: i64 = field(&planted, name).parse().unwrap();
        assert!(id > 0, "{name} was not planted:\n{planted}");
    }
    // The uid's quota is used up (EDQUOT).
    assert!(
        field(&planted, "filled").ends_with("then -122"),
        "{planted}"
    );
    remove(&daemon, "first").await;

    let second = sandboxd_tests::start_session(&daemon, "second").await;
    assert_eq!(procs::uid_of(second), Some(uid), "the uid was reused");
    let probed = keys(&client, "second", &["probe"]).await;
    for name in ["planted-u", "planted-us", "planted-p"] {
        assert_eq!(
            field(&probed, name),
            "absent",
            "the earlier sandbox's key {name} is readable:\n{probed}"
        );
    }
    assert_eq!(field(&probed, "added"), "150", "the quota is not fresh");
    // Still an ordinary sandbox: its own keys are its own.
    let again = keys(&client, "second", &["probe"]).await;
    assert!(again.contains("added"), "{again}");

    // Released, the uid leaves the kernel nothing: its user keyrings
    // would otherwise stay until reboot, and every later join by name
    // would walk past them.
    remove(&daemon, "second").await;
    assert!(
        wait_until(WAIT, || !owns_keys(uid)),
        "the kernel still holds keys of the released uid {uid}:\n{}",
        std::fs::read_to_string("/proc/key-users").unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_state_was_emptied_frees_what_the_kernel_kept_of_its_old_uids() {
    let uid = 2_100_000_701u32;
    let mut daemon = TestDaemon::start(Options {
        extra_toml: format!(
            "runner_uid_range = \"{uid}-{uid}\"\n[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n"
        ),
        ..Options::default()
    });
    let client = daemon.client().await;
    sandboxd_tests::start_session(&daemon, "kept").await;
    keys(&client, "kept", &["plant"]).await;
    drop(client);
    assert!(daemon.stop().success(), "{}", daemon.log_text());
    // A stopped daemon keeps its sandbox's uid for its restart, and the
    // uid's keyrings with it.
    assert!(
        owns_keys(uid),
        "the kept uid {uid} lost its keys at the stop"
    );

    // The operator empties the state directory; the uid's claim is left.
    for entry in std::fs::read_dir(daemon.state_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    daemon.launch();
    daemon.wait_ready();
    assert!(
        wait_until(WAIT, || !owns_keys(uid)),
        "the kernel still holds keys of {uid}, a uid the daemon no longer has:\n{}",
        daemon.log_text()
    );
    // And the uid is the daemon's to hand out again, keys and quota fresh.
    let client = daemon.client().await;
    let fresh = sandboxd_tests::start_session(&daemon, "fresh").await;
    assert_eq!(procs::uid_of(fresh), Some(uid));
    let probed = keys(&client, "fresh", &["probe"]).await;
    assert_eq!(field(&probed, "planted-u"), "absent", "{probed}");
    assert_eq!(field(&probed, "added"), "150", "{probed}");
}

/// Whether the kernel holds a key of `uid`: `/proc/key-users` lists every
/// uid that owns one.
fn owns_keys(uid: u32) -> bool {
    std::fs::read_to_string("/proc/key-users")
        .unwrap_or_default()
        .lines()
        .any(|line| line.trim_start().starts_with(&format!("{uid}:")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_share_their_sandboxs_session_keyring_and_no_other_sandbox_can_join_it() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let x = sandboxd_tests::start_session(&daemon, "x").await;
    let y = sandboxd_tests::start_session(&daemon, "y").await;
    let (x_uid, y_uid) = (procs::uid_of(x).unwrap(), procs::uid_of(y).unwrap());
    assert_ne!(x_uid, y_uid);

    let planted = keys(&client, "x", &["session-plant"]).await;
    let key: i64 = field(&planted, "key").parse().unwrap();
    assert!(key > 0, "{planted}");
    // "<id> keyring;<uid>;<gid>;<perm>;<name>"
    let session = field(&planted, "session");
    let (x_session, description) = session.split_once(' ').unwrap();
    let name = description.rsplit(';').next().unwrap();
    assert!(name.starts_with("sandboxd-session-"), "{planted}");
    assert!(
        description.starts_with(&format!("keyring;{x_uid};")),
        "{planted}"
    );

    // A later command of x's is in the same keyring, and reads the key.
    let read = keys(&client, "x", &["session-read"]).await;
    assert_eq!(
        field(&read, "session"),
        format!("{x_session} found secret:session-secret"),
        "x's commands do not share a session keyring"
    );

    // y, told x's keyring's name (and trying whatever /proc/keys shows),
    // joins a keyring of its own uid, without x's key.
    let joined = keys(&client, "y", &["session-join", name]).await;
    let attempts: Vec<&str> = joined
        .lines()
        .filter(|line| line.starts_with("joined "))
        .collect();
    assert!(!attempts.is_empty(), "{joined}");
    for attempt in attempts {
        assert!(attempt.ends_with(" absent"), "y read x's key: {attempt}");
        assert!(
            attempt.contains(&format!(" keyring;{y_uid};")),
            "y joined a keyring not its own: {attempt}"
        );
    }
    let own = keys(&client, "y", &["session-read"]).await;
    assert!(field(&own, "session").ends_with("absent"), "{own}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_background_commands_start_in_one_sandbox() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\npids = 4096\n".to_string(),
        ..Options::default()
    });
    let client = daemon.client().await;
    sandboxd_tests::start_session(&daemon, "many").await;
    for n in 0..1000 {
        if let Err(error) = client
            .exec(Scope::Session, "many", &request(&["sleep", "600"]))
            .await
        {
            panic!(
                "command {n} of 1000 refused: {error}\n{}",
                daemon.log_text()
            );
        }
    }
    // Still a working sandbox with all of them running.
    let read = keys(&client, "many", &["session-read"]).await;
    assert!(field(&read, "session").ends_with("absent"), "{read}");
    remove(&daemon, "many").await;
}
