//! The driver: steps one coroutine with `PyIter_Send` until it finishes, suspends, yields to the
//! loop or uses up its step budget. A loop, never recursion: an already-done future is answered
//! by going round again.
//!
//! The steps of one drive are bracketed by `_enter_task` / `_leave_task` (invariant I1): the
//! bracket covers each send and the classification of what came out, because probing a yielded
//! object's attributes can run Python bytecode and so let the GIL switch. Between two steps of
//! one drive only native code runs (no bytecode, so no GIL switch and no other thread can look at
//! the current task), so one bracket serves them all: a leave and an enter per extra step cost
//! about 400 instructions and changed nothing another thread could see.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters::bump;
use super::ffi::{self, Sent};
use super::job::{Completion, Job, Resume, Waiting};
use super::native::NativeFuture;
use super::resume::ResumeCallback;
use super::shared::Shared;

/// App-made tasks one tokio drive or loop callback may still take on after its drives (0: this
/// thread is in neither): a task that makes a task at every step must not keep the loop, or
/// what else is ready, waiting for good.
const FIRST_DRIVES: u32 = 16;

thread_local! {
    static FIRST_DRIVES_LEFT: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread is inside `Shared::with_first_drives`, which does not nest.
    static IN_FIRST_DRIVES_WINDOW: Cell<bool> = const { Cell::new(false) };
}

/// Which thread is driving: decides how a coroutine that must wait for the loop is rescheduled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Place {
    /// A tokio thread holding the drive slot.
    Tokio,
    /// The loop thread, inside one of the bridge's callbacks.
    Loop,
}

/// What one step left the coroutine in.
enum Step {
    /// Go round again with this input (an already-done future, a ready native future, an error
    /// to throw in).
    Continue(Resume),
    /// It yielded bare `None`: let the loop run a cycle before the next step.
    Yield,
    /// It waits on a future whose resolution will resume it.
    Suspended,
    Finished(PyResult<Py<PyAny>>),
}

/// Drives `job` from `resume` until it stops. Returns true if the coroutine finished.
pub fn drive(
    py: Python<'_>,
    shared: &Arc<Shared>,
    job: &Bound<'_, Job>,
    resume: Resume,
    place: Place,
) -> bool {
    let this = job.get();
    if this.app_task && matches!(&resume, Resume::Send(value) if value.is_none(py)) {
        if let Some(own_step) = this.take_own_step_if_cancelled() {
            hand_back(py, shared, job, own_step);
            return true;
        }
    }
    bump(&shared.counters.drives);
    let first_drive = this.drive_count() == 1;
    let trace = &shared.trace;
    if trace.enabled() {
        // An app-made task's first drive waited on a `call_soon`, as any resume does.
        let waited = if first_drive && !this.app_task {
            &trace.first_drive
        } else {
            &trace.resume_wait
        };
        trace.record_since(waited, this.take_resumable_mark());
    }
    let (end, steps) = match Job::task(job, &shared.api, shared.ready.as_ref(), &shared.counters) {
        Ok(task) => run_steps(py, shared, job, &task, resume, place),
        Err(err) => (Step::Finished(Err(err)), 0),
    };
    shared
        .counters
        .steps
        .fetch_add(steps as u64, Ordering::Relaxed);
    match end {
        Step::Finished(result) => {
            if first_drive {
                bump(&shared.counters.inline_completions);
            }
            shared.finish(job, result);
            true
        }
        Step::Suspended => false,
        Step::Yield => {
            reschedule(py, shared, job, Resume::Send(py.None()), place);
            false
        }
        Step::Continue(resume) => {
            bump(&shared.counters.budget_exhaustions);
            reschedule(py, shared, job, resume, place);
            false
        }
    }
}

