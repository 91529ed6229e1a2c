use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use sandboxd_protocol::egress::Posture;

use super::*;

#[test]
fn only_loopback_endpoints_are_carried() {
    for (endpoint, port) in [
        ("127.0.0.1:7234", Some(7234)),
        ("localhost:7233", Some(7233)),
        ("http://127.0.0.1:8080/api", Some(8080)),
        ("[::1]:9000", Some(9000)),
        ("grpc://user@localhost:50051", Some(50051)),
        ("127.0.0.2:80", None),
        ("backend.internal:7234", None),
        ("10.0.0.1:7234", None),
        ("127.0.0.1", None),
        ("", None),
    ] {
        assert_eq!(loopback_port(endpoint), port, "{endpoint}");
    }
}

/// What a thread inside `network` sees of each attempt.
struct Inside {
    endpoint: String,
    other_loopback_port: String,
    metadata: String,
    udp_elsewhere: String,
    dns: String,
}

fn errno_of(error: &io::Error) -> String {
    format!(
        "{:?}",
        nix::errno::Errno::from_raw(error.raw_os_error().unwrap_or(0))
    )
}

fn dial(address: &str) -> String {
    match TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(5)) {
        Ok(mut stream) => {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let _ = stream.write_all(b"ping");
            let mut answer = [0; 4];
            match stream.read_exact(&mut answer) {
                Ok(()) => String::from_utf8_lossy(&answer).into_owned(),
                Err(error) => errno_of(&error),
            }
        }
        Err(error) => errno_of(&error),
    }
}

fn look_around(endpoint_port: u16, closed_port: u16) -> Inside {
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    let udp_elsewhere = match udp.send_to(b"x", "192.0.2.1:9") {
        Ok(_) => "sent".to_string(),
        Err(error) => errno_of(&error),
    };
    // A query to a documentation address: it never leaves the namespace,
    // the relay sends it to the configured resolver.
    udp.connect("192.0.2.53:53").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    udp.send(b"query").unwrap();
    let mut answer = [0; 64];
    let dns = match udp.recv(&mut answer) {
        Ok(length) => String::from_utf8_lossy(&answer[..length]).into_owned(),
        Err(error) => errno_of(&error),
    };
    Inside {
        endpoint: dial(&format!("127.0.0.1:{endpoint_port}")),
        other_loopback_port: dial(&format!("127.0.0.1:{closed_port}")),
        metadata: dial("169.254.169.254:80"),
        udp_elsewhere,
        dns,
    }
}

/// Answers every TCP connection's 4 bytes with "pong", on a thread.
fn serve_pong(listener: TcpListener) {
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut asked = [0; 4];
            if stream.read_exact(&mut asked).is_ok() {
                let _ = stream.write_all(b"pong");
            }
        }
    });
}

/// Answers every datagram with "answer", on a thread.
fn serve_dns(socket: UdpSocket) {
    std::thread::spawn(move || {
        let mut query = [0; 512];
        while let Ok((_, asker)) = socket.recv_from(&mut query) {
            let _ = socket.send_to(b"answer", asker);
        }
    });
}

/// The private network under `relaxed` with `config` and `endpoint`;
/// `None` (said) when not root: only root makes network namespaces, and as
/// root a failure is one.
async fn probed(config: NetworkConfig, endpoint: Option<String>) -> Option<PrivateNetwork> {
    let egress = EgressSetting::Enforced(Posture::Relaxed);
    let runtime = Handle::current();
    let probed = tokio::task::spawn_blocking(move || {
        let endpoints: Vec<&str> = endpoint.iter().map(String::as_str).collect();
        PrivateNetwork::probe(&egress, &config, &endpoints, runtime, None)
    })
    .await
    .unwrap();
    match probed {
        Ok(network) => Some(network),
        Err(why) if !nix::unistd::geteuid().is_root() => {
            eprintln!("skipped: {why}");
            None
        }
        Err(why) => panic!("{why}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_reaches_only_its_endpoint_and_its_resolver_through_the_relay() {
    let endpoint = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint_port = endpoint.local_addr().unwrap().port();
    serve_pong(endpoint);
    let closed_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = NetworkConfig {
        resolvers: vec![resolver.local_addr().unwrap()],
        ..NetworkConfig::default()
    };
    serve_dns(resolver);
    let Some(network) = probed(config, Some(format!("127.0.0.1:{endpoint_port}"))).await else {
        return;
    };
    let ready = tokio::task::spawn_blocking(move || network.start().ready().unwrap())
        .await
        .unwrap();
    let (ready, seen) = tokio::task::spawn_blocking(move || {
        let seen = {
            let _inside = ready.enter().unwrap();
            look_around(endpoint_port, closed_port)
        };
        (ready, seen)
    })
    .await
    .unwrap();
    assert_eq!(seen.endpoint, "pong", "the endpoint on the host's loopback");
    assert_eq!(
        seen.other_loopback_port, "ECONNREFUSED",
        "another loopback port"
    );
    assert_eq!(seen.metadata, "ECONNREFUSED", "the metadata address");
    assert_eq!(seen.udp_elsewhere, "EPERM", "UDP other than DNS");
    assert_eq!(seen.dns, "answer", "a DNS query through the relay");
    drop(ready.into_relay());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_takes_a_stocked_namespace_and_the_stock_fills_again() {
    let Some(network) = probed(NetworkConfig::default(), None).await else {
        return;
    };
    let full = |network: &PrivateNetwork| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while network.stock.ready() < stock::STOCK {
            assert!(
                std::time::Instant::now() < deadline,
                "the stock never filled"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let network = tokio::task::spawn_blocking(move || {
        full(&network);
        let taken = network.start();
        assert!(matches!(taken.making, Making::Stocked(_)));
        drop(taken.ready().unwrap());
        full(&network);
        network
    })
    .await
    .unwrap();
    drop(network);
}

/// A spawner thread (a file system context of its own, see `apart`) that
/// starts a namespace may join a mount namespace at once: the stock's
/// refill thread it set off shares nothing with it by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawner_thread_joins_a_mount_namespace_right_after_a_start() {
    let Some(network) = probed(NetworkConfig::default(), None).await else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            // SAFETY: unshare with a plain flag; it affects this thread only.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_FS) }, 0);
            let own = File::open("/proc/thread-self/ns/mnt").unwrap();
            for _ in 0..20 {
                let starting = network.start();
                // SAFETY: setns with a descriptor this thread holds open.
                let joined = unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNS) };
                let error = io::Error::last_os_error();
                drop(starting.ready().unwrap());
                assert_eq!(joined, 0, "setns(CLONE_NEWNS) after a start: {error}");
            }
        })
        .join()
        .unwrap();
    })
    .await
    .unwrap();
}
