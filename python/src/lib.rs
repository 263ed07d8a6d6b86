//! Python bindings of Sluice: the extension module `sluice._sluice`, wrapped by the pure-Python
//! package `sluice` (which adds the `Frame` class, the exception classes and the typed stubs).
//!
//! Every function here takes bytes and returns plain Python objects (dicts, lists, bytes); the
//! dict of a parsed frame has exactly the keys and values of `sluice pcap inspect --json` (see
//! `report.rs`). Errors are raised as the exception classes of `sluice.errors`, built with the
//! same context as the CLI's messages; nothing here panics on user input.

use pyo3::call::PyCallArgs;
use pyo3::prelude::*;

mod ops;
mod report;

/// Builds the exception `class` of the Python module `sluice.errors` with `args`.
///
/// If the module cannot be imported (the extension used without its package), the import
/// error is what is raised.
pub(crate) fn raise<'py, A: PyCallArgs<'py>>(py: Python<'py>, class: &str, args: A) -> PyErr {
    let made = py
        .import("sluice.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1(args));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// The extension module.
#[pymodule]
fn _sluice(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops::parse, m)?)?;
    m.add_function(wrap_pyfunction!(ops::verify, m)?)?;
    m.add_function(wrap_pyfunction!(ops::fill, m)?)?;
    m.add_function(wrap_pyfunction!(ops::gso, m)?)?;
    m.add_function(wrap_pyfunction!(ops::gro, m)?)?;
    m.add_function(wrap_pyfunction!(ops::pcap_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(ops::pcap_gso, m)?)?;
    m.add_function(wrap_pyfunction!(ops::pcap_gro, m)?)?;
    m.add_function(wrap_pyfunction!(ops::feature_names, m)?)?;
    Ok(())
}