/// Hands an app-made task that was asked to cancel back to `Task`: its own `__step` takes
/// this step, with the cancellation `Task.cancel` recorded, and every step after it. The
/// coroutine's last `CancelledError` is then the very one `await task` raises (`Task` keeps
/// it; from outside, the bridge could only end the task cancelled with a new one), and what
/// follows a cancellation (a timeout's, a task group's) is `Task`'s own.
fn hand_back(py: Python<'_>, shared: &Arc<Shared>, job: &Bound<'_, Job>, own_step: Py<PyAny>) {
    let (pending, counted) = job.get().take_cancel_state();
    let Some(task) = shared.retire_app_task(job) else {
        return;
    };
    let task = task.bind(py);
    // `Task` throws a cancellation in only if one is pending, as `_must_cancel` says: one the
    // job delivered by cancelling what the coroutine waits on is seen through that instead.
    let mut carried = counted;
    if let Some(msg) = pending {
        match shared.api.task_cancel.bind(py).call1((task, msg)) {
            Ok(_) => carried = carried.saturating_sub(1),
            Err(err) => err.write_unraisable(py, Some(task)),
        }
    }
    if let Err(err) = task.setattr(intern!(py, "_ferrule_cancels"), carried) {
        err.write_unraisable(py, Some(task));
    }
    // In the task's context, as the loop runs each of `Task`'s steps.
    let context = job.get().context.bind(py);
    if let Err(err) = ffi::enter_context(context) {
        err.write_unraisable(py, Some(context));
        return;
    }
    if let Err(err) = own_step.bind(py).call0() {
        err.write_unraisable(py, Some(own_step.bind(py)));
    }
    if let Err(err) = ffi::exit_context(context) {
        err.write_unraisable(py, Some(context));
    }
}

/// Runs up to the budget's worth of steps inside the job's context.
fn run_steps(
    py: Python<'_>,
    shared: &Arc<Shared>,
    job: &Bound<'_, Job>,
    task: &Bound<'_, PyAny>,
    mut resume: Resume,
    place: Place,
) -> (Step, u32) {
    let this = job.get();
    let context = this.context.bind(py);
    if let Err(err) = ffi::enter_context(context) {
        return (Step::Finished(Err(err)), 0);
    }
    let event_loop = shared.event_loop.bind(py);
    if let Err(err) = shared.api.enter_task.bind(py).call1((event_loop, task)) {
        if err.to_string().contains("Cannot enter into task") {
            bump(&shared.counters.collisions);
        }
        if let Err(err) = ffi::exit_context(context) {
            err.write_unraisable(py, Some(context));
        }
        return (Step::Finished(Err(err)), 0);
    }
    let mut steps = 0;
    let mut end = loop {
        if steps == shared.budget {
            break Step::Continue(resume);
        }
        steps += 1;
        if let Some(cancelled) = this.take_must_cancel(py, &shared.api) {
            resume = Resume::Throw(cancelled);
        }
        match send_and_classify(py, shared, job, task, resume) {
            Step::Continue(next) => resume = next,
            // A bare yield (`asyncio.sleep(0)`) asks to let whatever else is ready run first.
            // On a tokio thread, while the loop thread waits in `select` with nothing ready and
            // nothing queued for it, the loop would run this coroutine next anyway (after polling
            // I/O and firing due timers, which wait at most one budget of steps longer): go on
            // here rather than wake the loop thread and hand the coroutine over.
            Step::Yield if place == Place::Tokio && shared.loop_has_nothing_ready(py) => {
                resume = Resume::Send(py.None());
            }
            other => break other,
        }
    };
    if let Err(err) = shared.api.leave_task.bind(py).call1((event_loop, task)) {
        end = Step::Finished(Err(err));
    }
    if let Err(err) = ffi::exit_context(context) {
        err.write_unraisable(py, Some(context));
    }
    (end, steps)
}

