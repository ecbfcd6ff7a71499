//! Tool-call execution: a small bounded worker pool, per-call cancellation handles, and
//! one-shot completions. A worker only *starts* work; anything that waits (a child
//! process, an upstream reply) hands its completion to the thread that owns the wait, so
//! a slow tool never holds a worker.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rustix::process::{Pid, Signal};

use crate::wire::mcp::{ToolOutput, SERVER_ERROR};

/// Cancellation for one tool call: set by `notifications/cancelled`, socket loss, grant
/// end or shutdown. Process groups registered here are killed on cancel, and a group
/// registered after the cancel is killed at once; so are hooks (`on_cancel`) run.
#[derive(Default)]
pub struct CallCtl {
    cancelled: AtomicBool,
    groups: Mutex<Vec<Pid>>,
    /// The cgroups of the call's runs (§16): signalled and killed with the groups.
    cgroups: Mutex<Vec<Arc<crate::cgroup::RunGroup>>>,
    hooks: Mutex<Vec<CancelHook>>,
    /// Why the person who lent the box stopped the call (§22): its reply says this instead
    /// of whatever the killed tool produced.
    stopped: Mutex<Option<String>>,
    /// How a held call was decided (who, when, what), for the journal (§22).
    approval: Mutex<Option<serde_json::Value>>,
    /// The wheel epoch a call that drives an own display was admitted under (§23).
    wheel_epoch: std::sync::OnceLock<u64>,
}

/// Told once when a call is cancelled: for a wait that no process group stands for.
type CancelHook = Box<dyn FnOnce() + Send>;

