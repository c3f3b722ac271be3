//! The asyncio objects the bridge calls on every drive, looked up once per bridge, and the
//! per-coroutine task (`DriverTask`) built the way each interpreter family needs.

use std::collections::VecDeque;
use std::sync::Mutex;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use super::counters::{bump, Counters};
use super::ffi;

/// The Python half of the task: a `Task` subclass whose cancellation goes to the bridge's job,
/// and the instantly finishing coroutine it is built over. Compiled once per process.
const DRIVER_TASK_SOURCE: &std::ffi::CStr = cr#"
import asyncio


class DriverTask(asyncio.Task):
    """asyncio's view of a coroutine that ferrule's bridge drives: the current task while it runs.

    The bridge steps the coroutine itself, so cancelling goes to the bridge's job, which cancels
    what the coroutine waits on, as Task.cancel cancels its _fut_waiter.
    """

    __slots__ = ("_ferrule_job",)

    def done(self):
        # The C-level state says done as soon as the sentinel finished (eager start, or its step
        # on uvloop); the coroutine this task stands for is done only when the job is.
        return self._ferrule_job is None and super().done()

    def get_coro(self):
        # The coroutine the bridge drives, not the sentinel (which 3.12+ clears once done and
        # anyio asserts on).
        job = self._ferrule_job
        return super().get_coro() if job is None else job.coro

    def cancel(self, msg=None):
        job = self._ferrule_job
        return False if job is None else job.cancel(msg)

    def cancelling(self):
        job = self._ferrule_job
        return 0 if job is None else job.cancelling()

    def uncancel(self):
        job = self._ferrule_job
        return 0 if job is None else job.uncancel()


async def sentinel():
    """The coroutine each DriverTask is built over: it finishes at once."""


class Task(asyncio.Task):
    """A task the app made (create_task, a task group, gather) over its own coroutine, which
    ferrule's bridge steps instead of Task.__step. Named Task: asyncio's messages name the
    class ("Task exception was never retrieved", the repr).

    Its own first step never reaches the loop, so its C-level state stays pending until the
    job ends and sets it: done(), result(), callbacks and all_tasks() are Task's own. Asked to
    cancel, it goes back to Task, which steps it from then on; _ferrule_cancels carries the
    cancellations the job counted into Task's count.
    """

    __slots__ = ("_ferrule_job", "_ferrule_cancels")

    # The job is read as an attribute, not with getattr(): anyio asks every task it starts
    # for cancelling(), and a slot read is cheaper than calling a builtin. The slot is unset
    # when the class is built without the factory (an eager task factory over it).

    def cancel(self, msg=None):
        try:
            job = self._ferrule_job
        except AttributeError:
            job = None
        if job is None:
            return super().cancel(msg)
        self._log_traceback = False
        return job.cancel(msg)

    def cancelling(self):
        try:
            job = self._ferrule_job
        except AttributeError:
            job = None
        if job is not None:
            return job.cancelling()
        return super().cancelling() + getattr(self, "_ferrule_cancels", 0)

    def uncancel(self):
        try:
            job = self._ferrule_job
        except AttributeError:
            job = None
        if job is not None:
            return job.uncancel(UNCANCEL_WITHDRAWS)
        carried = getattr(self, "_ferrule_cancels", 0)
        if not carried:
            return super().uncancel()
        # Task's own count goes last: reaching zero there withdraws its pending cancel.
        self._ferrule_cancels = carried - 1
        return super().cancelling() + carried - 1

    if __import__("sys").version_info[:2] == (3, 13):
        # 3.13's create_task names a factory's task with set_name(name) even when no name was
        # given, which would name it "None" instead of keeping "Task-N".
        def set_name(self, value):
            if value is not None:
                super().set_name(value)


# 3.13 made uncancel() to zero also withdraw a cancellation not yet delivered.
UNCANCEL_WITHDRAWS = __import__("sys").version_info >= (3, 13)
"#;

static DRIVER_TASK_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// How this interpreter lets a per-coroutine task exist without a `__step` in the loop's queue.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TaskPath {
    /// 3.11: build the task, then pop its `__step` handle off `loop._ready` (I7).
    PopSentinelStep,
    /// 3.12 and 3.13: `eager_start=True` runs the sentinel to completion inside `__init__`.
    EagerStart,
    /// 3.14+: as 3.12, and each thread must first make the loop its running loop (I11).
    EagerStartPerThread,
}

impl TaskPath {
    pub fn for_interpreter(py: Python<'_>) -> Self {
        let version = py.version_info();
        if version >= (3, 14) {
            TaskPath::EagerStartPerThread
        } else if version >= (3, 12) {
            TaskPath::EagerStart
        } else {
            TaskPath::PopSentinelStep
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TaskPath::PopSentinelStep => "pop-sentinel-step",
            TaskPath::EagerStart => "eager-start",
            TaskPath::EagerStartPerThread => "eager-start-per-thread",
        }
    }
}

