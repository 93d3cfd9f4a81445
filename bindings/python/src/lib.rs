//! `import failover`: the engine for Python (PyO3, one abi3 wheel for
//! CPython 3.9 and newer).
//!
//! Thin on purpose: every verdict is the library's
//! ([`failover::Engine::classify_with`]), and this crate only converts —
//! Python values into [`ProviderError`]s, verdicts into Python objects,
//! [`failover::errors::RulesError`] into `failover.RulesError`.
//! `classify_many` copies a batch of columns out of Python, releases the
//! GIL while the engine runs over them on several threads (one
//! [`Scratch`] each), and hands back one list per output field.
//!
//! ```python
//! import failover
//! engine = failover.Engine()
//! engine.classify(message="Rate limit reached", status=429).reason   # 'rate_limit'
//! ```

use std::collections::HashMap;
use std::path::PathBuf;

use failover::errors::{Diagnostics, RulesError as LibRulesError, Severity};
use failover::{Body, Classification, Engine, ProviderError, Rules, Scratch};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyString};

create_exception!(
    failover,
    RulesError,
    PyException,
    "Rules that cannot be used: a directory that cannot be read, or rules with errors. \
     `str(e)` is the rendered diagnostics (as `failover check` prints them); \
     `e.diagnostics` lists each one as a dict (code, severity, file, line, col)."
);
create_exception!(
    failover,
    ModelError,
    PyException,
    "A model file that cannot be used: missing, damaged, or not a failover model."
);

/// Below this many rows, `classify_many` stays on the calling thread:
/// starting threads costs more than they save.
const ROWS_PER_THREAD: usize = 4096;

/// A compiled ruleset, with the evidence model it consults. Build once,
/// share it between threads.
///
/// `Engine(rules=None, *, sources=None, defaults=True, model="embedded",
/// min_confidence=None)`: `rules` are directories of operator `.rules`
/// files, highest priority first, layered over the embedded defaults
/// (`defaults=False` leaves those out); `sources` are rules files held in
/// memory, as `(name, text)` pairs; `model` is `"embedded"`, a model file
/// from `failover model train`, or None for the rules alone;
/// `min_confidence` is one probability the model's top reason needs to
/// decide, for every reason (None: per-reason thresholds from the cost of
/// each mistake, as `failover classify` without `--min-confidence`).
/// Raises `RulesError` (with every diagnostic) and `ModelError`.
#[pyclass(name = "Engine", module = "failover", frozen)]
struct PyEngine {
    engine: Engine,
}

/// What `model=` names: the embedded model or a model file.
enum ModelChoice {
    Embedded,
    File(PathBuf),
}

impl<'a, 'py> FromPyObject<'a, 'py> for ModelChoice {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.extract::<String>() {
            if s == "embedded" {
                return Ok(ModelChoice::Embedded);
            }
        }
        match obj.extract::<PathBuf>() {
            Ok(p) => Ok(ModelChoice::File(p)),
            Err(_) => Err(PyTypeError::new_err(format!(
                "`model` must be \"embedded\", a model file's path or None, not {}",
                type_name(&obj)
            ))),
        }
    }
}

