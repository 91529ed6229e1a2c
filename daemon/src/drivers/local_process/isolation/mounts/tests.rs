//! The view's plan as written down, and (as root) built for real.

use std::ffi::CString;

use super::super::mount_program::{Call, MountProgram};
use super::program::{c_path, mount_points};
use super::*;

fn settings(view: ViewConfig) -> ViewSettings {
    ViewSettings::new(
        &view,
        512 << 20,
        Path::new("/var/lib/sandboxd"),
        Path::new("/run/sandboxd/sandboxd.sock"),
    )
}

#[test]
fn hides_homes_and_the_daemons_directories_and_binds_the_workspace_back() {
    let plan = settings(ViewConfig::default()).plan(
        Path::new("/var/lib/sandboxd/sandboxes/sbx-a"),
        Path::new("/root/bin/runner"),
    );
    assert_eq!(plan.tmp_size, 512 << 20);
    let hidden: Vec<&str> = plan.hidden.iter().map(|p| p.to_str().unwrap()).collect();
    assert_eq!(
        hidden,
        [
            "/home",
            "/root",
            "/run/sandboxd",
            "/run/user",
            "/var/lib/sandboxd"
        ]
    );
    assert_eq!(
        plan.binds,
        [
            Bind::back(Path::new("/root/bin/runner"), false),
            Bind::back(Path::new("/var/lib/sandboxd/sandboxes/sbx-a"), true),
        ]
    );
}

#[test]
fn the_workspace_goes_to_workspace_and_the_identity_over_etc() {
    let settings = settings(ViewConfig::default()).with_workspace_at(Ok(WORKSPACE.into()));
    let host = Path::new("/var/lib/sandboxd/sandboxes/sbx-a");
    let files = IdentityFiles {
        passwd: "/var/lib/sandboxd/identities/7.passwd".into(),
        group: "/var/lib/sandboxd/identities/7.group".into(),
    };
    let plan = settings.plan(host, Path::new("/usr/bin/runner"));
    let binds = plan.with_identity(&files).binds;
    let target = |path: &str| binds.iter().find(|bind| bind.path == Path::new(path));
    let workspace = target(host.to_str().unwrap()).unwrap();
    assert_eq!(
        (workspace.target.to_str(), workspace.writable),
        (Some(WORKSPACE), true)
    );
    let passwd = target("/var/lib/sandboxd/identities/7.passwd").unwrap();
    assert_eq!(
        (passwd.target.to_str(), passwd.writable),
        (Some(PASSWD), false)
    );
    let group = target("/var/lib/sandboxd/identities/7.group").unwrap();
    assert_eq!(group.target, Path::new(GROUP));
    assert_eq!(settings.workspace_inside(host), Path::new(WORKSPACE));
}