fn send_and_classify(
    py: Python<'_>,
    shared: &Arc<Shared>,
    job: &Bound<'_, Job>,
    task: &Bound<'_, PyAny>,
    resume: Resume,
) -> Step {
    let coro = job.get().coro.bind(py);
    let sent = match resume {
        Resume::Send(value) => ffi::iter_send(coro, value.bind(py)),
        Resume::Throw(error) => throw_into(coro, error.bind(py)),
    };
    match sent {
        Ok(Sent::Returned(value)) => Step::Finished(Ok(value.unbind())),
        Ok(Sent::Yielded(yielded)) => match classify(py, shared, job, task, &yielded) {
            Ok(step) => step,
            Err(err) => Step::Continue(Resume::Throw(err.into_value(py).into_any())),
        },
        Err(err) => Step::Finished(Err(err)),
    }
}

/// `coro.throw(error)`, with a `StopIteration` out of it read as the coroutine returning.
fn throw_into<'py>(coro: &Bound<'py, PyAny>, error: &Bound<'py, PyAny>) -> PyResult<Sent<'py>> {
    let py = coro.py();
    match coro.call_method1(intern!(py, "throw"), (error,)) {
        Ok(yielded) => Ok(Sent::Yielded(yielded)),
        Err(err) if err.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => {
            let value = err.value(py).getattr(intern!(py, "value"))?;
            Ok(Sent::Returned(value))
        }
        Err(err) => Err(err),
    }
}

/// Decides what a yielded value means, as `Task.__step` does, plus ferrule's native futures.
fn classify(
    py: Python<'_>,
    shared: &Arc<Shared>,
    job: &Bound<'_, Job>,
    task: &Bound<'_, PyAny>,
    yielded: &Bound<'_, PyAny>,
) -> PyResult<Step> {
    let this = job.get();
    if yielded.is_none() {
        return Ok(Step::Yield);
    }
    if let Ok(native) = yielded.cast::<NativeFuture>() {
        if native.get().ready_or_wait(job) {
            return Ok(Step::Continue(Resume::Send(py.None())));
        }
        this.set_waiting(Waiting::Native(native.clone().into_any().unbind()));
        this.cancel_new_wait(py)?;
        return Ok(Step::Suspended);
    }
    let blocking = match yielded.getattr_opt(intern!(py, "_asyncio_future_blocking"))? {
        Some(blocking) => blocking.is_truthy()?,
        None => {
            return Err(PyRuntimeError::new_err(format!(
                "Task got bad yield: {}",
                yielded.repr()?
            )))
        }
    };
    if !blocking {
        return Err(PyRuntimeError::new_err(format!(
            "yield was used instead of yield from in task {} with {}",
            job.get().task_repr(py),
            yielded.repr()?
        )));
    }
    yielded.setattr(intern!(py, "_asyncio_future_blocking"), false)?;
    if yielded.is(task) {
        return Err(PyRuntimeError::new_err(format!(
            "Task cannot await on itself: {}",
            task.repr()?
        )));
    }
    // `futures._get_loop`: a future without `get_loop` is asked for its `_loop`.
    let future_loop = match yielded.call_method0(intern!(py, "get_loop")) {
        Ok(found) => found,
        Err(err) if err.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
            yielded.getattr(intern!(py, "_loop"))?
        }
        Err(err) => return Err(err),
    };
    if !future_loop.is(&shared.event_loop) {
        return Err(PyRuntimeError::new_err(format!(
            "Task {} got Future {} attached to a different loop",
            job.get().task_repr(py),
            yielded.repr()?
        )));
    }
    if yielded.call_method0(intern!(py, "done"))?.is_truthy()? {
        // Resolved already: go round again. Sending None makes the future's iterator return
        // its result or raise its exception, exactly as after a `Task.__wakeup`.
        bump(&shared.counters.future_fast_path);
        return Ok(Step::Continue(Resume::Send(py.None())));
    }
    let callback = ResumeCallback::of_job(shared, job, None)?;
    yielded.call_method1(intern!(py, "add_done_callback"), (callback,))?;
    this.set_waiting(Waiting::Future(yielded.clone().unbind()));
    this.cancel_new_wait(py)?;
    Ok(Step::Suspended)
}

