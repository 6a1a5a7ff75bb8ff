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
    pub(super) fn spawn(name: &str) -> io::Result<Self> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || queue.into_iter().for_each(|job| job()))?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// The worker in `slot`, started as `name` on first use.
    pub(super) fn get<'a>(slot: &'a mut Option<Worker>, name: &str) -> io::Result<&'a Worker> {
        if slot.is_none() {
            *slot = Some(Self::spawn(name)?);
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
        let worker = Worker::get(&mut slot, "test-worker").unwrap();
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
}
