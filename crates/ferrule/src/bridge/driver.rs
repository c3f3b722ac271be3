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

use super::counters::bump;
use super::ffi::{self, Sent};
use super::job::{Job, Resume, Waiting};
use super::native::NativeFuture;
use super::resume::ResumeCallback;

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
pub fn drive(py: Python<'_>, job: &Bound<'_, Job>, resume: Resume, place: Place) -> bool {
    let this = job.get();
    let shared = &this.shared;
    bump(&shared.counters.drives);
    let first_drive = this.drive_count() == 1;
    let trace = &shared.trace;
    if trace.enabled() {
        let waited = if first_drive {
            &trace.first_drive
        } else {
            &trace.resume_wait
        };
        trace.record_since(waited, this.take_resumable_mark());
    }
    let (end, steps) = match Job::task(job) {
        Ok(task) => run_steps(py, job, &task, resume, place),
        Err(err) => (Step::Finished(Err(err)), 0),
    };
    shared
        .counters
        .steps
        .fetch_add(steps as u64, std::sync::atomic::Ordering::Relaxed);
    match end {
        Step::Finished(result) => {
            if first_drive {
                bump(&shared.counters.inline_completions);
            }
            Job::finish(job, result);
            true
        }
        Step::Suspended => false,
        Step::Yield => {
            reschedule(py, job, Resume::Send(py.None()), place);
            false
        }
        Step::Continue(resume) => {
            bump(&shared.counters.budget_exhaustions);
            reschedule(py, job, resume, place);
            false
        }
    }
}

/// Runs up to the budget's worth of steps inside the job's context.
fn run_steps(
    py: Python<'_>,
    job: &Bound<'_, Job>,
    task: &Bound<'_, PyAny>,
    mut resume: Resume,
    place: Place,
) -> (Step, u32) {
    let this = job.get();
    let shared = &this.shared;
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
        if let Some(cancelled) = this.take_must_cancel(py) {
            resume = Resume::Throw(cancelled);
        }
        match send_and_classify(py, job, resume) {
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

fn send_and_classify(py: Python<'_>, job: &Bound<'_, Job>, resume: Resume) -> Step {
    let coro = job.get().coro.bind(py);
    let sent = match resume {
        Resume::Send(value) => ffi::iter_send(coro, value.bind(py)),
        Resume::Throw(error) => throw_into(coro, error.bind(py)),
    };
    match sent {
        Ok(Sent::Returned(value)) => Step::Finished(Ok(value.unbind())),
        Ok(Sent::Yielded(yielded)) => match classify(py, job, &yielded) {
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
fn classify(py: Python<'_>, job: &Bound<'_, Job>, yielded: &Bound<'_, PyAny>) -> PyResult<Step> {
    let this = job.get();
    let shared = &this.shared;
    if yielded.is_none() {
        return Ok(Step::Yield);
    }
    if let Ok(native) = yielded.cast::<NativeFuture>() {
        if native.get().ready_or_wait(job) {
            return Ok(Step::Continue(Resume::Send(py.None())));
        }
        this.set_waiting(Waiting::Native(native.clone().unbind()));
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
    let future_loop = yielded.call_method0(intern!(py, "get_loop"))?;
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
    let callback = Py::new(py, ResumeCallback::on_future(job.clone().unbind()))?;
    yielded.call_method1(intern!(py, "add_done_callback"), (callback,))?;
    this.set_waiting(Waiting::Future(yielded.clone().unbind()));
    this.cancel_new_wait(py)?;
    Ok(Step::Suspended)
}

/// Lets the loop run before the job's next step: `call_soon` on the loop thread (no self-pipe
/// write needed there), a handoff through the `ReadyQueue` from a tokio thread.
fn reschedule(py: Python<'_>, job: &Bound<'_, Job>, resume: Resume, place: Place) {
    let shared = &job.get().shared;
    match place {
        Place::Loop => {
            if let Err(err) = shared.resume_soon_on_loop(py, job.clone().unbind(), resume) {
                Job::finish(job, Err(err));
            }
        }
        Place::Tokio => shared.handoff(job.clone().unbind(), resume),
    }
}
