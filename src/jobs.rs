//! Tool-call execution: a small bounded worker pool, per-call cancellation handles, and
//! one-shot completions. A worker only *starts* work; anything that waits (a child
//! process, an upstream reply) hands its completion to the thread that owns the wait, so
//! a slow tool never holds a worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rustix::process::{Pid, Signal};

use crate::mcp::{ToolOutput, SERVER_ERROR};

/// Cancellation for one tool call: set by `notifications/cancelled`, socket loss, grant
/// end or shutdown. Process groups registered here are killed on cancel, and a group
/// registered after the cancel is killed at once.
#[derive(Debug, Default)]
pub struct JobCtl {
    cancelled: AtomicBool,
    groups: Mutex<Vec<Pid>>,
}

impl JobCtl {
    pub fn new() -> Arc<Self> {
        Arc::new(JobCtl::default())
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Mark cancelled and SIGKILL every registered process group.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        for pgid in groups.iter() {
            let _ = rustix::process::kill_process_group(*pgid, Signal::KILL);
        }
    }

    /// Tie a process group to this call. Returns false (after killing the group) if the
    /// call was already cancelled, closing the race between spawn and cancel.
    pub fn register_group(&self, pgid: Pid) -> bool {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.push(pgid);
        if self.is_cancelled() {
            let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
            return false;
        }
        true
    }

    /// Forget a group whose leader has been reaped, so a recycled pgid is never signalled.
    pub fn unregister_group(&self, pgid: Pid) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.retain(|g| *g != pgid);
    }
}

type Deliver = Box<dyn FnOnce(ToolOutput) + Send>;

/// Delivers one tool call's output exactly once. Dropped without `complete` (a panic in a
/// tool, a lost handle) it delivers an internal error, so no caller waits forever.
pub struct Completion {
    deliver: Option<Deliver>,
}

impl Completion {
    pub fn new(deliver: impl FnOnce(ToolOutput) + Send + 'static) -> Self {
        Completion {
            deliver: Some(Box::new(deliver)),
        }
    }

    pub fn complete(mut self, output: ToolOutput) {
        if let Some(deliver) = self.deliver.take() {
            deliver(output);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(deliver) = self.deliver.take() {
            deliver(ToolOutput::RpcError {
                code: SERVER_ERROR,
                message: "internal error: the tool ended without a result".into(),
            });
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("pending", &self.deliver.is_some())
            .finish()
    }
}

enum Task {
    Plain(Box<dyn FnOnce() + Send>),
    /// A tool call: when the queue is full, `done` is answered with "busy" instead.
    Call(Box<dyn FnOnce(Completion) + Send>, Completion),
}

impl Task {
    fn run(self) {
        match self {
            Task::Plain(f) => f(),
            Task::Call(f, done) => f(done),
        }
    }
}

/// The pool refused a task because its queue is full.
#[derive(Debug, PartialEq, Eq)]
pub struct PoolBusy {
    pub queued: usize,
}

impl std::fmt::Display for PoolBusy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server busy: {} tool calls already queued; retry shortly",
            self.queued
        )
    }
}

/// A fixed set of worker threads fed by a bounded queue. Dropping the pool closes the
/// queue and joins the workers after they finish what they started.
#[derive(Debug)]
pub struct Pool {
    tx: Option<Sender<Task>>,
    workers: Vec<JoinHandle<()>>,
    capacity: usize,
}

impl Pool {
    pub fn new(workers: usize, queue_capacity: usize) -> Self {
        let (tx, rx): (Sender<Task>, Receiver<Task>) = crossbeam_channel::bounded(queue_capacity);
        let workers = (0..workers.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || {
                        for task in rx.iter() {
                            // A panicking tool must not take the worker down with it; its
                            // Completion's Drop reports the failure.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                task.run()
                            }));
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        Pool {
            tx: Some(tx),
            workers,
            capacity: queue_capacity,
        }
    }

