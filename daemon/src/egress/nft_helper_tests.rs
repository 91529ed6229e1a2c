//! The nft helper's loop served on a thread of the test, and its daemon
//! side given helpers that cannot work. Run as root, like CI: they make
//! network namespaces and load nftables tables.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;

use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use sandboxd_protocol::egress::Posture;

use super::nft::Nft;
use super::nft_helper::serve;
use super::nft_helper_client::{answer, request, Load, NftHelper};
use super::ruleset::{Matched, Ruleset};

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the nft helper's tests run as root, like CI: they make network namespaces"
    );
}

/// A new network namespace, kept alive by its descriptor (its thread ends).
fn new_namespace() -> OwnedFd {
    std::thread::spawn(|| {
        // It moves this thread only, which ends right after.
        unshare(CloneFlags::CLONE_NEWNET).unwrap();
        OwnedFd::from(File::open("/proc/thread-self/ns/net").unwrap())
    })
    .join()
    .unwrap()
}

/// `nft list tables` run inside `netns`.
fn tables_in(netns: &OwnedFd) -> String {
    let netns = netns.try_clone().unwrap();
    std::thread::spawn(move || {
        // It moves this thread only, which ends right after.
        setns(&netns, CloneFlags::CLONE_NEWNET).unwrap();
        Nft::find().unwrap().list_tables().unwrap()
    })
    .join()
    .unwrap()
}

/// The namespace table's script and its name.
fn namespace_table() -> (String, String) {
    let ruleset = Ruleset::new(Some(Posture::Strict), Matched::Namespace(vec![4317]));
    (ruleset.declaration(), ruleset.table)
}

/// A load through `helper` into this test's own namespace (for helpers
/// that never get as far as loading it).
fn load_here(helper: &NftHelper, script: &str) -> Load {
    let netns = File::open("/proc/self/ns/net").unwrap();
    helper.load(netns.as_fd(), script)
}

/// The helper's loop on a thread of its own: the daemon's end of its
/// socket, and where that thread's network namespace link points.
fn helper_on_a_thread() -> (OwnedFd, mpsc::Receiver<String>) {
    let (ours, its) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let (netns_after, told) = mpsc::channel();
    std::thread::spawn(move || {
        serve(&its);
        let link = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let _ = netns_after.send(link.display().to_string());
    });
    assert_eq!(answer(&ours), Ok(None), "the helper's greeting");
    (ours, told)
}

#[test]
fn the_helper_loads_each_namespace_it_is_given_and_goes_back_to_its_own() {
    require_root();
    let (socket, told) = helper_on_a_thread();
    let (script, table) = namespace_table();
    let first = new_namespace();
    let second = new_namespace();
    for netns in [&first, &second] {
        assert!(request(&socket, netns.as_fd(), &script).is_ok_and(|refusal| refusal.is_none()));
        assert!(tables_in(netns).contains(&table), "{}", tables_in(netns));
    }
    let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    assert!(!Nft::find().unwrap().list_tables().unwrap().contains(&table));
    drop(socket);
    assert_eq!(told.recv().unwrap(), ours.display().to_string());
}

#[test]
fn rules_nft_refuses_are_answered_with_its_error_and_the_helper_goes_on() {
    require_root();
    let (socket, _told) = helper_on_a_thread();
    let netns = new_namespace();
    let refusal = request(
        &socket,
        netns.as_fd(),
        "table inet t { chain c { nonsense } }",
    )
    .ok()
    .flatten()
    .expect("a refusal");
    assert!(refusal.contains("Error"), "{refusal}");
    assert!(!tables_in(&netns).contains("table inet t"));
    let (script, table) = namespace_table();
    assert!(request(&socket, netns.as_fd(), &script).is_ok_and(|refusal| refusal.is_none()));
    assert!(tables_in(&netns).contains(&table));
}

#[test]
fn a_helper_that_cannot_start_is_given_up_after_three_tries() {
    let helper = NftHelper::new(Some(PathBuf::from("/nonexistent/sandboxd")));
    for _ in 0..3 {
        assert!(helper.describe().contains("helper process"));
        helper.prepare();
    }
    assert!(
        helper
            .describe()
            .contains("an nft process each (the helper failed 3 times"),
        "{}",
        helper.describe()
    );
    assert!(matches!(load_here(&helper, ""), Load::NotLoaded(_)));
}

#[test]
fn a_helper_that_ends_before_its_greeting_is_a_failed_start() {
    let helper = NftHelper::new(Some(PathBuf::from("/bin/true")));
    helper.prepare();
    assert_eq!(
        load_here(&helper, ""),
        Load::NotLoaded("the helper is not running".to_string())
    );
    assert!(helper
        .describe()
        .contains("started again at the next namespace"));
}

#[test]
fn a_helper_that_ends_during_a_load_leaves_the_namespace_to_the_tool_and_is_started_again() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = crate::test_dir::TestDir::new("nft-helper");
    let program = dir.0.join("greets-then-ends");
    // Greets on its socket (its stdin), reads the first request and ends.
    std::fs::write(
        &program,
        "#!/bin/sh\nprintf '\\000' >&0\nhead -c 1 >/dev/null\n",
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let helper = NftHelper::new(Some(program));
    helper.prepare();
    assert!(helper.describe().contains("(pid "), "{}", helper.describe());
    assert_eq!(
        load_here(&helper, "table inet t {}"),
        Load::Unknown("the helper ended".to_string())
    );
    assert!(helper
        .describe()
        .contains("started again at the next namespace"));
    helper.prepare();
    assert!(helper.describe().contains("(pid "), "{}", helper.describe());
}