#[pymethods]
impl PyEngine {
    /// Builds an engine: operator rules directories (`rules`, highest
    /// priority first) layered over the embedded defaults, as
    /// `failover classify --rules DIR …` does.
    #[new]
    #[pyo3(signature = (rules=None, *, sources=None, defaults=true, model=Some(ModelChoice::Embedded), min_confidence=None))]
    #[pyo3(
        text_signature = "(rules=None, *, sources=None, defaults=True, model='embedded', min_confidence=None)"
    )]
    fn new(
        py: Python<'_>,
        rules: Option<Vec<PathBuf>>,
        sources: Option<Vec<(String, String)>>,
        defaults: bool,
        model: Option<ModelChoice>,
        min_confidence: Option<f64>,
    ) -> PyResult<Self> {
        let mut builder = Rules::new();
        for dir in rules.unwrap_or_default() {
            builder = builder.dir(dir);
        }
        for (name, text) in sources.unwrap_or_default() {
            builder = builder.source(name, text);
        }
        if !defaults {
            builder = builder.without_defaults();
        }
        // None: the per-reason thresholds from the cost of each mistake,
        // as `failover classify` without `--min-confidence`.
        let confidence = failover::evidence::Confidence::from(match min_confidence {
            None => None,
            Some(p) if (0.0..=1.0).contains(&p) => Some(p as f32),
            Some(p) => {
                return Err(PyValueError::new_err(format!(
                    "`min_confidence` must be a probability between 0 and 1, not {p}"
                )))
            }
        });
        let engine = py
            .detach(|| builder.build())
            .map_err(|e| rules_error(py, e))?;
        let engine = match model {
            None => engine,
            Some(ModelChoice::Embedded) => {
                engine.with_model(failover::evidence::builtin(), confidence)
            }
            Some(ModelChoice::File(path)) => {
                let m = failover::evidence::read_file(&path)
                    .map_err(|e| ModelError::new_err(e.to_string()))?;
                engine.with_model(std::sync::Arc::new(m), confidence)
            }
        };
        Ok(PyEngine { engine })
    }

    /// The reasons the rules declare, in declaration order.
    #[getter]
    fn reasons(&self) -> Vec<&str> {
        self.engine.reason_names().collect()
    }

    /// Classifies one error; every argument is optional: those of a
    /// `failover classify` input line. `status` is 100–599 (an int or a
    /// string of digits; anything else raises ValueError); `body` the
    /// response body as text, or a parsed JSON body (a dict or a list);
    /// `model` the model the call was for. Returns a `Verdict`.
    #[pyo3(signature = (message=None, *, status=None, provider=None, code=None, r#type=None, body=None, model=None))]
    #[allow(clippy::too_many_arguments)]
    fn classify(
        &self,
        message: Option<&Bound<'_, PyAny>>,
        status: Option<&Bound<'_, PyAny>>,
        provider: Option<&Bound<'_, PyAny>>,
        code: Option<&Bound<'_, PyAny>>,
        r#type: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Verdict> {
        let row = Row::read([message, provider, code, r#type, model], status, body, None)?;
        let c = self.engine.classify(&row.error());
        Ok(Verdict::of(&c))
    }

    /// Classifies and tells how: the atoms found, the rules verified and
    /// the winner with its file:line (what `failover classify --explain`
    /// prints).
    #[pyo3(signature = (message=None, *, status=None, provider=None, code=None, r#type=None, body=None, model=None))]
    #[allow(clippy::too_many_arguments)]
    fn explain(
        &self,
        message: Option<&Bound<'_, PyAny>>,
        status: Option<&Bound<'_, PyAny>>,
        provider: Option<&Bound<'_, PyAny>>,
        code: Option<&Bound<'_, PyAny>>,
        r#type: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Explanation> {
        let row = Row::read([message, provider, code, r#type, model], status, body, None)?;
        let (c, ex) = self.engine.explain(&row.error());
        Ok(Explanation {
            verdict: Verdict::of(&c),
            atoms: ex.atoms_hit.clone(),
            text: failover::rules::render_explanation(&self.engine, &c, &ex),
        })
    }

    /// Classifies many errors: each argument is a column (a list, a
    /// tuple, a pandas or Polars Series, a pyarrow Array or ChunkedArray,
    /// any iterable) or one value for every row; the columns have one
    /// length. Returns a dict of equally long lists: `reason`, `rule`,
    /// `decided_by`, `failover`, `probability`, `status`, `truncated`
    /// (`pandas.DataFrame(result)`, `polars.DataFrame(result)` and
    /// `pyarrow.table(result)` take it as it is). The GIL is released
    /// while the engine runs.
    #[pyo3(signature = (message=None, *, status=None, provider=None, code=None, r#type=None, body=None, model=None, threads=None))]
    #[allow(clippy::too_many_arguments)]
    fn classify_many<'py>(
        &self,
        py: Python<'py>,
        message: Option<&Bound<'py, PyAny>>,
        status: Option<&Bound<'py, PyAny>>,
        provider: Option<&Bound<'py, PyAny>>,
        code: Option<&Bound<'py, PyAny>>,
        r#type: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        model: Option<&Bound<'py, PyAny>>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let names = ["message", "provider", "code", "type", "model"];
        let texts = [message, provider, code, r#type, model];
        let mut columns: Vec<(&str, Column<'py>)> = Vec::new();
        for (name, v) in names
            .iter()
            .zip(texts)
            .chain([(&"status", status), (&"body", body)])
        {
            columns.push((name, Column::of(v)?));
        }
        let rows = batch_len(&columns)?;
        let mut batch = Vec::with_capacity(rows);
        for i in 0..rows {
            let v: [Option<Bound<'py, PyAny>>; 7] = std::array::from_fn(|k| columns[k].1.at(i));
            batch.push(Row::read(
                [&v[0], &v[1], &v[2], &v[3], &v[4]].map(Option::as_ref),
                v[5].as_ref(),
                v[6].as_ref(),
                Some(i),
            )?);
        }
        let threads = threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, rows.div_ceil(ROWS_PER_THREAD).max(1));
        let engine = &self.engine;
        let out: Vec<Out<'_>> = py.detach(|| classify_batch(engine, &batch, threads));
        columns_of(py, &out)
    }
}

/// Classifies `batch` in order, on `threads` threads (each with its own
/// scratch space).
fn classify_batch<'e>(engine: &'e Engine, batch: &[Row], threads: usize) -> Vec<Out<'e>> {
    let run = |rows: &[Row]| {
        let mut scratch = Scratch::default();
        rows.iter()
            .map(|r| Out::of(&engine.classify_with(&r.error(), &mut scratch)))
            .collect::<Vec<_>>()
    };
    if threads <= 1 {
        return run(batch);
    }
    let per = batch.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = batch.chunks(per).map(|c| s.spawn(move || run(c))).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// One verdict, as `classify_many` keeps it until the GIL is back.
struct Out<'e> {
    reason: &'e str,
    rule: Option<&'e str>,
    decided_by: &'static str,
    failover: bool,
    probability: Option<f32>,
    status: Option<u16>,
    truncated: bool,
}

impl<'e> Out<'e> {
    fn of(c: &Classification<'e>) -> Self {
        Out {
            reason: c.reason,
            rule: c.rule,
            decided_by: c.decided_by.as_str(),
            failover: c.failover,
            probability: failover::stream::line_probability(c),
            status: c.status,
            truncated: c.truncated,
        }
    }
}

/// The verdicts as one list per field; each distinct string is one
/// Python object, shared by the rows that have it.
fn columns_of<'py, 'e>(py: Python<'py>, out: &[Out<'e>]) -> PyResult<Bound<'py, PyDict>> {
    let mut strings: HashMap<&'e str, Bound<'py, PyString>> = HashMap::new();
    let mut intern = |s: &'e str| -> Bound<'py, PyAny> {
        strings
            .entry(s)
            .or_insert_with(|| PyString::new(py, s))
            .clone()
            .into_any()
    };
    let none = || py.None().into_bound(py);
    let mut reason = Vec::with_capacity(out.len());
    let mut rule = Vec::with_capacity(out.len());
    let mut decided_by = Vec::with_capacity(out.len());
    for o in out {
        reason.push(intern(o.reason));
        rule.push(o.rule.map_or_else(none, &mut intern));
        decided_by.push(intern(o.decided_by));
    }
    let d = PyDict::new(py);
    d.set_item("reason", PyList::new(py, reason)?)?;
    d.set_item("rule", PyList::new(py, rule)?)?;
    d.set_item("decided_by", PyList::new(py, decided_by)?)?;
    d.set_item(
        "failover",
        out.iter().map(|o| o.failover).collect::<Vec<_>>(),
    )?;
    d.set_item(
        "probability",
        out.iter()
            .map(|o| o.probability.map(as_printed))
            .collect::<Vec<_>>(),
    )?;
    d.set_item("status", out.iter().map(|o| o.status).collect::<Vec<_>>())?;
    d.set_item(
        "truncated",
        out.iter().map(|o| o.truncated).collect::<Vec<_>>(),
    )?;
    Ok(d)
}

