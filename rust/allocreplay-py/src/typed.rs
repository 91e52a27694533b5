//! Typed results: a frozen pyclass around a core struct, one getter per field. The getters
//! carry the struct's field names, which are also the keys of `to_dict()` (the struct's serde
//! form: what `--json` prints), so renaming a Rust field renames the Python attribute and the
//! JSON key together, and `tests/test_typed.py` notices.

/// `typed_result!(Name wraps core::Type { field: PythonFacingType, ... })`: the field list
/// must name every field of the core struct (the tests compare it with `to_dict()`'s keys).
macro_rules! typed_result {
    ($(#[$doc:meta])* $py:ident wraps $core:ty { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[pyclass(frozen, module = "allocreplay._core")]
        pub struct $py {
            pub inner: $core,
        }

        #[pymethods]
        #[allow(clippy::clone_on_copy)]
        impl $py {
            $(
                #[getter]
                fn $field(&self) -> $ty {
                    self.inner.$field.clone()
                }
            )*

            /// The fields as a dict: the keys and values `--json` prints (the struct's serde
            /// form), in the struct's order.
            fn to_dict<'py>(&self, py: Python<'py>) -> crate::errors::BindingResult<Bound<'py, pyo3::types::PyDict>> {
                crate::errors::guard(|| {
                    let serde_json::Value::Object(mut fields) = serde_json::to_value(&self.inner).expect("results serialize") else {
                        unreachable!("structs serialize as objects")
                    };
                    let dict = pyo3::types::PyDict::new(py);
                    for key in [$(stringify!($field)),*] {
                        if let Some(v) = fields.remove(key) {
                            dict.set_item(key, crate::convert::to_py(py, &v)?)?;
                        }
                    }
                    // Keys serde names differently from the fields (none today) still come along.
                    for (key, v) in fields {
                        dict.set_item(key, crate::convert::to_py(py, &v)?)?;
                    }
                    Ok(dict)
                })
            }

            /// `report["ok"]`: the field of that name, for scripts written when these results
            /// were dicts.
            fn __getitem__<'py>(slf: &Bound<'py, Self>, key: &str) -> PyResult<Bound<'py, PyAny>> {
                const FIELDS: &[&str] = &[$(stringify!($field)),*];
                if FIELDS.contains(&key) {
                    slf.getattr(key)
                } else {
                    Err(pyo3::exceptions::PyKeyError::new_err(key.to_string()))
                }
            }

            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                let parts: Vec<String> = vec![
                    $( format!("{}={}", stringify!($field), slf.getattr(stringify!($field))?.repr()?) ),*
                ];
                Ok(format!("{}({})", stringify!($py), parts.join(", ")))
            }
        }
    };
}

pub(crate) use typed_result;