pub struct AsyncioApi {
    pub task_path: TaskPath,
    pub enter_task: Py<PyAny>,
    pub leave_task: Py<PyAny>,
    pub set_running_loop: Py<PyAny>,
    pub future_set_result: Py<PyAny>,
    pub cancelled_error: Py<PyAny>,
    pub invalid_state_error: Py<PyAny>,
    pub driver_task: Py<PyAny>,
    pub sentinel: Py<PyAny>,
    pub call_soon: Py<PyAny>,
    pub call_soon_threadsafe: Py<PyAny>,
    /// The `Task` subclass of app-made tasks (`factory`).
    app_task: Py<PyAny>,
    /// asyncio's own `Task`, for tasks of another loop.
    stock_task: Py<PyAny>,
    pub future_set_exception: Py<PyAny>,
    pub future_cancel: Py<PyAny>,
    /// `Task.cancel` itself, past the subclass's override: records a pending cancellation in
    /// a task handed back to `Task`.
    pub task_cancel: Py<PyAny>,
    /// The loop's instance `__dict__`, where a `call_soon` put for the length of `Task()`
    /// catches the task's first step (none on a loop without one).
    loop_dict: Option<Py<PyDict>>,
    step_catcher: Py<StepCatcher>,
    /// `step_catcher`'s bound `call_soon`.
    catch_step: Py<PyAny>,
    task_kwargs: Py<PyDict>,
    get_weakref_count: Py<PyAny>,
    /// Finished `DriverTask`s nobody else can see, ready to stand for another coroutine.
    idle_tasks: Mutex<Vec<PooledTask>>,
    /// Finished `DriverTask`s something still held when their job ended, oldest first. On
    /// 3.11 with uvloop (no `_ready` to pop) that is the loop's handle for the sentinel's step
    /// until the loop runs it, so every task lands here first; without this queue each
    /// request made a new task, 7,300 of the 64,000 instructions of a hello request.
    cooling_tasks: Mutex<VecDeque<PooledTask>>,
}

/// Building a task costs more than the rest of a small request's drive (3.11: `Task.__init__`
/// schedules the sentinel's step, adds the task to a `WeakSet`, formats its name; then the pop,
/// the close, the `set_result`). A finished task that no one else holds, strongly or weakly,
/// cannot be told apart from a new one, so it is reused. At most this many wait, idle or cooling.
const IDLE_TASKS_MAX: usize = 256;
/// Cooling tasks looked at per task wanted: a task someone keeps for good only costs a look.
const COOLING_CHECKS: usize = 4;

/// A `DriverTask` and the weak references it had when made (the loop's task registry's own).
pub struct PooledTask {
    pub task: Py<PyAny>,
    weakrefs: usize,
}

/// A job's task, and whether the bridge must mark it done when the job ends (its sentinel's
/// step was popped, so nothing else will).
pub struct TaskSlot {
    pub task: PooledTask,
    pub must_finish: bool,
    /// Whether the task goes back to the pool when the job ends (not an app-made task, which
    /// the app holds).
    pub reusable: bool,
}

impl TaskSlot {
    /// The slot of an app-made task: never marked done by the bridge's sentinel path, never
    /// reused.
    pub fn app_task(task: Py<PyAny>) -> Self {
        Self {
            task: PooledTask { task, weakrefs: 0 },
            must_finish: false,
            reusable: false,
        }
    }
}

/// An app-made `Task`, and its own first step as `Task.__init__` scheduled it.
pub type AppTask<'py> = (Bound<'py, PyAny>, Option<Py<PyAny>>);