/// A probability as the output line prints it (the shortest decimal that
/// reads back as the same `f32`), so that the Python float equals the
/// number in `failover classify`'s output.
fn as_printed(p: f32) -> f64 {
    p.to_string().parse().unwrap_or(f64::from(p))
}

/// The verdict on one error: the fields of a `failover classify` line.
#[derive(Clone)]
#[pyclass(name = "Verdict", module = "failover", frozen, get_all)]
struct Verdict {
    /// The reason (`rate_limit`, `billing`, …; `unclassified` when nothing decided).
    reason: String,
    /// The deciding rule's id, or None when no rule decided.
    rule: Option<String>,
    /// `rule`, `weak rule`, `model`, `status rule` or `none`.
    decided_by: &'static str,
    /// Whether the reason continues the fallback.
    failover: bool,
    /// The model's probability, when the model decided (three decimals).
    probability: Option<f64>,
    /// The status used (given, from the body, or from the message text).
    status: Option<u16>,
    /// The message was judged on its first 1 MiB only.
    truncated: bool,
    /// The `failover classify` output line of this verdict, byte for byte.
    json: String,
}

impl Verdict {
    fn of(c: &Classification<'_>) -> Self {
        Verdict {
            reason: c.reason.to_string(),
            rule: c.rule.map(str::to_string),
            decided_by: c.decided_by.as_str(),
            failover: c.failover,
            probability: failover::stream::line_probability(c).map(as_printed),
            status: c.status,
            truncated: c.truncated,
            json: failover::stream::verdict_line(c),
        }
    }
}

