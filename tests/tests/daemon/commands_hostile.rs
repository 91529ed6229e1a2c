//! Hostile `exec` frames: mutated on the wire, none takes the daemon down,
//! leaves a command unsupervised, or disturbs another sandbox.

use std::time::Duration;

use sandboxd_client::{ExecRequest, ProbeState, Scope};
use sandboxd_protocol::service::SandboxdRequest;
use sandboxd_tests::{read_response, request_frame, Options, TestDaemon};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

/// xorshift64*: the same cases on every run.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_exec_frames_change_nothing_but_what_they_validly_ask() {
    let daemon = TestDaemon::start(Options::default());
    let runner = sandboxd_tests::start_session(&daemon, "fuzzed").await;
    let bystander = sandboxd_tests::start_session(&daemon, "bystander").await;
    let frame = request_frame(
        1,
        10,
        SandboxdRequest::Exec {
            scope: Scope::Session,
            id: "fuzzed".to_string(),
            request: ExecRequest {
                argv: vec!["/bin/true".into()],
                env: vec![("A".into(), "b".into())],
                workdir: Some(".".into()),
                tag: Some("t".into()),
                timeout_ms: Some(5_000),
                ..ExecRequest::default()
            },
        },
    );
    let mut cases = Cases(0x5eed_1234_abcd_0001);
    for case in 0..400 {
        let mut mutated = frame.clone();
        // Leave the 4-byte length alone half of the time, so most frames
        // are read whole and reach the decoder.
        let from = if case % 2 == 0 { 4 } else { 0 };
        for _ in 0..1 + cases.next() % 4 {
            let at = from + (cases.next() as usize) % (mutated.len() - from);
            mutated[at] = cases.next() as u8;
        }
        let mut stream = UnixStream::connect(daemon.socket()).await.unwrap();
        let _ = stream.write_all(&mutated).await;
        // Nothing more comes: a frame whose length now asks for more is
        // cut short (the daemon sees the end, not a slow peer).
        let _ = stream.shutdown().await;
        // An answer, or the connection closed: either way, never a hang.
        let _ = tokio::time::timeout(Duration::from_secs(10), read_response(&mut stream))
            .await
            .unwrap_or_else(|_| panic!("case {case}: no answer and no close within 10 s"));
    }
    let client = daemon.client().await;
    for (id, pid) in [("fuzzed", runner), ("bystander", bystander)] {
        assert_eq!(
            client.probe(Scope::Session, id).await.unwrap(),
            ProbeState::Running
        );
        assert_eq!(
            client.describe(Scope::Session, id).await.unwrap().pid,
            Some(pid)
        );
    }
    // Whatever started was a valid request, and is supervised to its end.
    for command in client.commands(Scope::Session, "fuzzed").await.unwrap() {
        assert!(!command.argv.is_empty() && !command.argv[0].is_empty());
        let info = client
            .command_wait(
                Scope::Session,
                "fuzzed",
                &sandboxd_client::CommandRef::Id(command.command_id.clone()),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert!(info.proof.is_some(), "{info:?}");
    }
    assert!(client
        .commands(Scope::Session, "bystander")
        .await
        .unwrap()
        .is_empty());
}
