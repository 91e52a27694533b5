//! PyO3 bindings: `allocreplay._core`. One module per concept; this file only registers them.
//! Results cross as typed objects (`TraceInfo`, `ValidationReport`, `BfcValidationReport`) or
//! Arrow tables (`Table`), never JSON text; core errors are raised as the classes of
//! `allocreplay.errors` (`errors.rs`). Imports and replays run with the GIL released, on a
//! worker thread that Ctrl-C stops (`interrupt::detach`, the one way the GIL is released). Every
//! entry point that calls into the core runs under `errors::guard`: a panic is raised as
//! `allocreplay.errors.InternalError`, never as pyo3's `PanicException`.

mod analysis;
mod arrow;
mod convert;
mod errors;
mod info;
mod interrupt;
mod plan;
mod progress;
mod registry;
mod replay;
mod trace;
mod tune;
mod typed;
mod units;
mod validate;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::install_panic_hook();
    m.add_class::<trace::PyTrace>()?;
    m.add_class::<arrow::PyTable>()?;
    m.add_class::<replay::PyReplayResult>()?;
    m.add_class::<info::TraceInfo>()?;
    m.add_class::<validate::ValidationReport>()?;
    m.add_class::<validate::BfcValidationReport>()?;
    m.add_function(wrap_pyfunction!(trace::load, m)?)?;
    m.add_function(wrap_pyfunction!(trace::info_file, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay_file, m)?)?;
    m.add_class::<progress::PyProgress>()?;
    m.add_function(wrap_pyfunction!(validate::validate, m)?)?;
    m.add_function(wrap_pyfunction!(validate::validate_bfc, m)?)?;
    m.add_function(wrap_pyfunction!(plan::plan, m)?)?;
    m.add_function(wrap_pyfunction!(plan::offline, m)?)?;
    m.add_function(wrap_pyfunction!(plan::xla_runtime_trace, m)?)?;
    m.add_function(wrap_pyfunction!(units::parse_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(units::format_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(errors::debug_panic, m)?)?;
    m.add("POLICY_NAMES", allocreplay_core::registry::POLICY_NAMES.to_vec())?;
    m.add("FORMAT_VERSION", allocreplay_core::trace::FORMAT_VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    analysis::register(m)?;
    registry::register(m)?;
    tune::register(m)?;
    Ok(())
}