impl std::fmt::Debug for CallCtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCtl")
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl CallCtl {
    pub fn new() -> Arc<Self> {
        Arc::new(CallCtl::default())
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Stamp the call with the wheel epoch it is admitted under (once; §23).
    pub fn admit_wheel(&self, epoch: u64) {
        let _ = self.wheel_epoch.set(epoch);
    }

    /// The wheel epoch the call was admitted under, if it drives an own display.
    pub fn wheel_epoch(&self) -> Option<u64> {
        self.wheel_epoch.get().copied()
    }

    /// Mark cancelled, SIGKILL every registered process group and run every hook.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.signal(Signal::KILL);
        let hooks = std::mem::take(&mut *self.hooks.lock().unwrap_or_else(|e| e.into_inner()));
        for hook in hooks {
            hook();
        }
    }

    /// Stop the call for the lender (`DELETE /calls/{id}`): the reply becomes a tool error
    /// saying `reason`, then everything the call runs is killed as by [`CallCtl::cancel`].
    pub fn stop(&self, reason: String) {
        self.mark_stopped(reason);
        self.cancel();
    }

    /// Only the reason of [`CallCtl::stop`]: for a held call, which is denied, not killed.
    pub fn mark_stopped(&self, reason: String) {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(reason);
    }

    /// Note how the call's approval was decided (the approvals hub, before it starts or
    /// refuses the call), for the journal.
    pub fn note_approval(&self, decision: serde_json::Value) {
        *self.approval.lock().unwrap_or_else(|e| e.into_inner()) = Some(decision);
    }

    /// How the call's approval was decided, if it was held for one.
    pub fn approval(&self) -> Option<serde_json::Value> {
        self.approval
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why the lender stopped the call, if they did.
    pub fn stop_reason(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Run `hook` when the call is cancelled (at once if it already is). Keep it short
    /// and non-blocking: it runs on the cancelling thread (a grant thread).
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        {
            let mut hooks = self.hooks.lock().unwrap_or_else(|e| e.into_inner());
            if !self.is_cancelled() {
                hooks.push(Box::new(hook));
                return;
            }
        }
        hook();
    }

    /// Send `signal` to every registered process group. Groups are unregistered before
    /// their leader is reaped, so a recycled pgid is never signalled.
    pub fn signal(&self, signal: Signal) {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        for pgid in groups.iter() {
            let _ = rustix::process::kill_process_group(*pgid, signal);
        }
        drop(groups);
        let cgroups: Vec<_> = self
            .cgroups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for group in cgroups {
            group.signal(signal);
        }
    }

    /// Tie a run's cgroup to this call: cancelling kills it whole. Killed at once if the
    /// call was already cancelled.
    pub fn register_cgroup(&self, group: Arc<crate::cgroup::RunGroup>) {
        let mut cgroups = self.cgroups.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cancelled() {
            group.kill();
        }
        cgroups.push(group);
    }

    /// Forget a run's cgroup (its run ended, or it moved to a job).
    pub fn unregister_cgroup(&self, group: &crate::cgroup::RunGroup) {
        let mut cgroups = self.cgroups.lock().unwrap_or_else(|e| e.into_inner());
        cgroups.retain(|g| !std::ptr::eq(Arc::as_ptr(g), group));
    }

    /// Whether a process group is registered (its leader not yet reaped).
    pub fn has_groups(&self) -> bool {
        !self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Wake `waker` when this call is cancelled (at once if it already is): a long-poll
    /// parked on the process watcher leaves it then.
    pub fn wake_on_cancel(&self, waker: Arc<crate::base::wake::Waker>) {
        self.on_cancel(move || waker.wake());
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

    /// Take a run (its process group and cgroup) out of this call's reach, unless the call is
    /// already cancelled: `false` then, and the run stays registered for the kill. Checked
    /// under the groups lock that [`CallCtl::signal`] takes, so a cancel either finds the run
    /// here and kills it, or comes after and cannot: never a run that was both handed on
    /// (an inline run becoming a job, whose reply says it continues) and killed.
    pub fn release(&self, pgid: Pid, cgroup: Option<&crate::cgroup::RunGroup>) -> bool {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cancelled() {
            return false;
        }
        groups.retain(|g| *g != pgid);
        if let Some(group) = cgroup {
            self.unregister_cgroup(group);
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
/// tool, a lost handle) it delivers a tool error saying so, so no caller waits forever.
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
            deliver(ToolOutput::tool_error(crate::faults::TOOL_PANIC_MESSAGE));
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

/// Up to `max_workers` worker threads fed by a bounded queue. A worker is started when a
/// task is queued and none is idle, so an idle daemon holds no worker threads (each costs
/// a stack and a malloc arena); once started, a worker stays for the pool's life. Dropping
/// the pool closes the queue and joins the workers after they finish what they started.
#[derive(Debug)]
pub struct Pool {
    tx: Option<Sender<Task>>,
    rx: Receiver<Task>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    max_workers: usize,
    /// Workers waiting on the queue right now.
    idle: Arc<AtomicUsize>,
    capacity: usize,
}

impl Pool {
    pub fn new(max_workers: usize, queue_capacity: usize) -> Self {
        let (tx, rx): (Sender<Task>, Receiver<Task>) = crossbeam_channel::bounded(queue_capacity);
        Pool {
            tx: Some(tx),
            rx,
            workers: Mutex::new(Vec::new()),
            max_workers: max_workers.max(1),
            idle: Arc::new(AtomicUsize::new(0)),
            capacity: queue_capacity,
        }
    }

    /// Worker threads started so far.
    pub fn workers(&self) -> usize {
        self.workers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// After a task is queued: start a worker unless the idle ones can take every queued
    /// task or all are started. Racing callers may start one worker more than needed,
    /// never more than the max.
    fn ensure_worker(&self) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if self.rx.len() <= self.idle.load(Ordering::SeqCst) || workers.len() >= self.max_workers {
            return;
        }
        let rx = self.rx.clone();
        let idle = Arc::clone(&self.idle);
        let spawned = std::thread::Builder::new()
            .name(format!("worker-{}", workers.len()))
            .spawn(move || loop {
                idle.fetch_add(1, Ordering::SeqCst);
                let task = rx.recv();
                idle.fetch_sub(1, Ordering::SeqCst);
                let Ok(task) = task else { return };
                // A panicking tool must not take the worker down with it; its
                // Completion's Drop reports the failure to the caller.
                if let Err(payload) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()))
                {
                    crate::faults::caught(
                        crate::faults::Site::Tool,
                        "a task on a pool worker",
                        payload.as_ref(),
                    );
                }
            });
        match spawned {
            Ok(handle) => workers.push(handle),
            // The task stays queued for the workers there are; with none, it waits for
            // the next submit to try again (and is answered at shutdown by its Drop).
            Err(e) => log::error!("cannot start a worker thread: {e}"),
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
        })?;
        self.ensure_worker();
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.tx.take();
        let workers = std::mem::take(self.workers.get_mut().unwrap_or_else(|e| e.into_inner()));
        for worker in workers {
            let _ = worker.join();
        }
        // Tasks queued when no worker could be started: their Completions answer now.
        while self.rx.try_recv().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn completion_dropped_delivers_a_tool_error() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        drop(Completion::new(move |out| tx.send(out).unwrap()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            ToolOutput::tool_error(crate::faults::TOOL_PANIC_MESSAGE)
        );
    }

    #[test]
    fn completion_delivers_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        Completion::new(move |out| tx.send(out).unwrap()).complete(ToolOutput::text("hi"));
        assert_eq!(rx.recv().unwrap(), ToolOutput::text("hi"));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    }

    /// A pool of one worker and one queue slot whose worker is running a task that holds
    /// it until the returned gate is dropped (or a message is sent on it).
    fn pool_with_its_one_worker_held() -> (Pool, Sender<()>) {
        let pool = Pool::new(1, 1);
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
        pool.submit(move || {
            started_tx.send(()).unwrap();
            let _ = gate_rx.recv();
        })
        .unwrap();
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        (pool, gate_tx)
    }

    #[test]
    fn full_pool_refuses_instead_of_blocking() {
        let (pool, gate_tx) = pool_with_its_one_worker_held();
        pool.submit(|| {}).unwrap(); // fills the one queue slot
        let err = pool.submit(|| {}).unwrap_err();
        assert_eq!(err, PoolBusy { queued: 1 });
        assert!(err.to_string().contains("busy"));
        drop(gate_tx);
    }

    #[test]
    fn a_refused_call_is_answered_busy_not_internal_error() {
        let (pool, gate_tx) = pool_with_its_one_worker_held();
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
    fn workers_start_on_demand_up_to_the_max() {
        let pool = Pool::new(3, 16);
        assert_eq!(pool.workers(), 0, "an idle pool holds no threads");
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started_rx) = crossbeam_channel::unbounded::<()>();
        for _ in 0..5 {
            let gate = gate_rx.clone();
            let started = started_tx.clone();
            pool.submit(move || {
                started.send(()).unwrap();
                let _ = gate.recv();
            })
            .unwrap();
        }
        for _ in 0..3 {
            started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!(
            pool.workers(),
            3,
            "five blocked tasks start the three allowed"
        );
        assert!(started_rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(gate_tx);
        for _ in 0..2 {
            started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!(pool.workers(), 3);
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
    fn cancel_runs_each_hook_once_and_a_late_hook_at_once() {
        let ctl = CallCtl::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        let early = tx.clone();
        ctl.on_cancel(move || early.send("early").unwrap());
        assert!(rx.try_recv().is_err(), "a hook runs only on cancel");
        ctl.cancel();
        ctl.cancel();
        assert_eq!(rx.try_recv(), Ok("early"));
        assert!(rx.try_recv().is_err(), "a hook runs once");
        ctl.on_cancel(move || tx.send("late").unwrap());
        assert_eq!(rx.try_recv(), Ok("late"));
    }

    #[test]
    fn cancel_kills_a_registered_group_and_late_registration() {
        let ctl = CallCtl::new();
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

    /// A run handed on (an inline run becoming a job) is out of the call's reach at once; a
    /// call cancelled first keeps its run for the kill and refuses to hand it on (§21).
    #[test]
    fn a_released_run_outlives_the_calls_cancel_and_a_cancelled_call_releases_none() {
        let sleeper = || {
            let mut c = std::process::Command::new("sleep");
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            let child = c.arg("30").spawn().unwrap();
            let pid = Pid::from_raw(child.id() as i32).unwrap();
            (child, pid)
        };
        let ctl = CallCtl::new();
        let (mut handed_on, pid) = sleeper();
        assert!(ctl.register_group(pid));
        assert!(ctl.release(pid, None));
        assert!(!ctl.has_groups());
        ctl.cancel();
        assert_eq!(
            handed_on.try_wait().unwrap(),
            None,
            "the cancel reached a released run"
        );
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        let _ = handed_on.wait();

        let ctl = CallCtl::new();
        let (mut kept, pid) = sleeper();
        assert!(ctl.register_group(pid));
        ctl.cancel();
        assert!(
            !ctl.release(pid, None),
            "a cancelled call handed its run on"
        );
        assert!(
            !kept.wait().unwrap().success(),
            "the cancelled call's run survived"
        );
    }
}
