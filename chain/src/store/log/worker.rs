//! The log store's background workers, after fjall's: each a long-lived thread fed by a bounded
//! channel, running one job at a time and handing each result back on a channel of its own,
//! instead of a new thread per job.
//!
//! The store keeps two: one syncs the last block's segment ([`crate::Durability::Background`]),
//! one merges the log into the next run. They are apart because a commit waits for the sync
//! of the block before it, and must never wait behind a merge of several seconds.

use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

/// The nice value of a [`Priority::Yielding`] worker: CPU time goes to it in proportion to
/// its weight, 110 against 1,024 for a thread at the default 0 (the kernel's table), so
/// while block execution and verification keep every core busy it gets about a tenth of
/// one, and all of an idle one. A merge of the 10M-account run (one second or more of CPU)
/// used to take a core from verification for as long: in a 10M-transfer run, two stretches
/// of 60 blocks ran at 58% of the median speed.
const YIELDING_NICE: libc::c_int = 10;

/// How a worker's thread competes for the CPU with the threads that execute blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Priority {
    /// Like any thread: the sync a commit waits for.
    Normal,
    /// Behind block processing ([`YIELDING_NICE`]): upkeep nothing waits for, such as a merge
    /// (the store starts no other merge while one runs, and commits go on meanwhile).
    Yielding,
}

/// Jobs that may wait for a worker. The store waits for each job before it sends the next of
/// its kind (one sync, one merge at a time), so one slot is enough and a send never blocks.
const QUEUE: usize = 1;

type Job = Box<dyn FnOnce() + Send>;

/// A long-lived background thread. Dropping it lets its last job finish, then ends it.
pub(super) struct Worker {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// A job that panicked, or whose worker is gone.
#[derive(Debug)]
pub(super) struct Lost;

/// The result of a job sent to a [`Worker`].
pub(super) struct Pending<T> {
    /// In a mutex only so that the store stays `Sync` (a receiver is not): it is reached
    /// through `&mut` or by value alone, so the lock is never contended.
    result: Mutex<Receiver<std::thread::Result<T>>>,
    done: Option<Result<T, Lost>>,
}

impl Worker {
    /// Starts the thread `name`.
    pub(super) fn spawn(name: &str, priority: Priority) -> io::Result<Self> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if priority == Priority::Yielding {
                    yield_to_others();
                }
                queue.into_iter().for_each(|job| job())
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// The worker in `slot`, started as `name` on first use.
    pub(super) fn get<'a>(
        slot: &'a mut Option<Worker>,
        name: &str,
        priority: Priority,
    ) -> io::Result<&'a Worker> {
        if slot.is_none() {
            *slot = Some(Self::spawn(name, priority)?);
        }
        Ok(slot.as_ref().expect("set above"))
    }

    /// Runs `job` on the worker, after the jobs sent before it.
    pub(super) fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Pending<T> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            // A panic is the job's result, not the worker's end.
            let _ = done.send(catch_unwind(AssertUnwindSafe(job)));
        });
        // It fails only if the thread is gone; the job's result channel then says so.
        let _ = self.jobs.as_ref().expect("open until dropped").send(job);
        Pending {
            result: Mutex::new(result),
            done: None,
        }
    }
}

/// Lowers the calling thread's priority to [`YIELDING_NICE`], unless it is lower already (a
/// node an operator started niced). On Linux the nice value is the thread's own, not the
/// process's (setpriority(2), NOTES). A failure leaves the thread as it was: only speed
/// depends on it.
fn yield_to_others() {
    #[cfg(target_os = "linux")]
    // SAFETY: getpriority and setpriority read no memory; `0` names the calling thread.
    unsafe {
        if libc::getpriority(libc::PRIO_PROCESS, 0) < YIELDING_NICE {
            libc::setpriority(libc::PRIO_PROCESS, 0, YIELDING_NICE);
        }
    }
}

/// The calling thread's nice value (Linux), for tests.
#[cfg(all(test, target_os = "linux"))]
fn nice() -> libc::c_int {
    // SAFETY: getpriority reads no memory; `0` names the calling thread.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<T> Pending<T> {
    /// Whether the job is done (never waits).
    pub(super) fn is_done(&mut self) -> bool {
        if self.done.is_none() {
            let receiver = self.result.get_mut().unwrap_or_else(|e| e.into_inner());
            self.done = match receiver.try_recv() {
                Ok(result) => Some(result.map_err(|_| Lost)),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => Some(Err(Lost)),
            };
        }
        true
    }

    /// Waits for the job's result.
    pub(super) fn wait(mut self) -> Result<T, Lost> {
        if let Some(done) = self.done.take() {
            return done;
        }
        let receiver = self.result.into_inner().unwrap_or_else(|e| e.into_inner());
        match receiver.recv() {
            Ok(result) => result.map_err(|_| Lost),
            Err(_) => Err(Lost),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_runs_every_job_in_order_and_survives_a_panicking_one() {
        let mut slot = None;
        let worker = Worker::get(&mut slot, "test-worker", Priority::Normal).unwrap();
        let first = worker.run(|| std::thread::current().id());
        let panics = worker.run(|| panic!("a job's panic"));
        let mut last = worker.run(|| std::thread::current().id());
        let first = first.wait().unwrap();
        assert!(panics.wait().is_err());
        while !last.is_done() {
            std::thread::yield_now();
        }
        assert_eq!(last.wait().unwrap(), first, "the same long-lived thread");
        assert_ne!(first, std::thread::current().id());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_yielding_worker_runs_behind_others_and_leaves_its_caller_as_it_was() {
        let before = nice();
        let yielding = Worker::spawn("test-yielding", Priority::Yielding).unwrap();
        let normal = Worker::spawn("test-normal", Priority::Normal).unwrap();
        // A thread niced more already (an operator may have started the node so) stays so.
        assert_eq!(
            yielding.run(nice).wait().unwrap(),
            YIELDING_NICE.max(before)
        );
        assert_eq!(normal.run(nice).wait().unwrap(), before);
        assert_eq!(nice(), before);
    }
}
