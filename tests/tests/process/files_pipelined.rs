//! Chunks of one upload in flight together on one connection (what the
//! client library's copies do): the daemon takes them in offset order
//! whatever order they arrive in, within a window; a chunk beyond the
//! window or behind the upload is refused naming the offset to resume at,
//! and an upload its client left mid-window leaves nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{ClientError, PutChunk, PutReport, SandboxdClient, Scope};
use sandboxd_tests::noise::noise;
use sandboxd_tests::{Options, TestDaemon};

const CHUNK: usize = sandboxd_protocol::files::MAX_FILE_CHUNK as usize;
/// The daemon's window: how far ahead of its upload a chunk may wait.
const WINDOW: usize = 4;

/// A tar archive of one file `name` of `size` bytes of noise.
fn archive(name: &str, size: usize) -> (Vec<u8>, Vec<u8>) {
    let data = noise(size);
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    tar.append_data(&mut header, name, &data[..]).unwrap();
    (tar.into_inner().unwrap(), data)
}

fn chunk(archive: &[u8], index: usize) -> PutChunk {
    let start = index * CHUNK;
    let end = archive.len().min(start + CHUNK);
    PutChunk {
        path: String::new(),
        offset: start as u64,
        data: archive[start..end].to_vec(),
        last: end == archive.len(),
        mode: 0,
    }
}

/// Sends chunk `index` of `archive` on its own task.
fn send(
    client: &SandboxdClient,
    id: &str,
    archive: &[u8],
    index: usize,
) -> tokio::task::JoinHandle<Result<PutReport, ClientError>> {
    let (client, id, chunk) = (client.clone(), id.to_string(), chunk(archive, index));
    tokio::spawn(async move { client.put_tar(Scope::Session, &id, &chunk).await })
}

/// Answered once the daemon has read every call sent before it on the
/// connection: a call sent after them, and answered.
async fn all_arrived(client: &SandboxdClient, id: &str) {
    client.list_files(Scope::Session, id, "").await.unwrap();
}

/// Names in the workspace that are not hidden staging.
fn shown(workspace: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn staging(workspace: &Path) -> usize {
    shown(workspace)
        .iter()
        .filter(|name| name.starts_with(".sandboxd-tar-in-"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_arriving_out_of_order_within_the_window_land_in_order() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "p1").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "p1");
    let (tar, data) = archive("whole.bin", (WINDOW + 1) * CHUNK);
    assert_eq!(tar.len().div_ceil(CHUNK), WINDOW + 2);
    // The first chunk alone, as the client library sends it: it starts the
    // upload on this connection.
    let first = send(&client, "p1", &tar, 0).await.unwrap();
    assert_eq!(first.unwrap().received, CHUNK as u64);
    // The last chunks next, in reverse; they wait for the ones before.
    let mut later = Vec::new();
    for index in (2..=WINDOW + 1).rev() {
        later.push(send(&client, "p1", &tar, index));
        tokio::task::yield_now().await;
    }
    all_arrived(&client, "p1").await;
    assert!(
        later.iter().all(|call| !call.is_finished()),
        "none answered yet"
    );
    let second = send(&client, "p1", &tar, 1).await.unwrap();
    assert_eq!(second.unwrap().received, 2 * CHUNK as u64);
    let mut reports = Vec::new();
    for call in later {
        reports.push(call.await.unwrap().unwrap_or_else(|error| {
            panic!("a chunk ahead was refused: {error}\n{}", daemon.log_text())
        }));
    }
    assert!(reports[0].complete, "the last chunk completes the put");
    assert_eq!(reports[0].received, tar.len() as u64);
    let landed = std::fs::read(workspace.join("whole.bin")).unwrap();
    assert!(landed == data, "the file landed byte for byte");
    assert_eq!(staging(&workspace), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_window_or_stale_is_refused_and_a_dropped_client_leaves_nothing() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "p2").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "p2");
    let before = shown(&workspace);
    let (tar, _) = archive("never.bin", 12 * CHUNK);
    let report = send(&client, "p2", &tar, 0).await.unwrap().unwrap();
    assert_eq!(report.received, CHUNK as u64);
    let resume = format!("resume at offset {CHUNK}");
    for index in [1 + WINDOW + 1, 0] {
        let mut stale = chunk(&tar, index);
        if index == 0 {
            stale.offset = 512;
        }
        let started = Instant::now();
        let refused = client.put_tar(Scope::Session, "p2", &stale).await;
        match refused {
            Err(ClientError::Sandbox(error)) => {
                assert!(error.to_string().contains(&resume), "{error}")
            }
            other => panic!("chunk at {} was not refused: {other:?}", stale.offset),
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
    }
    // Within the window, waiting for chunk 1, which never comes: the
    // client goes away with it in flight.
    let waiting = send(&client, "p2", &tar, 3);
    all_arrived(&client, "p2").await;
    assert!(!waiting.is_finished());
    waiting.abort();
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(30);
    while staging(&workspace) == 0 {
        assert!(
            Instant::now() < deadline,
            "the put under way was not staged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let visible: Vec<String> = shown(&workspace)
        .into_iter()
        .filter(|name| !name.starts_with(".sandboxd-tar-in-"))
        .collect();
    assert_eq!(visible, before, "nothing of it in sight");
    // Abandoned: its staging goes at the idle sweep (a minute).
    let deadline = Instant::now() + Duration::from_secs(150);
    while staging(&workspace) > 0 {
        assert!(Instant::now() < deadline, "an abandoned put was kept");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(shown(&workspace), before);
}
