//! A connection's task polled once more, in the same turn, when it wakes
//! itself while being polled, rather than handed back to the scheduler.
//!
//! Why: tarpc's server channel keeps each call's deadline in a tokio-util
//! `DelayQueue`, which wakes the task that last polled it whenever an
//! insert sets an earlier deadline than the one it holds — and with no
//! call in flight it holds none, so every call of a connection that waits
//! for each answer (a control plane's usual way) wakes its own connection
//! task from inside that task's poll. Tokio takes a task woken during its
//! own poll for one that yielded: it goes to the back of the run queue and
//! a parked worker is woken to take it (a futex wake, about 10 µs, and a
//! second CPU taken) on the way of every call. Here such a wake is only
//! noted, and the connection polled once more at once; a second one in a
//! row goes to the scheduler as before, so a future that yields on purpose
//! (for fairness, or out of its cooperative budget) still yields.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// How many times a poll that woke itself is repeated before the wake
/// goes to the scheduler.
const REPOLLS: usize = 1;

/// `future`, polled again in place when it wakes itself.
pub struct RepollOnSelfWake<F> {
    future: Pin<Box<F>>,
    waker: Arc<ProxyWaker>,
}

impl<F: Future> RepollOnSelfWake<F> {
    pub fn new(future: F) -> Self {
        RepollOnSelfWake {
            future: Box::pin(future),
            waker: Arc::new(ProxyWaker::default()),
        }
    }
}

/// The waker the inner future sees: outside its poll it wakes the task;
/// during it, it only marks that a wake came.
#[derive(Default)]
struct ProxyWaker {
    task: AtomicWaker,
    polling: AtomicBool,
    woken_while_polling: AtomicBool,
}

impl Wake for ProxyWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked first, and sequentially consistent with the poll's own
        // store and look: a wake at the poll's end is then repolled for or
        // passed on (or both), never lost.
        self.woken_while_polling.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl<F: Future> Future for RepollOnSelfWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.waker.task.register(cx.waker());
        let waker = Waker::from(this.waker.clone());
        let mut inner = Context::from_waker(&waker);
        for _ in 0..=REPOLLS {
            this.waker
                .woken_while_polling
                .store(false, Ordering::SeqCst);
            this.waker.polling.store(true, Ordering::SeqCst);
            let polled = this.future.as_mut().poll(&mut inner);
            this.waker.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.waker.woken_while_polling.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself in its first `self_wakes` polls, then is ready.
    struct WakesItself {
        self_wakes: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for WakesItself {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.self_wakes == 0 {
                return Poll::Ready(());
            }
            self.self_wakes -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes the task gets.
    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One poll of a future that wakes itself `self_wakes` times: whether
    /// it finished, how often it was polled and how often the task was woken.
    fn first_poll(self_wakes: usize) -> (bool, usize, usize) {
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = RepollOnSelfWake::new(WakesItself {
            self_wakes,
            polls: polls.clone(),
        });
        let ready = Pin::new(&mut future)
            .poll(&mut Context::from_waker(&waker))
            .is_ready();
        let polled = polls.load(Ordering::Relaxed);
        (ready, polled, counter.0.load(Ordering::Relaxed))
    }

    #[test]
    fn one_self_wake_is_repolled_in_place_and_a_second_goes_to_the_task() {
        assert_eq!(first_poll(1), (true, 2, 0));
        assert_eq!(
            first_poll(2),
            (false, 2, 1),
            "a future that keeps waking itself yields to the scheduler"
        );
    }

    #[test]
    fn a_wake_from_outside_the_poll_wakes_the_task() {
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let (sender, receiver) = futures::channel::oneshot::channel::<()>();
        let mut waiting = RepollOnSelfWake::new(receiver);
        assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
        sender.send(()).unwrap();
        assert_eq!(counter.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut waiting).poll(&mut cx).is_ready());
    }
}
