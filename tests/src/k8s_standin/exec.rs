//! Stand-in API server: `pods/{name}/exec`, with a STAND-IN FOR THE
//! KUBELET. There is no kubelet, no container runtime and no container
//! here: the requested argv runs as a local process of the test, with the
//! test's own uid and environment — never in the pod it names. Its
//! filesystem is fenced ([super::kubelet]): the host's read-only, the pod's
//! workspace (a directory of the test) at `/workspace`, where it starts, so
//! whatever it writes (a `tar` of the file calls too) lands in the test's
//! directory.
//! What this proves is the daemon's side of the streaming protocol as the
//! API server and kubelet speak it: the WebSocket upgrade with the
//! `v5.channel.k8s.io` (or `v4`) subprotocol, stdout and stderr apart on
//! channels 1 and 2, stdin on channel 0 and its close (v5's channel 255),
//! the final `Status` on channel 3 (`Success`, or `NonZeroExitCode` with
//! the code, 128 + N for a signal N, as a runtime reports it), and a pod
//! deleted under a command ending it (its process group is killed, as a
//! container's processes die with its init). It says nothing of what a
//! real container gives a command (its namespaces, limits, image).
//!
//! A terminal (`tty=true`) is a real pseudo-terminal ([super::terminal]),
//! sized by the messages on channel 4. Refused as the API server and a
//! kubelet refuse: a pod that is not there (404), one on no node, a
//! container it does not have or that is not running (400).

use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::http::Reply;
use super::kubelet::Fence;
use super::status::{self, Failure};
use super::store::{Store, PODS};
use super::terminal::Terminal;
use super::websocket::{self, BINARY, CLOSE};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE_CHANNEL: u8 = 255;

/// What the exec asks for, from its query.
pub struct Asked {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// What runs: as asked, with `<dir>/<pod>` as its workspace, where `dir`
/// is the directory the test gave (`StandIn::run_execs_in`).
struct Command {
    asked: Asked,
    dir: std::path::PathBuf,
    pod: String,
}

/// A command the stand-in runs for an exec: killed when its pod is deleted.
pub struct Running {
    pub namespace: String,
    pub pod: String,
    pub group: i32,
}

/// Checks the exec against the pod and upgrades the connection; the
/// command runs in a task of its own once the client has switched.
pub fn serve(
    shared: Arc<Mutex<Store>>,
    store: &Store,
    namespace: &str,
    name: &str,
    asked: Asked,
    request: &mut Request<Incoming>,
) -> Result<Response<Reply>, Failure> {
    runs(
        &store.get(PODS, namespace, name)?,
        asked.container.as_deref(),
        name,
    )?;
    let Some(dir) = store.exec_dir.clone() else {
        return Err(status::bad_request(
            "the stand-in runs execs only once a test gave it a directory (StandIn::run_execs_in)"
                .into(),
        ));
    };
    if asked.command.is_empty() {
        return Err(status::bad_request(
            "you must specify at least 1 command".into(),
        ));
    }
    let (protocol, key) = handshake(request)?;
    let upgrade = hyper::upgrade::on(request);
    let (namespace, pod) = (namespace.to_string(), name.to_string());
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            let (reader, writer) = tokio::io::split(TokioIo::new(upgraded));
            let command = Command {
                asked,
                dir,
                pod: pod.clone(),
            };
            run(shared, namespace, pod, command, reader, writer).await;
        }
    });
    Ok(Response::builder()
        .status(101)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", websocket::accept_key(&key))
        .header("sec-websocket-protocol", protocol)
        .body(
            Empty::<Bytes>::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("a valid response"))
}

