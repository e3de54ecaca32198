/* ojas._C.Trainer and LR schedules: include/ojas/train.h and the schedules
 * of include/ojas/optim.h from Python. ojas/train.py gives them their
 * Python names.
 *
 * A Trainer owns its oj_trainer, which owns its engine and model. The
 * engine is handed to Python as an Engine object whose close frees the
 * trainer (EngineObject.on_close): tensors made on it (the model's
 * parameters, forward outputs) keep it, and so the trainer, alive; closing
 * the Trainer while numpy arrays or DLPack capsules of its memory are out
 * defers the free to the release of the last of them. */
#include <stdlib.h>
#include <string.h>

#include "ojas/optim.h"
#include "ojas/train.h"

#include "ojas_py.h"

typedef struct {
    PyObject *fn;      /* run's per-step callback (borrowed for the run), or NULL */
    PyObject *on_eval; /* run's eval callback (borrowed for the run), or NULL */
    int running;       /* inside run(): a pending signal (Ctrl-C) stops it */
    int failed;
    volatile sig_atomic_t stop;
} run_ctx;

static void run_on_metrics(const oj_train_metrics *m, void *p);

typedef struct {
    PyObject_HEAD
    run_ctx run;       /* the options' on_metrics context and stop flag */
    oj_trainer *t;     /* NULL once closed */
    EngineObject *eng; /* strong; its on_close frees t */
    PyObject *model;   /* the GPT of t, made on first use (strong) */
} TrainerObject;

static PyTypeObject Trainer_Type;

static void free_trainer(void *p) { oj_trainer_free(p); }

static oj_trainer *trainer_open(TrainerObject *o) {
    if (o->t == NULL) ojpy_raise_status(OJ_ERR_STATE, "the trainer is closed");
    return o->t;
}

/* The trainer for a method that steps, evaluates or writes: open and not
 * inside run() (its callbacks may read step, model and engine only). */
static oj_trainer *trainer_idle(TrainerObject *o, const char *what) {
    if (o->t != NULL && o->run.running) {
        char msg[160];
        snprintf(msg, sizeof msg, "Trainer.%s: the trainer is inside run() (a callback); return "
                 "False from the callback to stop the run", what);
        ojpy_raise_status(OJ_ERR_STATE, msg);
        return NULL;
    }
    return trainer_open(o);
}

/* A config from JSON text (applied to the defaults) and checked. */
static int config_from_json(const char *json, oj_train_config *c) {
    oj_error err = {0};
    *c = oj_train_config_default();
    if (oj_train_config_apply_json(c, json, &err) != OJ_OK || oj_train_config_check(c, &err) != OJ_OK) {
        ojpy_raise_status(err.status, err.message);
        return -1;
    }
    return 0;
}

/* Trainer(config_json or None, out_dir, resume=None, overwrite=False,
 * log=False): config None takes the one stored in the resumed checkpoint. */
static PyObject *trainer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    const char *json = NULL, *out_dir, *resume = NULL;
    int overwrite = 0, log = 0;
    if (!PyArg_ParseTuple(args, "zs|zpp:Trainer", &json, &out_dir, &resume, &overwrite, &log))
        return NULL;
    oj_train_config c;
    oj_error err = {0};
    if (json != NULL) {
        if (config_from_json(json, &c) < 0) return NULL;
    } else if (resume != NULL) {
        c = oj_train_config_default();
        if (oj_train_config_from_checkpoint(resume, &c, &err) != OJ_OK)
            return ojpy_raise_status(err.status, err.message);
    } else {
        return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "Trainer: give a config or a checkpoint to resume");
    }
    TrainerObject *o = (TrainerObject *)type->tp_alloc(type, 0);
    if (o == NULL) return NULL;
    oj_train_options opts = {.out_dir = out_dir, .resume = resume, .log = log ? stderr : NULL,
                             .overwrite = overwrite != 0, .stop = &o->run.stop,
                             .on_metrics = run_on_metrics, .ctx = &o->run,
                             /* a refused out_dir's advice in this API's words */
                             .resume_hint = "Trainer.resume('{}')",
                             .overwrite_hint = "overwrite=True", .out_hint = "out_dir"};
    EngineObject *e = (EngineObject *)OjpyEngine_Type.tp_alloc(&OjpyEngine_Type, 0);
    if (e == NULL) {
        Py_DECREF(o);
        return NULL;
    }
    oj_status st;
    oj_trainer *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = oj_trainer_create(&c, &opts, &t, &err);
    Py_END_ALLOW_THREADS
    if (st != OJ_OK) {
        Py_DECREF(e);
        Py_DECREF(o);
        return ojpy_raise_status(err.status, err.message);
    }
    e->eng = oj_trainer_engine(t);
    e->on_close = free_trainer;
    e->on_close_ctx = t;
    o->t = t;
    o->eng = e;
    return (PyObject *)o;
}

