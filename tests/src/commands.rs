//! Commands in a sandbox as the end-to-end tests start and read them, on
//! every tier: a request from an argv or a shell line, a stream read to
//! its end, a proof waited for.

use std::time::Duration;

use sandboxd_client::{CommandProof, CommandRef, ExecRequest, OutputStream, SandboxdClient, Scope};

/// An `exec` request of `argv`, everything else as the daemon defaults it.
pub fn request(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|arg| arg.to_string()).collect(),
        ..ExecRequest::default()
    }
}

/// An `exec` request of `sh -c script`.
pub fn shell(script: &str) -> ExecRequest {
    request(&["sh", "-c", script])
}

/// Everything `stream` of a session's command holds, read to its end
/// (each call waiting up to `wait`), and the proof.
pub async fn read_all(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    stream: OutputStream,
    wait: Duration,
) -> (Vec<u8>, CommandProof) {
    let mut data = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = client
            .command_output(Scope::Session, id, command, stream, offset, 1 << 20, wait)
            .await
            .expect("command_output");
        data.extend_from_slice(&chunk.data);
        offset = chunk.next;
        if let Some(proof) = chunk.proof {
            return (data, proof);
        }
    }
}

/// Reads a session's command's stdout from `offset` until it holds
/// `wanted` (each call waiting up to `wait`): the text read from `offset`
/// on, and the offset after it.
pub async fn read_text_until(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    offset: u64,
    wanted: &str,
    wait: Duration,
) -> (String, u64) {
    let (mut data, mut next) = (Vec::new(), offset);
    while !String::from_utf8_lossy(&data).contains(wanted) {
        let chunk = client
            .command_output(
                Scope::Session,
                id,
                command,
                OutputStream::Stdout,
                next,
                1 << 20,
                wait,
            )
            .await
            .expect("command_output");
        assert!(
            !chunk.data.is_empty() || chunk.proof.is_none(),
            "the command ended without writing {wanted:?}: {:?}",
            String::from_utf8_lossy(&data)
        );
        assert!(!chunk.data.is_empty(), "nothing within {wait:?}");
        data.extend_from_slice(&chunk.data);
        next = chunk.next;
    }
    (String::from_utf8_lossy(&data).into_owned(), next)
}

/// A session's command's proof, once it has ended (within `wait`).
pub async fn proof_of(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    wait: Duration,
) -> CommandProof {
    let info = client
        .command_wait(Scope::Session, id, command, wait)
        .await
        .expect("command_wait");
    info.proof.expect("the command ended within the wait")
}

/// Runs `script` through `sh -c` in session `id`'s sandbox and asserts it
/// exited 0 within `wait`.
pub async fn run_ok(client: &SandboxdClient, id: &str, script: &str, wait: Duration) {
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .expect("exec");
    let command = CommandRef::Id(started.command_id);
    let proof = proof_of(client, id, &command, wait).await;
    assert_eq!(proof.exit_code, Some(0), "{script}: {proof:?}");
}
