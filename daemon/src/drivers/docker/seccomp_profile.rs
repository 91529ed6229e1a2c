//! The seccomp profile every runner container gets, in place of the
//! engine's default: the calls the process tier refuses
//! ([`refused_syscalls`]), refused the same way, over a default of "allow".
//!
//! Why not the engine's default profile: it is the engine's, and changes
//! with it (Docker 20.10's lets `io_uring_setup` through; 25.0's does
//! not). Why a deny list over "allow" and not a copy of Docker's allow
//! list: a runner is an ordinary program, and an allow list copied from one
//! Docker release goes stale against the kernel and the C library (a call
//! it misses is refused, and the program breaks in ways hard to see); most
//! of what Docker's list withholds beyond ours needs a capability, and the
//! container has none (`cap_drop: ALL`, `no-new-privileges`). What it
//! withholds that needs none is refused here too: the keyring calls (the
//! container has no keyring of its own: its user keyring is shared with
//! every process of its uid on the host) and `personality` beyond the
//! harmless values.
//!
//! The profile is handed to the engine inline
//! (`security_opt: ["seccomp=<json>"]`); runc compiles it with libseccomp,
//! for the engine's architecture and its 32-bit companions (i386 and x32
//! on x86_64, arm on aarch64), by name, so a 32-bit call is refused as its
//! 64-bit twin is. A name the engine's libseccomp does not know is skipped
//! by runc (`open_tree_attr` on libseccomp before 2.6: it needs
//! `CAP_SYS_ADMIN` for anything but a plain open anyway).

use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::drivers::refused_syscalls::{
    always_refused, keyring_calls, CLONE3, CLONE_NEW_FLAGS, HARMLESS_PERSONALITIES,
};

/// The profile, as the `seccomp=` security option: made once, the same
/// text every time (a stopped container whose option differs was made with
/// another profile, and is recreated).
pub fn security_option() -> &'static str {
    static OPTION: OnceLock<String> = OnceLock::new();
    OPTION.get_or_init(|| format!("seccomp={}", profile()))
}

/// For `status`.
pub fn describe() -> String {
    format!(
        "the daemon's own profile on every container: {} calls refused with EPERM (unshare, setns, clone with CLONE_NEW*, mount and the new mount API, bpf, perf_event_open, io_uring, userfaultfd, kexec and modules, open_by_handle_at, the keyring, swap, reboot, clock, quotas, personality beyond the harmless values), clone3 with ENOSYS; the rest allowed, under no capabilities and no-new-privileges",
        refused_names().len() + 2
    )
}

/// The calls refused with `EPERM` whatever their arguments.
fn refused_names() -> Vec<&'static str> {
    always_refused()
        .into_iter()
        .chain(keyring_calls())
        .map(|call| call.name)
        .collect()
}

fn profile() -> Value {
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "archMap": [
            { "architecture": "SCMP_ARCH_X86_64",
              "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"] },
            { "architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"] },
            { "architecture": "SCMP_ARCH_RISCV64", "subArchitectures": [] },
        ],
        "syscalls": [
            refuse(&refused_names(), libc::EPERM, vec![]),
            refuse(&[CLONE3], libc::ENOSYS, vec![]),
            refuse(&["clone"], libc::EPERM, clone_conditions()),
            refuse(&["personality"], libc::EPERM, personality_conditions()),
        ],
    })
}

/// One rule. Conditions on the same argument are alternatives: runc adds
/// each as a rule of its own when more than one tests an argument.
fn refuse(names: &[&str], errno: i32, conditions: Vec<Value>) -> Value {
    json!({
        "names": names,
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": errno,
        "args": conditions,
    })
}

/// `(argument 0 & mask) == value`: one condition.
fn masked_equal(mask: u64, value: u64) -> Value {
    json!({ "index": 0, "op": "SCMP_CMP_MASKED_EQ", "value": mask, "valueTwo": value })
}

/// `clone` with any namespace flag (the flags are argument 0 on every
/// architecture in the map: s390x, where they are not, is left out).
fn clone_conditions() -> Vec<Value> {
    CLONE_NEW_FLAGS
        .iter()
        .map(|&flag| masked_equal(flag as u64, flag as u64))
        .collect()
}