/// Lets the loop run before the job's next step: `call_soon` on the loop thread (no self-pipe
/// write needed there), a handoff through the `ReadyQueue` from a tokio thread.
fn reschedule(
    py: Python<'_>,
    shared: &Arc<Shared>,
    job: &Bound<'_, Job>,
    resume: Resume,
    place: Place,
) {
    match place {
        Place::Loop => {
            if let Err(err) = shared.resume_soon_on_loop(py, job.clone().unbind(), resume) {
                shared.finish(job, Err(err));
            }
        }
        Place::Tokio => shared.handoff(job.clone().unbind(), resume),
    }
}

/// Starting and driving jobs on either thread: the bridge's entry points into `drive`.
impl Shared {
    /// Makes `coro` a job whose result goes to `completion`, and gives it its first drive on
    /// this thread: how the server starts every app coroutine, on a tokio thread or (see
    /// `start_on_loop`) on the loop thread. It runs in `context`, which nothing else may enter.
    /// `received` is the trace mark of the request's arrival (0 when not traced): its first
    /// drive records the wait.
    pub fn start(
        self: &Arc<Self>,
        py: Python<'_>,
        coro: &Bound<'_, PyAny>,
        completion: Completion,
        context: Bound<'_, PyAny>,
        received: u64,
    ) -> PyResult<()> {
        let id = self.next_job_id();
        let job = Bound::new(py, Job::new(py, id, coro, completion, Some(context))?)?;
        job.get().mark_resumable(received);
        self.remember_job(&job);
        if self.on_loop_thread() {
            self.drive_on_loop(py, &job, Resume::Send(py.None()));
        } else {
            self.drive_from_tokio(py, &job, Resume::Send(py.None()));
        }
        Ok(())
    }

    /// Schedules an app-made task's first drive, as `Task.__init__` schedules its first step.
    /// Made during a tokio drive or a loop-thread callback while nothing waits for the loop
    /// (its ready callbacks and our queue empty), that step would be the loop's next callback:
    /// it runs on this thread right after the drives of the drive or callback instead, sparing
    /// the loop an iteration (and a tokio thread's drive, a wake-up). Anything scheduled after
    /// it still runs after it.
    /// Otherwise `first_drive` (a `FirstDrive`'s bound `drive`) is called with the job.
    pub(super) fn schedule_first_drive(
        self: &Arc<Self>,
        py: Python<'_>,
        job: Bound<'_, Job>,
        first_drive: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let left = FIRST_DRIVES_LEFT.with(Cell::get);
        if left > 0 && self.loop_has_nothing_ready(py) {
            FIRST_DRIVES_LEFT.with(|cell| cell.set(left - 1));
            bump(&self.counters.first_drives_after);
            self.next_first_drives
                .lock()
                .unwrap()
                .push_back(job.unbind());
            return Ok(());
        }
        job.get().mark_resumable(self.trace.mark());
        self.api.call_soon.bind(py).call1((first_drive, job))?;
        Ok(())
    }

    /// Runs `drives`, the drives of one tokio drive or loop-thread callback, then the first
    /// drives of the app-made tasks they made that would have been the loop's next callbacks
    /// (see `schedule_first_drive`), and of those these make in turn, up to `FIRST_DRIVES`.
    /// Within a callback already in such a window, only runs `drives`.
    pub(super) fn with_first_drives(
        self: &Arc<Self>,
        py: Python<'_>,
        place: Place,
        drives: impl FnOnce(),
    ) {
        if IN_FIRST_DRIVES_WINDOW.with(|inside| inside.replace(true)) {
            drives();
            return;
        }
        FIRST_DRIVES_LEFT.with(|left| left.set(FIRST_DRIVES));
        drives();
        // Nothing was queued if none was counted off: most callbacks, and every one without the
        // task factory, then skip the queue's lock.
        if FIRST_DRIVES_LEFT.with(Cell::get) < FIRST_DRIVES {
            loop {
                let next = self.next_first_drives.lock().unwrap().pop_front();
                let Some(next) = next else { break };
                drive(py, self, next.bind(py), Resume::Send(py.None()), place);
            }
        }
        FIRST_DRIVES_LEFT.with(|left| left.set(0));
        IN_FIRST_DRIVES_WINDOW.with(|inside| inside.set(false));
    }

