//! The tier's commands as the daemon follows them, and the daemon's stop.
//!
//! A command on this tier outlives the daemon (it goes on in its pod), so
//! a stopping daemon does not wait for it to end: it ends following it.
//! Its end says `daemon-stopped` at once and its output streams end at
//! once (a stream of the exec does not end by itself while the command
//! runs), so the store settles it before the daemon exits; the driver's
//! shutdown waits for that, within a bound, by counting the commands whose
//! output is still being read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::started_command::OutputReader;

#[derive(Clone)]
pub struct Follows {
    stop: CancellationToken,
    /// How many commands' output is still being read.
    live: Arc<watch::Sender<usize>>,
}

impl Follows {
    pub fn new() -> Follows {
        Follows {
            stop: CancellationToken::new(),
            live: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Cancelled once the daemon stops.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// One command followed, until every reader given `live` is dropped.
    pub fn follow(&self) -> Arc<Followed> {
        self.live.send_modify(|count| *count += 1);
        Arc::new(Followed(self.live.clone()))
    }

    /// Ends every follow, and waits (at most `within`) until the store has
    /// read every followed command's output to its end.
    pub async fn stop(&self, within: Duration) {
        self.stop.cancel();
        let mut live = self.live.subscribe();
        let _ = tokio::time::timeout(within, live.wait_for(|count| *count == 0)).await;
    }
}

/// One followed command; counted until dropped.
pub struct Followed(Arc<watch::Sender<usize>>);

impl Drop for Followed {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count = count.saturating_sub(1));
    }
}

/// A command's output stream, ended early when the daemon stops.
pub struct UntilStopped {
    inner: OutputReader,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
    _followed: Arc<Followed>,
}

impl UntilStopped {
    pub fn wrap(inner: OutputReader, follows: &Follows, followed: Arc<Followed>) -> OutputReader {
        Box::pin(UntilStopped {
            inner,
            stopped: Box::pin(follows.stop.clone().cancelled_owned()),
            _followed: followed,
        })
    }
}

impl AsyncRead for UntilStopped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.stopped.as_mut().poll(cx).is_ready() {
            // The end of what the daemon reads; the command goes on.
            return Poll::Ready(Ok(()));
        }
        self.inner.as_mut().poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_stop_ends_a_stream_that_would_never_end_and_is_waited_for() {
        let follows = Follows::new();
        let (never, _writer) = tokio::io::simplex(64);
        let mut reader = UntilStopped::wrap(Box::pin(never), &follows, follows.follow());
        let reading = tokio::spawn(async move {
            let mut data = Vec::new();
            reader.read_to_end(&mut data).await.map(|_| data)
        });
        follows.stop(Duration::from_secs(10)).await;
        assert_eq!(*follows.live.borrow(), 0, "the reader was dropped");
        assert!(reading.await.unwrap().unwrap().is_empty());
    }
}