#[pymethods]
impl Verdict {
    /// The verdict as a dict (the keys of a `failover classify` line).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("reason", &self.reason)?;
        d.set_item("rule", &self.rule)?;
        d.set_item("decided_by", self.decided_by)?;
        d.set_item("failover", self.failover)?;
        d.set_item("probability", self.probability)?;
        d.set_item("status", self.status)?;
        d.set_item("truncated", self.truncated)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Verdict(reason={:?}, rule={}, decided_by={:?}, failover={})",
            self.reason,
            self.rule
                .as_deref()
                .map_or("None".into(), |r| format!("{r:?}")),
            self.decided_by,
            if self.failover { "True" } else { "False" }
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Verdict>()
            .is_ok_and(|o| o.get().json == self.json)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.json.hash(&mut h);
        h.finish()
    }
}

/// How a verdict was reached.
#[pyclass(name = "Explanation", module = "failover", frozen, get_all)]
struct Explanation {
    /// The verdict.
    verdict: Verdict,
    /// The atoms (literal strings) found in the message, in order.
    atoms: Vec<String>,
    /// The readable account `failover classify --explain` prints.
    text: String,
}

#[pymethods]
impl Explanation {
    fn __str__(&self) -> &str {
        &self.text
    }
}

/// One error's fields, owned (copied out of Python).
#[derive(Default)]
struct Row {
    /// message, provider, code, type, model
    text: [Option<String>; 5],
    status: Option<u16>,
    body: Option<String>,
}

impl Row {
    /// Reads one error's arguments; `index` is the row of a batch, for
    /// the error message.
    fn read(
        text: [Option<&Bound<'_, PyAny>>; 5],
        status: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        index: Option<usize>,
    ) -> PyResult<Row> {
        let names = ["message", "provider", "code", "type", "model"];
        let mut row = Row::default();
        for ((slot, v), name) in row.text.iter_mut().zip(text).zip(names) {
            *slot = text_of(v, name, index)?;
        }
        row.status = status_of(status, index)?;
        row.body = body_of(body, index)?;
        Ok(row)
    }

    fn error(&self) -> ProviderError<'_> {
        let [message, provider, code, error_type, model] = &self.text;
        ProviderError {
            message: message.as_deref(),
            provider: provider.as_deref(),
            code: code.as_deref(),
            error_type: error_type.as_deref(),
            model: model.as_deref(),
            status: self.status,
            body: self.body.as_deref().map(Body::Text),
        }
    }
}