/// Refused unless `pod` is on a node (the API server's check: it has no
/// kubelet to send the exec to otherwise, whatever the status says) and
/// its `container` (its first, when unnamed) runs (the kubelet's).
fn runs(pod: &Value, container: Option<&str>, name: &str) -> Result<(), Failure> {
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(status::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let first = pod["spec"]["containers"][0]["name"].as_str();
    let container = container.or(first).unwrap_or_default();
    let running = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|status| status["name"] == container && status["state"]["running"].is_object());
    if running {
        return Ok(());
    }
    Err(status::bad_request(format!(
        "container {container} is not valid for pod {name}, or is not running"
    )))
}

/// The subprotocol chosen (v5 over v4) and the client's key, from a
/// WebSocket upgrade request.
fn handshake(request: &Request<Incoming>) -> Result<(&'static str, String), Failure> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let offered = header("sec-websocket-protocol");
    let protocol = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
        .into_iter()
        .find(|protocol| offered.split(',').any(|offer| offer.trim() == *protocol))
        .ok_or_else(|| {
            status::bad_request(format!("no supported streaming protocol in {offered:?}"))
        })?;
    let key = header("sec-websocket-key");
    if key.is_empty() || !header("upgrade").eq_ignore_ascii_case("websocket") {
        return Err(status::bad_request(
            "pods/exec is served as a WebSocket only".into(),
        ));
    }
    Ok((protocol, key))
}

type Writer<W> = Arc<tokio::sync::Mutex<W>>;

async fn send<W: AsyncWrite + Unpin>(writer: &Writer<W>, channel: u8, data: &[u8]) -> bool {
    let mut message = Vec::with_capacity(data.len() + 1);
    message.push(channel);
    message.extend_from_slice(data);
    websocket::write_frame(&mut *writer.lock().await, BINARY, &message)
        .await
        .is_ok()
}

/// Runs the command as a local process, bridged to the WebSocket's channels.
async fn run<R, W>(
    shared: Arc<Mutex<Store>>,
    namespace: String,
    pod: String,
    command: Command,
    mut reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let writer = Arc::new(tokio::sync::Mutex::new(writer));
    let (mut child, streams) = match spawn(&command) {
        Ok(spawned) => spawned,
        Err(error) => {
            let message = format!(
                "the stand-in could not start {:?} as a local process: {error}",
                command.asked.command[0]
            );
            let status = json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"});
            finish(&writer, &status).await;
            return;
        }
    };
    let group = child.id().map_or(0, |pid| pid as i32);
    lock(&shared).execs.push(Running {
        namespace: namespace.clone(),
        pod: pod.clone(),
        group,
    });
    let Streams {
        stdout,
        stderr,
        mut input,
    } = streams;
    let stdout = tokio::spawn(pump(stdout, writer.clone(), STDOUT));
    let stderr = tokio::spawn(pump(stderr, writer.clone(), STDERR));
    let feed = {
        let writer = writer.clone();
        tokio::spawn(async move {
            while let Some(message) = websocket::read_message(&mut reader, &writer).await {
                if message.opcode == CLOSE {
                    break;
                }
                input.take(&message.payload).await;
            }
        })
    };
    let waited = child.wait().await;
    let _ = stdout.await;
    let _ = stderr.await;
    lock(&shared).execs.retain(|running| running.group != group);
    finish(&writer, &exit_status(waited)).await;
    feed.abort();
}

type Output = Box<dyn AsyncRead + Unpin + Send>;

/// A command's streams, as its exec asked for them.
struct Streams {
    stdout: Option<Output>,
    stderr: Option<Output>,
    input: Input,
}

/// Where the client's messages go.
struct Input {
    stdin: Option<Box<dyn AsyncWrite + Unpin + Send>>,
    terminal: Option<Terminal>,
}

