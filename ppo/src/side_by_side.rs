//! Two halves of libtorch work side by side: one on the calling thread, one on a long-lived
//! helper thread, each on one libtorch thread. The PPO actor and critic share no tensor, so
//! on few cores their halves of a rollout step's sampling and of an update's minibatch run at
//! once (`ppo::Act::sample`, `ppo::update`).
//!
//! One helper for the process, started at first use: a new thread per call cost about 0.4 ms
//! (its start, and libtorch's and MKL's set-up on a new thread), a third of a rollout step's
//! sampling at 128 envs. Calls from several threads queue on it.

use arena_torch::denormals::{FlushDenormals, flushing_here};
use std::any::Any;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};

type Job = Box<dyn FnOnce() + Send>;

/// Runs `here` on the calling thread and `there` on the helper at once, and returns both
/// results. The caller's flushing of subnormals holds on the helper too (MXCSR is per thread);
/// libtorch's grad mode is per thread as well and enabled on the helper: `there` sets its own.
/// A panic of `there` resumes on the caller. Where no helper thread could be started, `there`
/// runs on the caller before `here`.
pub(crate) fn beside<A, B: Send + 'static>(
    here: impl FnOnce() -> A,
    there: impl FnOnce() -> B + Send + 'static,
) -> (A, B) {
    let _one_thread = OneThreadHere::new();
    let there = start_beside(there);
    let a = here();
    (a, there.join())
}

/// Work started on the helper thread (or done already, where there is no helper).
pub(crate) enum Later<B> {
    Running(Receiver<Result<B, Box<dyn Any + Send>>>),
    Done(B),
}

impl<B> Later<B> {
    /// Waits for the work's result; a panic of the work resumes here.
    pub(crate) fn join(self) -> B {
        match self {
            Later::Done(b) => b,
            Later::Running(answer) => match answer.recv().expect("every job answers (its panics are caught)") {
                Ok(b) => b,
                Err(panic) => std::panic::resume_unwind(panic),
            },
        }
    }
}

/// Starts `there` on the helper, as [`beside`] does, and returns at once: the caller goes on
/// with other work (a rollout's step, while the critic's half of its sampling computes) and
/// joins the result when it needs it. Jobs run on the helper in the order they were started.
/// Where no helper thread could be started, `there` runs now, on the caller.
pub(crate) fn start_beside<B: Send + 'static>(there: impl FnOnce() -> B + Send + 'static) -> Later<B> {
    let flush = flushing_here();
    let (answer, result) = sync_channel::<Result<B, Box<dyn Any + Send>>>(1);
    let job: Job = Box::new(move || {
        let _flush = flush.then(|| FlushDenormals::new(1));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(there));
        // The caller waits for this answer; one that panicked itself, or dropped its
        // `Later`, has gone.
        let _ = answer.send(out);
    });
    let unsent = match helper() {
        Some(queue) => queue.send(job).err().map(|unsent| unsent.0),
        None => Some(job),
    };
    if let Some(job) = unsent {
        let _one_thread = OneThreadHere::new();
        job();
    }
    Later::Running(result)
}

/// The helper's queue (None where no thread could be started).
fn helper() -> Option<&'static Sender<Job>> {
    static HELPER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    HELPER
        .get_or_init(|| {
            let (jobs, queue) = channel::<Job>();
            std::thread::Builder::new()
                .name("torch-beside".into())
                .spawn(move || {
                    tch::set_num_threads(1);
                    for job in queue {
                        job();
                    }
                })
                .ok()
                .map(|_| jobs)
        })
        .as_ref()
}

/// The calling thread on one libtorch thread until drop, then back to the threads it had.
pub(crate) struct OneThreadHere(i32);

impl OneThreadHere {
    pub(crate) fn new() -> Self {
        let threads = tch::get_num_threads();
        if threads != 1 {
            tch::set_num_threads(1);
        }
        OneThreadHere(threads)
    }
}

impl Drop for OneThreadHere {
    fn drop(&mut self) {
        if self.0 != 1 {
            tch::set_num_threads(self.0);
        }
    }
}