#[test]
fn a_prepared_view_is_the_plan_without_the_workspace_whose_cover_is_found() {
    let dir = std::env::temp_dir().join(format!("sandboxd-cover-{}", std::process::id()));
    let state = dir.join("state");
    std::fs::create_dir_all(state.join("sandboxes")).unwrap();
    let settings = ViewSettings::new(
        &ViewConfig::default(),
        512 << 20,
        &state,
        Path::new("/run/sandboxd/sandboxd.sock"),
    );
    let workspace = state.join("sandboxes/sbx-a");
    let program = Path::new("/usr/bin/runner");
    let mut whole = settings.plan(&workspace, program);
    let prepared = settings.plan_prepared(program);
    assert_eq!(
        whole.binds.pop().map(|bind| bind.path),
        Some(workspace.clone())
    );
    assert_eq!(prepared, whole);
    // Under /tmp (as the tests' state directories are) the private
    // tmpfs covers it, writable; elsewhere the hidden state directory,
    // read-only once built.
    let cover = cover_in(&settings.covers(), &workspace);
    if dir.starts_with("/tmp") && Path::new("/tmp").is_dir() {
        assert_eq!(
            cover,
            Some(Cover {
                path: "/tmp".into(),
                writable: true
            })
        );
    } else {
        assert_eq!(
            cover,
            Some(Cover {
                path: state.clone(),
                writable: false
            })
        );
    }
    assert_eq!(cover_in(&settings.covers(), Path::new("/usr/share")), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn operators_paths_join_the_plan_and_a_socket_in_a_shared_dir_is_hidden_alone() {
    let view = ViewConfig {
        read_only: vec!["/root/.cargo".into()],
        read_write: vec!["/srv/cache".into()],
        hidden: vec!["/opt/secrets".into(), "/home".into()],
        tmp_size: Some(64 << 20),
    };
    let settings = ViewSettings::new(
        &view,
        0,
        Path::new("/var/lib/sandboxd"),
        Path::new("/run/sandboxd.sock"),
    );
    let plan = settings.plan(Path::new("/w"), Path::new("/usr/bin/runner"));
    assert_eq!(plan.tmp_size, 64 << 20);
    assert!(plan.hidden.contains(&PathBuf::from("/opt/secrets")));
    assert!(plan.hidden.contains(&PathBuf::from("/run/sandboxd.sock")));
    assert!(!plan.hidden.contains(&PathBuf::from("/run")));
    assert_eq!(
        plan.hidden.iter().filter(|p| p.ends_with("home")).count(),
        1
    );
    let writable: Vec<(&str, bool)> = plan
        .binds
        .iter()
        .map(|bind| (bind.path.to_str().unwrap(), bind.writable))
        .collect();
    assert_eq!(
        writable,
        [
            ("/usr/bin/runner", false),
            ("/root/.cargo", false),
            ("/srv/cache", true),
            ("/w", true)
        ]
    );
}

#[test]
fn the_prepared_view_binds_back_on_mount_points_under_its_covers_and_mounts_proc_last() {
    let dir = crate::test_dir::TestDir::new("view-plan");
    let dir = &dir.0;
    let state = dir.join("state");
    let workspace = state.join("sandboxes").join("sbx-a");
    std::fs::create_dir_all(&workspace).unwrap();
    let socket = dir.join("run").join("sandboxd.sock");
    let settings = ViewSettings::new(&ViewConfig::default(), 64 << 20, &state, &socket);
    for layout in [TmpfsLayout::Shared, TmpfsLayout::PerPath] {
        let plan = settings.plan(&workspace, Path::new("/bin/sh"));
        let program = prepared_as(plan, layout);
        let words = step_words(&program);
        let position = |wanted: &str| {
            words
                .iter()
                .position(|words| words == wanted)
                .unwrap_or_else(|| panic!("no step {wanted:?} in {words:#?}"))
        };
        assert_eq!(words[0], "make every mount private /");
        assert!(position("open /bin/sh") < position("make the system read-only /"));
        // The state directory is under /tmp here: its private tmpfs
        // hides it, and the workspace is bound back on a mount point
        // made there.
        let private_tmp = position("mount the private tmpfs on /tmp");
        let mount_point = position(&format!("make a mount point at {}", workspace.display()));
        let bind_back = position(&format!("bind back {}", workspace.display()));
        assert!(private_tmp < mount_point && mount_point < bind_back);
        assert!(!words.contains(&format!("hide {}", state.display())));
        assert!(position("hide /root") < position("make read-only /root"));
        assert_eq!(words.last().unwrap(), "mount /proc");
    }
}

/// `plan` prepared with its tmpfs laid out as `layout`, whatever this
/// daemon would make.
#[test]
fn a_hidden_path_inside_a_bound_back_one_is_hidden_again_after_the_bind() {
    let dir = crate::test_dir::TestDir::new("view-hidden-in-bind");
    let tool = dir.0.join("tool");
    std::fs::create_dir_all(tool.join("keys")).unwrap();
    std::fs::write(tool.join("credentials"), "secret").unwrap();
    let view = ViewConfig {
        read_only: vec![tool.clone()],
        hidden: vec![tool.join("credentials"), tool.join("keys")],
        ..ViewConfig::default()
    };
    let settings = ViewSettings::new(
        &view,
        0,
        Path::new("/var/lib/sx"),
        Path::new("/run/sx.sock"),
    );
    for layout in [TmpfsLayout::Shared, TmpfsLayout::PerPath] {
        let plan = settings.plan(Path::new("/w"), Path::new("/bin/sh"));
        let words = step_words(&prepared_as(plan, layout));
        let at = |wanted: String| {
            words
                .iter()
                .rposition(|words| *words == wanted)
                .unwrap_or_else(|| panic!("no step {wanted:?} in {words:#?}"))
        };
        let bind = at(format!("bind back {}", tool.display()));
        assert!(bind < at(format!("hide {}", tool.join("credentials").display())));
        assert!(bind < at(format!("hide {}", tool.join("keys").display())));
    }
}

fn prepared_as(mut plan: MountPlan, layout: TmpfsLayout) -> MountProgram {
    plan.tmpfs = layout;
    plan.prepare().unwrap()
}

fn step_words(program: &MountProgram) -> Vec<String> {
    program
        .steps()
        .iter()
        .map(|step| format!("{} {}", step.what, step.path.display()))
        .collect()
}

#[test]
fn the_shared_layout_makes_one_tmpfs_and_makes_only_mounts_read_only() {
    let dir = crate::test_dir::TestDir::new("view-layout");
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let settings = ViewSettings::new(&ViewConfig::default(), 64 << 20, &state, &dir.0);
    let plan = settings.plan(&state, Path::new("/bin/sh"));
    let count = |program: &MountProgram, matches: fn(&Call) -> bool| {
        program
            .steps()
            .iter()
            .filter(|step| matches(&step.call))
            .count()
    };
    let new_tmpfs = |call: &Call| match call {
        Call::MakeTmpfs { .. } => true,
        Call::Mount { fstype, .. } => fstype.as_deref() == Some(c"tmpfs"),
        _ => false,
    };
    let shared = prepared_as(plan.clone(), TmpfsLayout::Shared);
    let per_path = prepared_as(plan, TmpfsLayout::PerPath);
    // /root exists on every host the tests run on, /tmp too.
    assert_eq!(count(&shared, new_tmpfs), 1, "{:#?}", step_words(&shared));
    assert!(
        count(&per_path, new_tmpfs) >= 2,
        "{:#?}",
        step_words(&per_path)
    );
    // Every directory of the one tmpfs is attached before it is let go.
    let words = step_words(&shared);
    let let_go = words
        .iter()
        .position(|words| words == "let go of the private tmpfs /")
        .unwrap();
    let last_attach = shared
        .steps()
        .iter()
        .rposition(|step| matches!(step.call, Call::AttachTmpfsDir { .. }))
        .unwrap();
    assert!(last_attach < let_go);
    // A read-only cover is a bind remount: the same tmpfs stays
    // writable on /tmp.
    for program in [&shared, &per_path] {
        for step in program
            .steps()
            .iter()
            .filter(|step| step.what == "make read-only")
        {
            let Call::Mount { flags, .. } = &step.call else {
                panic!("{step:?}")
            };
            assert_eq!(*flags, READ_ONLY_COVER);
            assert_ne!(flags & libc::MS_BIND, 0);
        }
    }
}

/// What a child that built the view finds, as its exit code: 0 when
/// all is as `layout` says, else the number of the first check that
/// failed. Allocates nothing (it runs in a fork of a threaded test).
///
/// # Safety
/// Only in a forked child, in its own mount namespace.
unsafe fn check_view(layout: TmpfsLayout, in_workspace: &CString) -> i32 {
    let device = |path: &std::ffi::CStr| {
        let mut stat: libc::stat = std::mem::zeroed();
        match libc::stat(path.as_ptr(), &mut stat) {
            0 => Some(stat.st_dev),
            _ => None,
        }
    };
    let (tmp, var_tmp, shm) = (device(c"/tmp"), device(c"/var/tmp"), device(c"/dev/shm"));
    let (Some(tmp), Some(var_tmp), Some(shm)) = (tmp, var_tmp, shm) else {
        return 1;
    };
    let shared = tmp == var_tmp && var_tmp == shm;
    let apart = tmp != var_tmp && var_tmp != shm && tmp != shm;
    match layout {
        TmpfsLayout::Shared if !shared => return 2,
        TmpfsLayout::PerPath if !apart => return 3,
        _ => {}
    }
    let mut fs: libc::statfs = std::mem::zeroed();
    if libc::statfs(c"/tmp".as_ptr(), &mut fs) != 0 || fs.f_type != libc::TMPFS_MAGIC {
        return 4;
    }
    let create = |path: *const libc::c_char| {
        let fd = libc::open(
            path,
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            libc::close(fd);
        }
        fd >= 0
    };
    if !create(c"/tmp/probe".as_ptr()) || !create(c"/dev/shm/probe".as_ptr()) {
        return 5;
    }
    // Apart even when shared: a directory each.
    if libc::access(c"/var/tmp/probe".as_ptr(), libc::F_OK) == 0 {
        return 6;
    }
    if libc::mkdir(c"/root/probe".as_ptr(), 0o700) == 0
        || std::io::Error::last_os_error().raw_os_error() != Some(libc::EROFS)
    {
        return 7;
    }
    if !create(in_workspace.as_ptr()) {
        return 8;
    }
    0
}

#[test]
fn both_layouts_build_a_view_that_a_process_finds_as_planned() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/root").is_dir() {
        return;
    }
    let dir = crate::test_dir::TestDir::new("view-built");
    let workspace = dir.0.join("state").join("sandboxes").join("sbx-a");
    std::fs::create_dir_all(&workspace).unwrap();
    let settings = ViewSettings::new(
        &ViewConfig::default(),
        64 << 20,
        &dir.0.join("state"),
        &dir.0,
    );
    let in_workspace = c_path(&workspace.join("mine")).unwrap();
    let mut layouts = vec![TmpfsLayout::PerPath];
    if settings.tmpfs_layout() == TmpfsLayout::Shared {
        layouts.push(TmpfsLayout::Shared);
    }
    for layout in layouts {
        let program = prepared_as(settings.plan(&workspace, Path::new("/bin/sh")), layout);
        // SAFETY: the child makes system calls only (the program and
        // the checks allocate nothing) and leaves by _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            // SAFETY: this is the forked child, in a mount namespace
            // of its own before the program runs.
            unsafe {
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    libc::_exit(100);
                }
                if !program.run() {
                    libc::_exit(101);
                }
                libc::_exit(check_view(layout, &in_workspace));
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status),
            "{layout:?}: the child ended with {status:#x}"
        );
        assert_eq!(libc::WEXITSTATUS(status), 0, "{layout:?}: check failed");
        assert!(
            workspace.join("mine").exists(),
            "{layout:?}: not the workspace"
        );
        std::fs::remove_file(workspace.join("mine")).unwrap();
    }
}

#[test]
fn mount_points_are_unescaped() {
    let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                     23 22 0:5 / /mnt/a\\040b rw - tmpfs tmpfs rw\n";
    let points: Vec<PathBuf> = mount_points(mountinfo).collect();
    assert_eq!(points, [PathBuf::from("/"), PathBuf::from("/mnt/a b")]);
}
