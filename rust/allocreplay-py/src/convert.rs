//! JSON-shaped values (metadata, report dicts) to and from Python objects, walked natively:
//! no JSON text crosses the boundary.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;
use serde_json::Value;

/// `None`, `bool`, `int`, `float`, `str`, `list` and `dict` for the JSON value.
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_bound_py_any(py)
            } else if let Some(i) = n.as_i64() {
                i.into_bound_py_any(py)
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)
            }
        }
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for x in a {
                list.append(to_py(py, x)?)?;
            }
            Ok(list.into_any())
        }
        Value::Object(o) => {
            let dict = PyDict::new(py);
            for (k, x) in o {
                dict.set_item(k, to_py(py, x)?)?;
            }
            Ok(dict.into_any())
        }
    }
}

/// The JSON value of a Python object made of `None`, `bool`, `int`, `float`, `str`, lists,
/// tuples and dicts with string keys.
pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        Ok(Value::Null)
    } else if obj.is_instance_of::<PyBool>() {
        Ok(Value::Bool(obj.extract()?))
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => Ok(Value::from(i)),
            Err(_) => Ok(Value::from(obj.extract::<u64>()?)),
        }
    } else if obj.is_instance_of::<PyFloat>() {
        Ok(serde_json::Number::from_f64(obj.extract()?).map_or(Value::Null, Value::Number))
    } else if obj.is_instance_of::<PyString>() {
        Ok(Value::String(obj.extract()?))
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            let key: String = k.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "metadata keys must be strings, got {}",
                    k.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                ))
            })?;
            map.insert(key, from_py(&v)?);
        }
        Ok(Value::Object(map))
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        Ok(Value::Array(obj.try_iter()?.map(|x| from_py(&x?)).collect::<PyResult<_>>()?))
    } else {
        Err(PyTypeError::new_err(format!("cannot store a {} in trace metadata", obj.get_type().name()?)))
    }
}