/// Stands for `loop.call_soon` while `Task.__init__` runs: keeps the task's first step (the
/// task's own `__step`, which the bridge calls to hand a cancelled task back to `Task`) and
/// schedules nothing, since the bridge drives the coroutine instead. The loop's dict gets its
/// bound `call_soon`, a builtin method: `Task` calls it with `context=`, which a `__call__`
/// would be handed packed into a new tuple and dict.
#[pyclass(frozen, module = "ferrule._ferrule")]
struct StepCatcher {
    caught: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl StepCatcher {
    #[pyo3(signature = (step, *_args, context=None))]
    fn call_soon(
        &self,
        step: Py<PyAny>,
        _args: &Bound<'_, pyo3::types::PyTuple>,
        context: Option<&Bound<'_, PyAny>>,
    ) {
        let _ = context; // the job enters the task's context itself
        *self.caught.lock().unwrap() = Some(step);
    }
}

impl AsyncioApi {
    pub fn new(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Self> {
        let asyncio = py.import("asyncio")?;
        let tasks = asyncio.getattr("tasks")?;
        let module = DRIVER_TASK_MODULE.get_or_try_init(py, || {
            PyModule::from_code(
                py,
                DRIVER_TASK_SOURCE,
                c"<ferrule-driver-task>",
                c"ferrule._driver_task",
            )
            .map(Bound::unbind)
        })?;
        let module = module.bind(py);
        let task_path = TaskPath::for_interpreter(py);
        let step_catcher = Bound::new(
            py,
            StepCatcher {
                caught: Mutex::new(None),
            },
        )?;
        let task_kwargs = PyDict::new(py);
        task_kwargs.set_item("loop", event_loop)?;
        if task_path != TaskPath::PopSentinelStep {
            task_kwargs.set_item("eager_start", true)?;
        }
        Ok(Self {
            task_path,
            enter_task: tasks.getattr("_enter_task")?.unbind(),
            leave_task: tasks.getattr("_leave_task")?.unbind(),
            set_running_loop: asyncio
                .getattr("events")?
                .getattr("_set_running_loop")?
                .unbind(),
            future_set_result: asyncio.getattr("Future")?.getattr("set_result")?.unbind(),
            cancelled_error: asyncio.getattr("CancelledError")?.unbind(),
            invalid_state_error: asyncio.getattr("InvalidStateError")?.unbind(),
            driver_task: module.getattr("DriverTask")?.unbind(),
            sentinel: module.getattr("sentinel")?.unbind(),
            call_soon: event_loop.getattr("call_soon")?.unbind(),
            call_soon_threadsafe: event_loop.getattr("call_soon_threadsafe")?.unbind(),
            app_task: module.getattr("Task")?.unbind(),
            stock_task: asyncio.getattr("Task")?.unbind(),
            future_set_exception: asyncio
                .getattr("Future")?
                .getattr("set_exception")?
                .unbind(),
            future_cancel: asyncio.getattr("Future")?.getattr("cancel")?.unbind(),
            task_cancel: asyncio.getattr("Task")?.getattr("cancel")?.unbind(),
            loop_dict: event_loop
                .getattr_opt(intern!(py, "__dict__"))?
                .and_then(|d| d.cast_into::<PyDict>().ok())
                .map(Bound::unbind),
            catch_step: step_catcher.getattr(intern!(py, "call_soon"))?.unbind(),
            step_catcher: step_catcher.unbind(),
            task_kwargs: task_kwargs.unbind(),
            get_weakref_count: py.import("weakref")?.getattr("getweakrefcount")?.unbind(),
            idle_tasks: Mutex::new(Vec::new()),
            cooling_tasks: Mutex::new(VecDeque::new()),
        })
    }

    /// A `DriverTask` to be the current-task identity of one driven coroutine: an idle one if
    /// there is one, else a new one.
    ///
    /// `ready` is `loop._ready` when the loop has one (not on uvloop, I6). Call this with the
    /// right to drive held: eager start and `__step` both touch the current-task table.
    pub fn driver_task(
        &self,
        py: Python<'_>,
        ready: Option<&Bound<'_, PyAny>>,
        counters: &Counters,
    ) -> PyResult<TaskSlot> {
        if let Some(task) = self.reusable_task(py) {
            return Ok(TaskSlot {
                task,
                must_finish: false,
                reusable: true,
            });
        }
        let (task, must_finish) = self.new_driver_task(py, ready)?;
        bump(&counters.tasks_made);
        let weakrefs = self.weakref_count(&task).unwrap_or(usize::MAX);
        Ok(TaskSlot {
            task: PooledTask {
                task: task.unbind(),
                weakrefs,
            },
            must_finish,
            reusable: true,
        })
    }

    /// An idle task, or else a cooling one that nothing holds any more.
    fn reusable_task(&self, py: Python<'_>) -> Option<PooledTask> {
        if let Some(task) = self.idle_tasks.lock().unwrap().pop() {
            return Some(task);
        }
        let mut cooling = self.cooling_tasks.lock().unwrap();
        let mut found = None;
        // Dropped once the lock is released: a task's deallocation can run Python (weakref
        // callbacks) that finishes a job and so recycles.
        let mut never_reusable = Vec::new();
        for _ in 0..COOLING_CHECKS.min(cooling.len()) {
            let Some(task) = cooling.pop_front() else {
                break;
            };
            match self.unshared(py, &task) {
                Some(true) => {
                    found = Some(task);
                    break;
                }
                Some(false) => cooling.push_back(task),
                None => never_reusable.push(task), // weakly referenced since it was made
            }
        }
        drop(cooling);
        drop(never_reusable);
        found
    }

    /// Whether nothing but the pool holds `task` (`Some(false)`: something else still does;
    /// `None`: a weak reference was added since it was made, so it never can be reused).
    fn unshared(&self, py: Python<'_>, task: &PooledTask) -> Option<bool> {
        let bound = task.task.bind(py);
        if self.weakref_count(bound) != Some(task.weakrefs) {
            return None;
        }
        Some(ffi::refcount(bound) == 1)
    }

    fn weakref_count(&self, task: &Bound<'_, PyAny>) -> Option<usize> {
        let count = self.get_weakref_count.bind(task.py()).call1((task,)).ok()?;
        count.extract().ok()
    }

    /// Takes back the task of a finished job (already detached from it and marked done) for
    /// reuse: idle if nothing but this call holds it, cooling if something still does.
    pub fn recycle(&self, py: Python<'_>, task: PooledTask) {
        match self.unshared(py, &task) {
            None => {}
            Some(true) => {
                let mut idle = self.idle_tasks.lock().unwrap();
                if idle.len() < IDLE_TASKS_MAX {
                    idle.push(task);
                } else {
                    drop(idle);
                    drop(task); // outside the lock, as in `reusable_task`
                }
            }
            Some(false) => {
                let mut cooling = self.cooling_tasks.lock().unwrap();
                let oldest = (cooling.len() == IDLE_TASKS_MAX)
                    .then(|| cooling.pop_front())
                    .flatten();
                cooling.push_back(task);
                drop(cooling);
                drop(oldest); // outside the lock, as in `reusable_task`
            }
        }
    }

    /// Drops the idle and cooling tasks (the bridge is closing).
    pub fn clear_idle_tasks(&self) {
        let idle = std::mem::take(&mut *self.idle_tasks.lock().unwrap());
        let cooling = std::mem::take(&mut *self.cooling_tasks.lock().unwrap());
        drop((idle, cooling));
    }

    /// A new `DriverTask`, and whether its sentinel will never run (3.11 with `_ready`: the
    /// bridge must finish the task).
    fn new_driver_task<'py>(
        &self,
        py: Python<'py>,
        ready: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, bool)> {
        let sentinel = self.sentinel.bind(py).call0()?;
        let kwargs = self.task_kwargs.bind(py);
        if self.task_path != TaskPath::PopSentinelStep {
            return Ok((
                self.driver_task.bind(py).call((sentinel,), Some(kwargs))?,
                false,
            ));
        }
        let queued_before = match ready {
            Some(ready) => ready.len()?,
            None => 0,
        };
        let task = self.driver_task.bind(py).call((&sentinel,), Some(kwargs))?;
        let mut popped = false;
        if let Some(ready) = ready {
            if ready.len()? > queued_before {
                popped = true;
                // pop(), not cancel(): a cancelled handle still sits in _ready and still makes
                // _run_once enter a task later. The sentinel never runs, so close it (no "never
                // awaited" warning) and tell the task not to log itself as destroyed pending.
                ready.call_method0(intern!(py, "pop"))?;
                sentinel.call_method0(intern!(py, "close"))?;
                task.setattr(intern!(py, "_log_destroy_pending"), false)?;
            }
        }
        Ok((task, popped))
    }

