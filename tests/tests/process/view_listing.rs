//! `status` and `describe` list each path a process-tier sandbox's view
//! adds over the host's tree (`isolation = "full"`), with the setting that
//! put it there: through the client library, `sandboxctl`'s text and its
//! `--json`. Each `[view]` entry is also tried from inside a sandbox, so
//! the list is checked against what the sandbox sees.

use std::path::Path;
use std::time::Duration;

use sandboxd_client::{CommandRef, ExitReason, OutputStream, Scope, ViewEntry, ViewKind};
use sandboxd_tests::commands::shell;
use sandboxd_tests::{make_test_dir, Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// How `script` ended in session `id`'s sandbox, and its stdout and stderr.
async fn run(daemon: &TestDaemon, id: &str, script: &str) -> (ExitReason, String, String) {
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let read = |stream| sandboxd_tests::commands::read_all(&client, id, &command, stream, WAIT);
    let (stdout, proof) = read(OutputStream::Stdout).await;
    let (stderr, _) = read(OutputStream::Stderr).await;
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (proof.reason, text(stdout), text(stderr))
}

/// The entry for `path` put there by `source`.
fn listed<'a>(view: &'a [ViewEntry], path: &Path, source: &str) -> &'a ViewEntry {
    let path = path.display().to_string();
    view.iter()
        .find(|entry| entry.path == path && entry.source == source)
        .unwrap_or_else(|| panic!("{path} from {source} is not listed: {view:#?}"))
}