    /// On the loop thread: run the job's next step in a later loop iteration.
    pub(super) fn resume_soon_on_loop(
        self: &Arc<Self>,
        py: Python<'_>,
        job: Py<Job>,
        resume: Resume,
    ) -> PyResult<()> {
        job.get().mark_resumable(self.trace.mark());
        let callback = ResumeCallback::of_job(self, job.bind(py), Some(resume))?;
        self.api.call_soon.bind(py).call1((callback,))?;
        Ok(())
    }

    /// Resumes `job` soon from a caller that may itself be inside a drive.
    pub(super) fn resume_later(
        self: &Arc<Self>,
        py: Python<'_>,
        job: Py<Job>,
        resume: Resume,
    ) -> PyResult<()> {
        if self.on_loop_thread() {
            self.resume_soon_on_loop(py, job, resume)
        } else {
            self.handoff(job, resume);
            Ok(())
        }
    }

    /// A tokio thread, holding the GIL and no drive, wants to drive `job`: drive it here if it
    /// can have exclusive use, else hand it to the loop thread.
    pub fn drive_from_tokio(
        self: &Arc<Self>,
        py: Python<'_>,
        job: &Bound<'_, Job>,
        resume: Resume,
    ) {
        bump(&self.counters.gil_acquisitions);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Err(err) = self.ensure_running_loop(py) {
            self.finish(job, Err(err));
            return;
        }
        if !self.try_begin_tokio_drive() {
            self.handoff(job.clone().unbind(), resume);
            return;
        }
        // The task is made before measuring: on 3.11 making it pushes and pops a handle.
        if let Err(err) = Job::task(job, &self.api, self.ready.as_ref(), &self.counters) {
            self.queue.end_tokio_drive();
            self.finish(job, Err(err));
            return;
        }
        let (ready_before, scheduled_before) = self.loop_queue_marks(py);
        self.with_first_drives(py, Place::Tokio, || {
            drive(py, self, job, resume, Place::Tokio);
        });
        let (ready_after, scheduled_after) = self.loop_queue_marks(py);
        self.queue.end_tokio_drive();
        // A coroutine that completed without touching asyncio leaves both unchanged: no wake.
        // Completing a spawn future does schedule its callbacks, and that is seen here too.
        let loop_has_new_work = ready_after > ready_before || scheduled_after > scheduled_before;
        if loop_has_new_work || !self.queue.is_empty() {
            self.wake();
        }
    }

    /// `drive_on_loop` as the whole of a loop callback of the bridge's (`ResumeCallback`,
    /// `FirstDrive`): nothing else of the callback runs after the drive, so the tasks it made
    /// may take their first drives right after it.
    pub(super) fn drive_in_loop_callback(
        self: &Arc<Self>,
        py: Python<'_>,
        job: &Bound<'_, Job>,
        resume: Resume,
    ) {
        self.with_first_drives(py, Place::Loop, || self.drive_on_loop(py, job, resume));
    }

    /// The loop thread wants to drive `job` from one of the bridge's callbacks.
    pub(super) fn drive_on_loop(
        self: &Arc<Self>,
        py: Python<'_>,
        job: &Bound<'_, Job>,
        resume: Resume,
    ) {
        if self.queue.tokio_driving() {
            bump(&self.counters.deferred_resumes);
            job.get().mark_resumable(self.trace.mark());
            self.queue.push(job.clone().unbind(), resume);
            return;
        }
        drive(py, self, job, resume, Place::Loop);
    }
}