/// Where a bad value is: `row 3's `status`` or `` `status` ``.
fn place(name: &str, index: Option<usize>) -> String {
    match index {
        Some(i) => format!("row {i}: `{name}`"),
        None => format!("`{name}`"),
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A missing value: None, NaN (pandas' missing number) or `pandas.NA`.
fn is_missing(v: &Bound<'_, PyAny>) -> bool {
    if v.is_none() {
        return true;
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return f.value().is_nan();
    }
    // Checked last: reading the type's name allocates.
    !v.is_instance_of::<PyString>() && type_name(v) == "NAType"
}

/// A str's text; one that is not valid Unicode (a lone surrogate) is a
/// ValueError naming where it is.
fn utf8(s: &Bound<'_, PyString>, name: &str, index: Option<usize>) -> PyResult<String> {
    match s.to_cow() {
        Ok(t) => Ok(t.into_owned()),
        Err(e) => Err(PyValueError::new_err(format!(
            "{} is not valid text: {e}",
            place(name, index)
        ))),
    }
}

fn text_of(
    v: Option<&Bound<'_, PyAny>>,
    name: &str,
    index: Option<usize>,
) -> PyResult<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    if let Ok(s) = v.cast::<PyString>() {
        return utf8(s, name, index).map(Some);
    }
    if is_missing(v) {
        return Ok(None);
    }
    Err(PyTypeError::new_err(format!(
        "{} must be a str or None, not {}",
        place(name, index),
        type_name(v)
    )))
}

/// An HTTP status: an int 100–599 or a string of those digits (as the
/// JSONL contract takes it), or a whole float (a pandas column of ints
/// with gaps is float).
fn status_of(v: Option<&Bound<'_, PyAny>>, index: Option<usize>) -> PyResult<Option<u16>> {
    let Some(v) = v.filter(|v| !is_missing(v)) else {
        return Ok(None);
    };
    let bad = || {
        PyValueError::new_err(format!(
            "{} must be an HTTP status code (an integer 100–599), not {}",
            place("status", index),
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    };
    let n: Option<i64> = if v.is_instance_of::<pyo3::types::PyBool>() {
        None
    } else if let Ok(n) = v.extract::<i64>() {
        Some(n)
    } else if let Ok(f) = v.cast::<PyFloat>() {
        let f = f.value();
        (f.fract() == 0.0 && f.abs() < 1e6).then_some(f as i64)
    } else if let Ok(s) = v.cast::<PyString>() {
        s.to_cow()?.trim().parse::<i64>().ok()
    } else {
        return Err(PyTypeError::new_err(format!(
            "{} must be an int, a str of digits or None, not {}",
            place("status", index),
            type_name(v)
        )));
    };
    match n {
        Some(s @ 100..=599) => Ok(Some(s as u16)),
        _ => Err(bad()),
    }
}

/// A body: its text, or a dict or list (a parsed JSON body) as JSON text.
fn body_of(v: Option<&Bound<'_, PyAny>>, index: Option<usize>) -> PyResult<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    if let Ok(s) = v.cast::<PyString>() {
        return utf8(s, "body", index).map(Some);
    }
    if is_missing(v) {
        return Ok(None);
    }
    if v.is_instance_of::<PyDict>() || v.is_instance_of::<PyList>() {
        let json = v.py().import("json")?.call_method1("dumps", (v,))?;
        return Ok(Some(json.extract()?));
    }
    Err(PyTypeError::new_err(format!(
        "{} must be a str, a dict, a list or None, not {}",
        place("body", index),
        type_name(v)
    )))
}

/// One argument of `classify_many`: a column of values, or one value for
/// every row.
enum Column<'py> {
    Absent,
    Scalar(Bound<'py, PyAny>),
    Values(Vec<Bound<'py, PyAny>>),
}

impl<'py> Column<'py> {
    fn of(v: Option<&Bound<'py, PyAny>>) -> PyResult<Column<'py>> {
        let Some(v) = v else {
            return Ok(Column::Absent);
        };
        // One value for every row: a str, a number, a dict (one JSON
        // body), None; bytes too (refused as text, not read as a column
        // of ints).
        if v.is_none()
            || v.is_instance_of::<PyString>()
            || v.is_instance_of::<pyo3::types::PyBytes>()
            || v.is_instance_of::<PyDict>()
            || v.extract::<i64>().is_ok()
            || v.is_instance_of::<PyFloat>()
        {
            return Ok(Column::Scalar(v.clone()));
        }
        // pyarrow arrays iterate as pyarrow scalars: their plain values
        // first. pandas and Polars Series have `to_list`.
        let plain = if v.hasattr("to_pylist")? {
            v.call_method0("to_pylist")?
        } else if v.hasattr("to_list")? {
            v.call_method0("to_list")?
        } else {
            v.clone()
        };
        let items = plain.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "each argument of `classify_many` must be a column (a list, a Series, an array, \
                 any iterable) or one value for every row, not {}",
                type_name(v)
            ))
        })?;
        Ok(Column::Values(items.collect::<PyResult<Vec<_>>>()?))
    }

    fn len(&self) -> Option<usize> {
        match self {
            Column::Values(v) => Some(v.len()),
            _ => None,
        }
    }

    fn at(&self, i: usize) -> Option<Bound<'py, PyAny>> {
        match self {
            Column::Absent => None,
            Column::Scalar(v) => Some(v.clone()),
            Column::Values(v) => Some(v[i].clone()),
        }
    }
}