/// Starts the command, leading a process group of its own (a session,
/// with a terminal), so a deleted pod's commands and what they forked are
/// killed together, with pipes or a terminal as asked.
fn spawn(run: &Command) -> std::io::Result<(tokio::process::Child, Streams)> {
    let asked = &run.asked;
    let mut command = tokio::process::Command::new(&asked.command[0]);
    command.args(&asked.command[1..]).kill_on_drop(false);
    let fence = Fence::prepare(&run.dir, &run.pod)?;
    // SAFETY: `enter` makes system calls only, on strings made before the
    // fork; it changes the child's own mount namespace and root.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command.as_std_mut(), move || fence.enter());
    }
    if asked.tty {
        let (terminal, follower) = Terminal::open(24, 80)?;
        Terminal::attach(&mut command, follower)?;
        let child = command.spawn()?;
        let streams = Streams {
            stdout: Some(Box::new(terminal.reader()?)),
            stderr: None,
            input: Input {
                stdin: Some(Box::new(terminal.writer()?)),
                terminal: Some(terminal),
            },
        };
        return Ok((child, streams));
    }
    let piped = |wanted: bool| {
        if wanted {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        }
    };
    let mut child = command
        .stdin(piped(asked.stdin))
        .stdout(piped(asked.stdout))
        .stderr(piped(asked.stderr))
        .process_group(0)
        .spawn()?;
    let streams = Streams {
        stdout: child.stdout.take().map(|out| Box::new(out) as Output),
        stderr: child.stderr.take().map(|err| Box::new(err) as Output),
        input: Input {
            stdin: child
                .stdin
                .take()
                .map(|stdin| Box::new(stdin) as Box<dyn AsyncWrite + Unpin + Send>),
            terminal: None,
        },
    };
    Ok((child, streams))
}

impl Input {
    /// One client message: stdin bytes, stdin's close (v5), or a resize.
    async fn take(&mut self, payload: &[u8]) {
        match payload {
            [STDIN, data @ ..] => {
                if let Some(pipe) = self.stdin.as_mut() {
                    let written = async {
                        pipe.write_all(data).await?;
                        pipe.flush().await
                    };
                    if written.await.is_err() {
                        self.stdin = None;
                    }
                }
            }
            [CLOSE_CHANNEL, STDIN] if self.terminal.is_none() => self.stdin = None,
            [RESIZE, size @ ..] => {
                let size: Value = serde_json::from_slice(size).unwrap_or_default();
                let dimension =
                    |name: &str| size[name].as_u64().and_then(|n| u16::try_from(n).ok());
                if let (Some(terminal), Some(cols), Some(rows)) =
                    (&self.terminal, dimension("Width"), dimension("Height"))
                {
                    terminal.resize(rows, cols);
                }
            }
            _ => {}
        }
    }
}

async fn pump<S, W>(stream: Option<S>, writer: Writer<W>, channel: u8)
where
    S: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Some(mut stream) = stream else {
        return;
    };
    let mut buffer = vec![0u8; 32 * 1024];
    while let Ok(count) = stream.read(&mut buffer).await {
        if count == 0 || !send(&writer, channel, &buffer[..count]).await {
            return;
        }
    }
}

/// The status a kubelet sends: `Success`, or the exit code (128 + N for a
/// signal N, as the runtime reports it).
fn exit_status(waited: std::io::Result<std::process::ExitStatus>) -> Value {
    use std::os::unix::process::ExitStatusExt;
    let code = match waited {
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|signal| 128 + signal))
            .unwrap_or(-1),
        Err(_) => -1,
    };
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

async fn finish<W: AsyncWrite + Unpin>(writer: &Writer<W>, status: &Value) {
    send(writer, STATUS, status.to_string().as_bytes()).await;
    let _ = websocket::write_frame(&mut *writer.lock().await, CLOSE, &[0x03, 0xE8]).await;
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Kills the commands run for `pod` (its process groups): the pod is gone.
pub fn end_pod(execs: &[Running], namespace: &str, pod: &str) {
    execs
        .iter()
        .filter(|running| running.namespace == namespace && running.pod == pod)
        .for_each(kill);
}

/// Kills every command still running (the stand-in stops).
pub fn end_all(execs: &[Running]) {
    execs.iter().for_each(kill);
}

fn kill(running: &Running) {
    if running.group > 0 {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(running.group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