/// A host file to hide: one every Linux host has.
fn a_host_file() -> &'static Path {
    ["/etc/hostname", "/etc/os-release", "/etc/hosts"]
        .into_iter()
        .map(Path::new)
        .find(|path| path.is_file())
        .expect("a host file to hide")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_describe_list_the_view_and_where_each_path_comes_from() {
    let scratch = make_test_dir();
    let (tools, cache) = (scratch.join("tools"), scratch.join("cache"));
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(tools.join("tool.sh"), "echo tool\n").unwrap();
    // Hidden inside a path bound back: the bind must not bring them back.
    std::fs::write(tools.join("secret.txt"), "host secret\n").unwrap();
    std::fs::create_dir(tools.join("keys")).unwrap();
    std::fs::write(tools.join("keys").join("id"), "host key\n").unwrap();
    std::fs::create_dir(&cache).unwrap();
    let everyone = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(&cache, everyone).unwrap();
    let hidden = a_host_file();
    let daemon = TestDaemon::start(Options {
        extra_toml: format!(
            "[view]\nread_only = [{:?}]\nread_write = [{:?}]\nhidden = [{:?}, {:?}, {:?}]\n",
            tools.display().to_string(),
            cache.display().to_string(),
            hidden.display().to_string(),
            tools.join("secret.txt").display().to_string(),
            tools.join("keys").display().to_string()
        ),
        ..Options::default()
    });
    let client = daemon.client().await;

    let status = client.status().await.unwrap();
    let view = &status.view;
    assert_eq!(
        listed(view, &tools, "[view] read_only").kind,
        ViewKind::ReadOnly
    );
    assert_eq!(
        listed(view, &cache, "[view] read_write").kind,
        ViewKind::ReadWrite
    );
    let hidden_entry = listed(view, hidden, "[view] hidden");
    assert_eq!(hidden_entry.kind, ViewKind::Hidden);
    assert!(
        hidden_entry.detail.contains("/dev/null"),
        "{hidden_entry:?}"
    );
    // Under /tmp, which is private in the view: bound back over it.
    assert!(
        listed(view, &tools, "[view] read_only")
            .detail
            .contains("under the private tmpfs"),
        "{view:#?}"
    );
    assert_eq!(
        listed(view, Path::new("/"), "built-in").kind,
        ViewKind::ReadOnly
    );
    assert_eq!(
        listed(view, Path::new("/tmp"), "built-in").kind,
        ViewKind::PrivateTmpfs
    );
    assert_eq!(
        listed(view, Path::new("/proc"), "built-in").kind,
        ViewKind::OwnInstance
    );
    assert_eq!(
        listed(view, Path::new("/root"), "built-in").kind,
        ViewKind::Hidden
    );
    let state_dir = Path::new(&status.state_dir);
    assert_eq!(listed(view, state_dir, "state_dir").kind, ViewKind::Hidden);

    sandboxd_tests::start_session(&daemon, "view").await;
    let info = client.describe(Scope::Session, "view").await.unwrap();
    let workspace = listed(&info.view, Path::new("/workspace"), "built-in");
    assert_eq!(workspace.kind, ViewKind::Workspace);
    let host_workspace = daemon.workspace(Scope::Session, "view");
    assert_eq!(
        workspace.host_path.as_deref(),
        Some(host_workspace.to_str().unwrap())
    );
    assert_eq!(
        listed(&info.view, &tools, "[view] read_only").kind,
        ViewKind::ReadOnly
    );

    // The list is what the sandbox sees.
    let (tools, cache) = (tools.display(), cache.display());
    let (reason, out, _) = run(&daemon, "view", &format!("sh {tools}/tool.sh")).await;
    assert_eq!(
        (reason, out.as_str()),
        (ExitReason::Exited { code: 0 }, "tool\n")
    );
    let (reason, out, err) = run(
        &daemon,
        "view",
        &format!("cat {tools}/secret.txt; ls -A {tools}/keys; cat {tools}/keys/id"),
    )
    .await;
    assert_eq!(reason, ExitReason::Exited { code: 1 }, "{out}{err}");
    assert!(!out.contains("host"), "a hidden path came back: {out}");
    assert!(err.contains("Permission denied"), "{err}");
    let (reason, _, err) = run(&daemon, "view", &format!("touch {tools}/new")).await;
    assert_eq!(reason, ExitReason::Exited { code: 1 });
    assert!(err.contains("Read-only file system"), "{err}");
    let (reason, _, err) = run(&daemon, "view", &format!("echo x > {cache}/written")).await;
    assert_eq!(reason, ExitReason::Exited { code: 0 }, "{err}");
    assert!(scratch.join("cache/written").is_file());
    // A hidden file is /dev/null on a nodev mount: it cannot be opened.
    let (reason, _, err) = run(&daemon, "view", &format!("cat {}", hidden.display())).await;
    assert_eq!(reason, ExitReason::Exited { code: 1 });
    assert!(err.contains("Permission denied"), "{err}");

    // sandboxctl: the same rows, readable and in --json.
    let text =
        |args: &[&str]| String::from_utf8_lossy(&daemon.sandboxctl(args).stdout).into_owned();
    let status_text = text(&["status"]);
    assert!(status_text.contains("\nview:\n"), "{status_text}");
    let row = status_text
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{tools} ")))
        .unwrap_or_else(|| panic!("no row for {tools}:\n{status_text}"));
    assert!(
        row.contains("read-only") && row.contains("[view] read_only"),
        "{row}"
    );
    let described = text(&["describe", "session", "view"]);
    let row = described
        .lines()
        .find(|line| line.trim_start().starts_with("/workspace "))
        .unwrap_or_else(|| panic!("no /workspace row:\n{described}"));
    assert!(
        row.contains("workspace") && row.contains(&format!("(host: {})", host_workspace.display())),
        "{row}"
    );
    let json: serde_json::Value = serde_json::from_str(&text(&["status", "--json"])).unwrap();
    let rows = json["view"].as_array().expect("a view array");
    assert!(
        rows.iter()
            .any(|row| row["path"] == hidden.to_str().unwrap()
                && row["kind"] == "hidden"
                && row["source"] == "[view] hidden"),
        "{json:#}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&text(&["describe", "session", "view", "--json"])).unwrap();
    assert!(
        json["view"]
            .as_array()
            .expect("a view array")
            .iter()
            .any(|row| row["kind"] == "workspace"
                && row["host_path"] == host_workspace.to_str().unwrap()),
        "{json:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_view_nothing_is_listed() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"\n".to_string(),
        ..Options::default()
    });
    let client = daemon.client().await;
    assert_eq!(client.status().await.unwrap().view, Vec::new());
    sandboxd_tests::start_session(&daemon, "plain").await;
    let info = client.describe(Scope::Session, "plain").await.unwrap();
    assert_eq!(info.view, Vec::new());
    let text = String::from_utf8_lossy(&daemon.sandboxctl(&["status"]).stdout).into_owned();
    assert!(!text.contains("\nview:\n"), "{text}");
}