/* Close: the trainer (its engine, model, loaders, the out_dir lock) is
 * freed now, or when the last view of its memory is released. */
static PyObject *trainer_close(TrainerObject *o, PyObject *u) {
    if (o->t == NULL) Py_RETURN_NONE;
    o->t = NULL;
    o->run.stop = 1; /* inside run() (a callback): it stops, then the close happens */
    ojpy_engine_close_when_free(o->eng);
    Py_RETURN_NONE;
}

static void trainer_dealloc(TrainerObject *o) {
    /* tensors and the model hold the engine, not the trainer: the engine
     * outlives this object when they do */
    /* the engine's on_close frees the trainer when the Engine object is
     * collected (here, or after the last tensor of it); the trainer no
     * longer calls back into this object (only train_step and run do) */
    o->t = NULL;
    Py_CLEAR(o->model);
    Py_CLEAR(o->eng);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

/* A step's metrics as train_step and run's callback give them: is_eval
 * (False), step, max_steps, tokens, elapsed_s, loss, lr, muon_lr,
 * grad_norm, step_s, tokens_per_s, mfu, peak_bytes. */
static PyObject *step_dict(const oj_train_metrics *m) {
    return Py_BuildValue("{s:O,s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:L}", "is_eval", Py_False,
                         "step", (long long)m->step, "max_steps", (long long)m->max_steps, "tokens",
                         (long long)m->tokens, "elapsed_s", m->elapsed_s, "loss", m->loss, "lr", m->lr,
                         "muon_lr", m->muon_lr, "grad_norm", m->grad_norm, "step_s", m->step_s,
                         "tokens_per_s", m->tokens_per_s, "mfu", m->mfu, "peak_bytes",
                         (long long)m->peak_bytes);
}

/* An eval's record as run's and fit's on_eval get it: is_eval (True),
 * step, tokens, elapsed_s, val_loss, val_bpb (no step fields: the C record
 * holds NaN there). */
static PyObject *eval_dict(const oj_train_metrics *m) {
    return Py_BuildValue("{s:O,s:L,s:L,s:d,s:d,s:d}", "is_eval", Py_True, "step", (long long)m->step,
                         "tokens", (long long)m->tokens, "elapsed_s", m->elapsed_s, "val_loss",
                         m->val_loss, "val_bpb", m->val_bpb);
}

static PyObject *trainer_train_step(TrainerObject *o, PyObject *u) {
    oj_trainer *t = trainer_idle(o, "train_step");
    if (t == NULL) return NULL;
    oj_train_metrics m;
    memset(&m, 0, sizeof m);
    oj_error err = {0};
    if (oj_trainer_train_step(t, &m, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    return step_dict(&m);
}

static PyObject *trainer_checkpoint(TrainerObject *o, PyObject *u) {
    oj_trainer *t = trainer_idle(o, "checkpoint");
    if (t == NULL) return NULL;
    char path[4096];
    oj_error err = {0};
    if (oj_trainer_checkpoint(t, path, sizeof path, &err) != OJ_OK)
        return ojpy_raise_status(err.status, err.message);
    return PyUnicode_DecodeFSDefault(path);
}

static PyObject *trainer_eval(TrainerObject *o, PyObject *u) {
    oj_trainer *t = trainer_idle(o, "eval");
    if (t == NULL) return NULL;
    double loss = 0, bpb = 0;
    oj_error err = {0};
    if (oj_trainer_eval(t, &loss, &bpb, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    return Py_BuildValue("(dd)", loss, bpb);
}

static PyObject *trainer_step(TrainerObject *o, PyObject *u) {
    oj_trainer *t = trainer_open(o);
    return t ? PyLong_FromLongLong(oj_trainer_step(t)) : NULL;
}

static PyObject *trainer_model(TrainerObject *o, PyObject *u) {
    oj_trainer *t = trainer_open(o);
    if (t == NULL) return NULL;
    if (o->model == NULL) {
        /* the GPT keeps the Engine alive, and the Engine the trainer */
        o->model = ojpy_gpt_wrap(oj_trainer_model(t), o->eng, (PyObject *)o->eng);
        if (o->model == NULL) return NULL;
    }
    return Py_NewRef(o->model);
}

static PyObject *trainer_engine(TrainerObject *o, PyObject *u) {
    if (trainer_open(o) == NULL) return NULL;
    return Py_NewRef((PyObject *)o->eng);
}

/* oj_train_options.on_metrics of a run: a step goes to run_ctx.fn as
 * step_dict, an eval to run_ctx.on_eval as eval_dict. False from either
 * sets the stop flag; an exception sets it and marks the run failed (no
 * callback is called after that), and so does a signal whose Python
 * handler raises (Ctrl-C's KeyboardInterrupt: the run holds the GIL, so
 * Python's handler has only flagged it; PyErr_CheckSignals runs it). */
static void run_on_metrics(const oj_train_metrics *m, void *p) {
    run_ctx *c = p;
    if (c->running && !c->failed && PyErr_CheckSignals() < 0) {
        c->failed = 1;
        c->stop = 1;
        return;
    }
    PyObject *fn = m->is_eval ? c->on_eval : c->fn;
    if (c->failed || fn == NULL) return;
    PyObject *d = m->is_eval ? eval_dict(m) : step_dict(m);
    PyObject *r = d ? PyObject_CallOneArg(fn, d) : NULL;
    Py_XDECREF(d);
    if (r == NULL) {
        c->failed = 1;
        c->stop = 1;
        return;
    }
    if (r == Py_False) c->stop = 1;
    Py_DECREF(r);
}

/* run(callback=None, on_eval=None) -> result dict: oj_trainer_run (evals,
 * checkpoints, metrics.jsonl, time limit), calling callback(step_dict)
 * once after every step and on_eval(eval_dict) after every eval (either
 * may be None; TypeError when not callable). Either returning False stops
 * the run cleanly (an eval of that step, when there is a val split, and a
 * checkpoint are written; stop "signal"); one that raises stops it the same way and the exception
 * propagates, as does Ctrl-C's KeyboardInterrupt (looked for after every step). */
static PyObject *trainer_run(TrainerObject *o, PyObject *args) {
    PyObject *fn = Py_None, *on_eval = Py_None;
    if (!PyArg_ParseTuple(args, "|OO:run", &fn, &on_eval)) return NULL;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "run: callback must be callable or None");
        return NULL;
    }
    if (on_eval != Py_None && !PyCallable_Check(on_eval)) {
        PyErr_SetString(PyExc_TypeError, "run: on_eval must be callable or None");
        return NULL;
    }
    oj_trainer *t = trainer_idle(o, "run");
    if (t == NULL) return NULL;
    o->run.fn = fn == Py_None ? NULL : fn;
    o->run.on_eval = on_eval == Py_None ? NULL : on_eval;
    o->run.failed = 0;
    o->run.stop = 0;
    o->run.running = 1;
    /* the run holds the engine like a view: a close() from a callback
     * waits for the run's end (the trainer must outlive oj_trainer_run) */
    EngineObject *eng = ojpy_engine_call_begin(o->eng);
    oj_train_result r;
    memset(&r, 0, sizeof r);
    oj_error err = {0};
    oj_status st = oj_trainer_run(t, &r, &err);
    int failed = o->run.failed;
    o->run.running = 0;
    o->run.fn = NULL;
    o->run.on_eval = NULL;
    o->run.stop = 0;
    PyObject *res = NULL;
    static const char *stops[] = {"done", "time_limit", "signal"};
    if (failed) res = NULL;
    else if (st != OJ_OK) res = ojpy_raise_status(err.status, err.message);
    else res = Py_BuildValue("{s:s,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:L,s:s}", "stop",
                         stops[(int)r.stop < 3 ? (int)r.stop : 0], "step", (long long)r.step,
                         "tokens", (long long)r.tokens, "train_loss", r.train_loss, "val_loss",
                         r.val_loss, "val_bpb", r.val_bpb, "tokens_per_s", r.tokens_per_s,
                         "elapsed_s", r.elapsed_s, "peak_bytes", (long long)r.peak_bytes,
                         "checkpoint", r.checkpoint);
    ojpy_engine_call_end(eng); /* a close() asked for in the run happens here */
    return res;
}

static PyMethodDef trainer_methods[] = {
    {"train_step", (PyCFunction)trainer_train_step, METH_NOARGS,
     "one step as `ojas train` takes it -> metrics dict (oj_trainer_train_step)"},
    {"checkpoint", (PyCFunction)trainer_checkpoint, METH_NOARGS, "write a checkpoint -> its path"},
    {"eval", (PyCFunction)trainer_eval, METH_NOARGS, "(val_loss, val_bpb)"},
    {"step", (PyCFunction)trainer_step, METH_NOARGS, "steps done"},
    {"model", (PyCFunction)trainer_model, METH_NOARGS, "the GPT being trained"},
    {"engine", (PyCFunction)trainer_engine, METH_NOARGS, "the trainer's engine"},
    {"run", (PyCFunction)trainer_run, METH_VARARGS, "oj_trainer_run -> result dict"},
    {"close", (PyCFunction)trainer_close, METH_NOARGS, "free the trainer"},
    {NULL},
};

static PyTypeObject Trainer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ojas._C.Trainer",
    .tp_basicsize = sizeof(TrainerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trainer(config_json, out_dir, resume=None, overwrite=False, log=False): an oj_trainer.",
    .tp_new = trainer_new,
    .tp_dealloc = (destructor)trainer_dealloc,
    .tp_methods = trainer_methods,
};

/* train_config(json or None) -> the full config as JSON text (defaults
 * applied, checked); train_config_from_checkpoint(path) -> JSON text. */
static PyObject *py_train_config(PyObject *m, PyObject *args) {
    const char *json = NULL;
    if (!PyArg_ParseTuple(args, "|z:train_config", &json)) return NULL;
    oj_train_config c;
    if (config_from_json(json ? json : "{}", &c) < 0) return NULL;
    char *s = oj_train_config_to_json(&c);
    if (s == NULL) return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

static PyObject *py_train_config_from_checkpoint(PyObject *m, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:train_config_from_checkpoint", &path)) return NULL;
    oj_train_config c = oj_train_config_default();
    oj_error err = {0};
    if (oj_train_config_from_checkpoint(path, &c, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    char *s = oj_train_config_to_json(&c);
    if (s == NULL) return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

/* lr_factor(kind, warmup, total, decay, step_size, gamma, min_ratio, step)
 * -> the schedule's factor at step (oj_lr_schedule_factor); the schedule is
 * checked first (InvalidArgumentError naming the field). */
static PyObject *py_lr_factor(PyObject *m, PyObject *args) {
    oj_lr_schedule s;
    int kind;
    long long warm, total, decay, size, step;
    if (!PyArg_ParseTuple(args, "iLLLLddL:lr_factor", &kind, &warm, &total, &decay, &size, &s.gamma,
                          &s.min_ratio, &step))
        return NULL;
    if (kind < 0 || kind > 3) return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "lr_factor: unknown kind");
    s.kind = (oj_lr_kind)kind;
    s.warmup_steps = warm;
    s.total_steps = total;
    s.decay_steps = decay;
    s.step_size = size;
    oj_error err = {0};
    if (oj_lr_schedule_check(&s, &err) != OJ_OK) return ojpy_raise_status(err.status, err.message);
    return PyFloat_FromDouble(oj_lr_schedule_factor(&s, step));
}

static PyMethodDef train_methods[] = {
    {"train_config", py_train_config, METH_VARARGS, "train_config(json=None) -> full JSON"},
    {"train_config_from_checkpoint", py_train_config_from_checkpoint, METH_VARARGS,
     "the training config of a checkpoint as JSON"},
    {"lr_factor", py_lr_factor, METH_VARARGS, "an LR schedule's factor at a step"},
    {NULL},
};

int ojpy_train_init(PyObject *m) {
    if (PyType_Ready(&Trainer_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Trainer", (PyObject *)&Trainer_Type) < 0) return -1;
    return PyModule_AddFunctions(m, train_methods);
}
