//! streamremat's batch fast path in native code: `Folder` folds a whole batch
//! of a fast-path shape into a `FixedWindowState` (see `fold.rs`); `scan_json`
//! exposes the JSON scanner to the tests that hold it to orjson; `partition_indexes`
//! is Kafka's default partitioner for a batch of keys (see `murmur.rs`); `Table`
//! holds a fast-path shape's state itself, no Python object per entry (see
//! `table.rs`, `core/native_state.py`), and closes its windows in key order
//! straight into the sink's bytes (`closed.rs`).

mod accs;
mod attrs;
mod batches;
mod closed;
mod fold;
mod json;
mod murmur;
mod num;
mod outjson;
mod output;
mod raw;
mod store;
mod table;
mod table_codec;
mod table_fold;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use json::Val;

fn tagged<'py>(py: Python<'py>, v: Val<'_>) -> PyResult<Bound<'py, PyTuple>> {
    Ok(match v {
        Val::Missing => ("missing", py.None()).into_pyobject(py)?,
        Val::Int(i) => ("int", i.into_pyobject(py)?.into_any().unbind()).into_pyobject(py)?,
        Val::Float(f) => ("float", f.into_pyobject(py)?.into_any().unbind()).into_pyobject(py)?,
        Val::Str(s, esc) => {
            let tag = if esc { "escaped_str" } else { "str" };
            (tag, PyBytes::new(py, s).into_any().unbind()).into_pyobject(py)?
        }
        Val::Other => ("other", py.None()).into_pyobject(py)?,
    })
}

/// What the scanner makes of `data`: None when it leaves it to orjson, else per
/// name in `fields` a (tag, value) pair; with `fields` None, the (tag, value) of
/// the whole document. Tags: missing, int, float, str / escaped_str (raw bytes
/// between the quotes), other.
#[pyfunction]
#[pyo3(signature = (data, fields=None))]
fn scan_json<'py>(
    py: Python<'py>, data: &[u8], fields: Option<Vec<String>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match fields {
        None => match json::whole(data) {
            Ok(v) => Ok(Some(tagged(py, v)?.into_any())),
            Err(_) => Ok(None),
        },
        Some(names) => {
            let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
            let mut out = vec![Val::Missing; names.len()];
            if json::pick(data, &names, &mut out).is_err() {
                return Ok(None);
            }
            let items = out.into_iter().map(|v| tagged(py, v)).collect::<PyResult<Vec<_>>>()?;
            Ok(Some(PyList::new(py, items)?.into_any()))
        }
    }
}

#[pymodule]
fn streamremat_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<fold::Folder>()?;
    m.add_class::<raw::RawRecords>()?;
    m.add_class::<table::Table>()?;
    m.add_class::<table::ClosedWin>()?;
    m.add_class::<closed::SortedWin>()?;
    m.add_class::<closed::WinRows>()?;
    m.add_function(wrap_pyfunction!(closed::take_sorted, m)?)?;
    m.add_function(wrap_pyfunction!(scan_json, m)?)?;
    m.add_function(wrap_pyfunction!(murmur::partition_indexes, m)?)?;
    output::register(m)?;
    Ok(())
}