    /// A `Task` over the app's `coro` whose first step is never scheduled (the bridge drives
    /// the coroutine), with that step; or `None` if this loop gives no way to keep it out (no
    /// instance dict). `kwargs` are `Task`'s own (`loop`, `name`, `context`).
    pub fn app_task<'py>(
        &self,
        py: Python<'py>,
        coro: &Bound<'py, PyAny>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Option<AppTask<'py>>> {
        let Some(dict) = &self.loop_dict else {
            return Ok(None);
        };
        let dict = dict.bind(py);
        let call_soon = intern!(py, "call_soon");
        // The C Task looks `call_soon` up on the loop, where the instance dict comes before
        // the class; asyncio's and uvloop's own callers go through the class. No bytecode runs
        // between the set and the removal but Task's (its WeakSet registration), on the thread
        // that holds the drive.
        dict.set_item(call_soon, &self.catch_step)?;
        let made = self.app_task.bind(py).call((coro,), Some(kwargs));
        dict.del_item(call_soon)?;
        let step = self.step_catcher.get().caught.lock().unwrap().take();
        Ok(Some((made?, step)))
    }

    /// asyncio's own `Task(coro, **kwargs)`, for a loop the bridge does not drive.
    pub fn stock_task<'py>(
        &self,
        coro: &Bound<'py, PyAny>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.stock_task.bind(coro.py()).call((coro,), kwargs)
    }

    pub fn cancelled_error<'py>(
        &self,
        py: Python<'py>,
        msg: Option<&Py<PyAny>>,
    ) -> Bound<'py, PyAny> {
        let cls = self.cancelled_error.bind(py);
        let made = match msg {
            Some(msg) => cls.call1((msg,)),
            None => cls.call0(),
        };
        made.unwrap_or_else(|err| err.into_value(py).into_bound(py).into_any())
    }
}