/// The number of rows: the columns' one length (1 when every argument is
/// a single value).
fn batch_len(columns: &[(&str, Column<'_>)]) -> PyResult<usize> {
    let mut len: Option<(&str, usize)> = None;
    for (name, c) in columns {
        if let Some(n) = c.len() {
            match len {
                Some((first, m)) if m != n => {
                    return Err(PyValueError::new_err(format!(
                        "the columns differ in length: `{first}` has {m} rows, `{name}` has {n}"
                    )))
                }
                None => len = Some((name, n)),
                _ => {}
            }
        }
    }
    Ok(len.map_or(1, |(_, n)| n))
}

/// `failover.RulesError` carrying the rendered diagnostics and each one's
/// code and place.
fn rules_error(py: Python<'_>, e: LibRulesError) -> PyErr {
    let (text, listed) = match &e {
        LibRulesError::Invalid(d) => (d.render(), diagnostics(py, d)),
        _ => (e.to_string(), Ok(PyList::empty(py))),
    };
    let err = RulesError::new_err(text);
    if let Ok(list) = listed {
        let _ = err.value(py).setattr("diagnostics", list);
    }
    err
}

fn diagnostics<'py>(py: Python<'py>, d: &Diagnostics) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for diag in d.as_slice() {
        let item = PyDict::new(py);
        let file = d.sources().get(diag.span.file);
        item.set_item("code", diag.code.as_str())?;
        item.set_item(
            "severity",
            match diag.severity() {
                Severity::Error => "error",
                Severity::Warning => "warning",
            },
        )?;
        item.set_item("file", file.name())?;
        item.set_item("line", diag.span.line)?;
        item.set_item("col", diag.span.col)?;
        list.append(item)?;
    }
    Ok(list)
}

/// Reads a labelled corpus file (the field corpus' format,
/// `tests/field/README.md`) with the library's own reader: one dict per
/// item (`provider`, `model`, `status`, `code`, `type`, `message`, `body`,
/// `expected`, `line`).
#[pyfunction]
fn read_corpus<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyList>> {
    let text = std::fs::read_to_string(&path).map_err(|e| {
        pyo3::exceptions::PyOSError::new_err(format!("cannot read `{}`: {e}", path.display()))
    })?;
    let file =
        failover::field::parse(&path.to_string_lossy(), &text).map_err(PyValueError::new_err)?;
    let list = PyList::empty(py);
    for (item, line) in file.items.iter().zip(&file.lines) {
        let d = PyDict::new(py);
        d.set_item("provider", &item.provider)?;
        d.set_item("model", &item.model)?;
        d.set_item("status", item.status)?;
        d.set_item("code", &item.code)?;
        d.set_item("type", &item.error_type)?;
        d.set_item("message", &item.message)?;
        d.set_item(
            "body",
            item.body
                .as_ref()
                .map(|b| b.as_str().map_or_else(|| b.to_string(), str::to_string)),
        )?;
        d.set_item("expected", item.expected.as_slice())?;
        d.set_item("line", line)?;
        list.append(d)?;
    }
    Ok(list)
}

/// The engine for Python: classify LLM provider errors with the failover
/// rules (`Engine`, `Verdict`, `RulesError`).
#[pymodule]
#[pyo3(name = "failover")]
fn failover_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_class::<Verdict>()?;
    m.add_class::<Explanation>()?;
    m.add("RulesError", m.py().get_type::<RulesError>())?;
    m.add("ModelError", m.py().get_type::<ModelError>())?;
    m.add_function(wrap_pyfunction!(read_corpus, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