    /// Queue a task, or refuse at once when the queue is full (never blocks the caller).
    pub fn submit(&self, task: impl FnOnce() + Send + 'static) -> Result<(), PoolBusy> {
        self.try_send(Task::Plain(Box::new(task)))
            .map_err(|_| self.busy())
    }

    /// Queue a tool call. When the queue is full, `done` is completed at once with a
    /// JSON-RPC "busy" error that says so, and the call never runs.
    pub fn submit_call(
        &self,
        run: impl FnOnce(Completion) + Send + 'static,
        done: Completion,
    ) -> Result<(), PoolBusy> {
        match self.try_send(Task::Call(Box::new(run), done)) {
            Ok(()) => Ok(()),
            Err(Task::Call(_, done)) => {
                let busy = self.busy();
                done.complete(ToolOutput::RpcError {
                    code: SERVER_ERROR,
                    message: busy.to_string(),
                });
                Err(busy)
            }
            Err(Task::Plain(_)) => Err(self.busy()),
        }
    }

    fn busy(&self) -> PoolBusy {
        PoolBusy {
            queued: self.capacity,
        }
    }

    fn try_send(&self, task: Task) -> Result<(), Task> {
        let tx = self.tx.as_ref().expect("pool is running");
        tx.try_send(task).map_err(|e| match e {
            TrySendError::Full(t) | TrySendError::Disconnected(t) => t,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.tx.take();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn completion_dropped_delivers_internal_error() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        drop(Completion::new(move |out| tx.send(out).unwrap()));
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ToolOutput::RpcError { code, .. } => assert_eq!(code, SERVER_ERROR),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completion_delivers_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        Completion::new(move |out| tx.send(out).unwrap()).complete(ToolOutput::text("hi"));
        assert_eq!(rx.recv().unwrap(), ToolOutput::text("hi"));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    }

    #[test]
    fn full_pool_refuses_instead_of_blocking() {
        let pool = Pool::new(1, 1);
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
        pool.submit(move || {
            started_tx.send(()).unwrap();
            let _ = gate_rx.recv();
        })
        .unwrap();
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        pool.submit(|| {}).unwrap(); // fills the one queue slot
        let err = pool.submit(|| {}).unwrap_err();
        assert_eq!(err, PoolBusy { queued: 1 });
        assert!(err.to_string().contains("busy"));
        drop(gate_tx);
    }

    #[test]
    fn a_refused_call_is_answered_busy_not_internal_error() {
        let pool = Pool::new(1, 1);
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
        pool.submit(move || {
            started_tx.send(()).unwrap();
            let _ = gate_rx.recv();
        })
        .unwrap();
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        pool.submit(|| {}).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let done = Completion::new(move |out| tx.send(out).unwrap());
        assert!(pool
            .submit_call(|d| d.complete(ToolOutput::text("ran")), done)
            .is_err());
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ToolOutput::RpcError { code, message } => {
                assert_eq!(code, SERVER_ERROR);
                assert!(message.contains("busy"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(rx.try_recv().is_err(), "exactly one answer");
        drop(gate_tx);
    }

    #[test]
    fn a_panicking_task_does_not_kill_the_worker() {
        let pool = Pool::new(1, 4);
        pool.submit(|| panic!("boom")).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        pool.submit(move || tx.send(42).unwrap()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 42);
    }

    #[test]
    fn cancel_kills_a_registered_group_and_late_registration() {
        let ctl = JobCtl::new();
        let mut child = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut child, 0);
        let mut child = child.arg("30").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        assert!(ctl.register_group(pid));
        ctl.cancel();
        let status = child.wait().unwrap();
        assert!(!status.success());
        let mut late = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut late, 0);
        let mut late = late.arg("30").spawn().unwrap();
        let pid = Pid::from_raw(late.id() as i32).unwrap();
        assert!(!ctl.register_group(pid));
        assert!(!late.wait().unwrap().success());
    }
}