/// `personality` with anything but [`HARMLESS_PERSONALITIES`], as
/// alternatives of one masked comparison each (a rule cannot say "none of
/// these values": runc splits comparisons of one argument into separate
/// rules, which are or-ed).
fn personality_conditions() -> Vec<Value> {
    personality_refusals()
        .into_iter()
        .map(|(mask, value)| masked_equal(mask, value))
        .collect()
}

/// `(mask, value)` pairs whose union is every 32-bit value but the harmless
/// ones: the query (all ones) and every combination of the harmless flag
/// bits (`PER_LINUX32`, `UNAME26`). The kernel reads the argument as 32
/// bits, so the upper half is not looked at.
///
/// A refused value has a bit outside the harmless flags set (so it is not
/// one of their combinations) and a bit clear (so it is not the query).
/// Going round the 32 bits in a ring (the other bits in order, then the
/// flag bits), such a value has a set bit followed by a clear one, and some
/// run of set bits holding an outside bit ends there. Each pair says "this
/// outside bit set, the next bit clear"; the run that ends inside the
/// flag bits is caught by the last outside bit before them, set with the
/// flag bits after it up to the clear one.
fn personality_refusals() -> Vec<(u64, u64)> {
    let flags = HARMLESS_PERSONALITIES
        .iter()
        .filter(|&&value| value != 0xffff_ffff)
        .fold(0, |all, value| all | value);
    let bit = |index: u32| 1_u64 << index;
    let outside: Vec<u32> = (0..32).filter(|&index| flags & bit(index) == 0).collect();
    let flag_bits: Vec<u32> = (0..32).filter(|&index| flags & bit(index) != 0).collect();
    let mut pairs: Vec<(u64, u64)> = outside
        .windows(2)
        .map(|pair| (bit(pair[0]) | bit(pair[1]), bit(pair[0])))
        .collect();
    // The last outside bit, then the flag bits, then round to the first.
    let last = *outside.last().expect("most bits are not harmless flags");
    let after_last: Vec<u32> = flag_bits.iter().copied().chain([outside[0]]).collect();
    for (count, &clear) in after_last.iter().enumerate() {
        let set = after_last[..count]
            .iter()
            .fold(bit(last), |all, &b| all | bit(b));
        pairs.push((set | bit(clear), set));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(value: u64) -> bool {
        personality_refusals()
            .iter()
            .any(|&(mask, want)| value & mask == want)
    }

    #[test]
    fn personality_refuses_all_but_the_harmless_values() {
        for value in HARMLESS_PERSONALITIES {
            assert!(!refused(value), "{value:#x} is harmless");
        }
        let harmless = |value: u64| HARMLESS_PERSONALITIES.contains(&(value & 0xffff_ffff));
        // Every value with one or two bits set, or one or two bits clear.
        let mut values = vec![];
        for a in 0..32 {
            for b in a..32 {
                let bits = (1_u64 << a) | (1_u64 << b);
                values.extend([bits, !bits & 0xffff_ffff]);
            }
        }
        // And a spread of others (a fixed multiplicative walk).
        values.extend((0..200_000_u64).map(|n| n.wrapping_mul(0x9e37_79b9) & 0xffff_ffff));
        for value in values {
            assert_eq!(refused(value), !harmless(value), "{value:#x}");
        }
        assert_eq!(personality_refusals().len(), 32);
    }

    #[test]
    fn the_profile_refuses_the_shared_list_and_the_keyring() {
        let option = security_option();
        let json: Value = serde_json::from_str(option.strip_prefix("seccomp=").unwrap()).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ALLOW");
        let names = json["syscalls"][0]["names"].as_array().unwrap();
        for name in [
            "io_uring_setup",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "unshare",
            "keyctl",
        ] {
            assert!(names.iter().any(|listed| listed == name), "{name}");
        }
        assert_eq!(json["syscalls"][0]["errnoRet"], libc::EPERM);
        assert_eq!(json["syscalls"][1]["names"][0], "clone3");
        assert_eq!(json["syscalls"][1]["errnoRet"], libc::ENOSYS);
        let clone = &json["syscalls"][2];
        assert_eq!(
            clone["args"].as_array().unwrap().len(),
            CLONE_NEW_FLAGS.len()
        );
        assert_eq!(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
    }
}
